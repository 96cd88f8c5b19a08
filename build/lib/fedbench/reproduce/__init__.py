"""Reproductions of the papers' tables and figures: catalog, runs, comparison with the published numbers."""
