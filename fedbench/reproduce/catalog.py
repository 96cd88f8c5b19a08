"""The catalog of reproductions: every paper module's entries (fedbench/reproduce/<paper>.py)."""

from __future__ import annotations

from fedbench.core.errors import unknown_choice
from fedbench.reproduce import composite, fedadmm, fedspeed, fedsso, losac  # noqa: F401 (each registers its entries)
from fedbench.reproduce.entry import REPRODUCTIONS, Reproduction


def load_catalog() -> dict[str, Reproduction]:
    return REPRODUCTIONS


def get(name: str) -> Reproduction:
    catalog = load_catalog()
    if name not in catalog:
        raise unknown_choice("reproduction", name, catalog)
    return catalog[name]
