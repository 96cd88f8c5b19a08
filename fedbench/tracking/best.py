"""The rule that picks a method's best configuration, shared by `fedbench report --best-by` and the
reproductions' equal tuning (fedbench.reproduce, #18), so that both report the papers' "optimal
hyperparameters" the same way:

1. the primary metric decides (fewest rounds to the target; a higher accuracy, a lower loss);
2. ties are broken by the higher mean of the last `TIE_BREAK_LAST` logged test accuracies;
3. a value that is not finite (a target not reached by every seed, a metric not measured) ranks below
   every finite one, and ties that remain keep the first candidate in grid order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

TIE_BREAK_LAST = 10


def rule(primary: str, higher: bool) -> str:
    """The rule in words, for the reports that apply it."""
    word = "fewest" if primary.startswith("rounds_to") else "highest" if higher else "lowest"
    return (f"{word} {primary} (a target not reached by every seed, or a value not measured, loses), ties broken by "
            f"the higher mean of the last {TIE_BREAK_LAST} logged test accuracies, then by grid order")


def pick_best(scores: pd.DataFrame, keys: list[str], order: list[tuple[str, bool]]) -> pd.DataFrame:
    """Per value of `keys`, the one row of `scores` that is best by `order`, a list of (column, higher is
    better): the first column decides, each next one breaks the ties left by those before it. Non-finite
    values rank last; remaining ties keep the earliest row. Returns the chosen rows in their original order."""
    import numpy as np

    frame = scores.reset_index(drop=True)
    ranks = {}
    for i, (column, higher) in enumerate(order):
        v = frame[column].astype(float).to_numpy()
        finite = np.isfinite(v)
        ranks[f"_missing{i}"] = ~finite
        ranks[f"_value{i}"] = np.where(finite, -v if higher else v, 0.0)
    ranked = frame.assign(**ranks, _row=np.arange(len(frame)))
    ranked = ranked.sort_values([*ranks, "_row"], kind="mergesort").drop_duplicates(keys)
    return ranked.sort_values("_row").drop(columns=[*ranks, "_row"])
