"""Which sweeps hold a run: a relaunched sweep skips its FINISHED jobs, which then carry the older sweep's
folder in `sweep_dir`; the tag SWEEPS_TAG lists every sweep folder whose grid holds the run, so one filter
covers a whole grid."""

from __future__ import annotations

SWEEPS_TAG = "sweep_dirs"


def with_sweep(sweeps: str | None, sweep_dir: str) -> str:
    """The SWEEPS_TAG value `sweeps` (or none yet) with `sweep_dir` added, each folder once."""
    folders = [f for f in (sweeps or "").split("|") if f]
    return "|" + "|".join(dict.fromkeys([*folders, sweep_dir])) + "|"


def sweep_filter(sweep_dir: str) -> str:
    """The MLflow filter of every run of the sweep in `sweep_dir`, trained by it or skipped as FINISHED. MLflow's
    strings have no escapes: the value is quoted with the quote the folder's name lacks (a name with both has
    its quotes matched by LIKE's one-character `_`)."""
    quote = "'" if "'" not in sweep_dir else '"' if '"' not in sweep_dir else None
    if quote is None:
        quote, sweep_dir = "'", sweep_dir.replace("'", "_").replace('"', "_")
    return f"tags.{SWEEPS_TAG} LIKE {quote}%|{sweep_dir}|%{quote}"
