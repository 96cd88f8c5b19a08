"""Checks of plain values from outside (a config, a checkpoint's history, a store's rows)."""

from __future__ import annotations

from typing import Any


def is_number(value: Any, kind: type | tuple[type, ...] = (int, float)) -> bool:
    """A number of `kind`, not a bool (which Python counts as an int)."""
    return isinstance(value, kind) and not isinstance(value, bool)
