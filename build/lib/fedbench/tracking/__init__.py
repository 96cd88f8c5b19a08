"""Tracking: the MLflow record, rounds-to-target, tables and plots."""
