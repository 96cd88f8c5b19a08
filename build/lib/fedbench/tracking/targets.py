"""Rounds-to-target: the first round whose test accuracy reaches each target."""

from __future__ import annotations


def rounds_to_target(history: list[dict[str, float]], target: float, metric: str = "test_accuracy") -> int | None:
    for row in history:
        if metric in row and row[metric] >= target:
            return int(row["round"])
    return None


def format_rounds(value: int | None, rounds: int) -> str:
    """'12', or '>R' when not reached within R rounds (the papers' notation)."""
    return str(value) if value is not None else f">{rounds}"


def target_key(target: float) -> str:
    return f"rounds_to_{target:g}"
