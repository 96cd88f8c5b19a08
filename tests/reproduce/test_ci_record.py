"""The ci scale of every reproduction, run afresh, against its record (docs/results.md,
fedbench/reproduce/results/ci.csv): each claim must be judged as recorded, held or not, so that a change of
outcome either way fails until the record is regenerated (`fedbench reproduce all --scale ci --record
engine.threads=1`) and the change explained.

Each entry trains on one thread (engine.threads=1, as recorded), so the entries run two at a time in
worker processes, longest first: the numbers are each process's own, the wall time about half."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from fedbench.reproduce.catalog import load_catalog
from fedbench.reproduce.results import recorded, recorded_claims
from fedbench.reproduce.run import missing

CATALOG = load_catalog()
# every reproduction whose ci scale runs on data available here (synthetic, digits, Fashion-MNIST)
CI = ["losac/table2", "losac/fig2", "losac/fig6", "losac/fig7", "composite/fig2", "composite/fig3", "fedadmm/table3",
      "fedadmm/fig6", "fedadmm/fig9", "fedspeed/table4_2", "fedsso/table1", "fedsso/table2"]


def test_ci_list_is_every_ci_scale():
    assert sorted(CI) == sorted(n for n, r in CATALOG.items() if "ci" in r.scales)


def ci_outcome(name: str, folder: str) -> tuple[list[tuple[str, bool]], str]:
    """One ci reproduction in this (worker) process: its claims and its report."""
    from fedbench.reproduce.run import reproduce

    outcome = reproduce(CATALOG[name], "ci", (f"tracking.uri=sqlite:///{folder}/mlflow.db", "engine.threads=1",
                                              "tracking.artifacts=false", "tracking.checkpoint_every=0"),
                        outputs=Path(folder) / "out")
    return [(c.text, c.holds) for c in outcome.claims], outcome.markdown


@pytest.fixture(scope="module")
def outcomes():
    runnable = [n for n in CI if not missing(CATALOG[n], "ci")]
    seconds = recorded("ci").groupby("reproduction")["seconds"].first().to_dict()
    order = sorted(runnable, key=lambda n: -float(seconds.get(n, 1e9)))  # longest first: the two workers finish together
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(
            max_workers=min(2, os.cpu_count() or 1), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        for n in order:
            folder = Path(tmp) / n.replace("/", "_")
            folder.mkdir()
            futures[n] = pool.submit(ci_outcome, n, str(folder))
        return {n: f.exception() or f.result() for n, f in futures.items()}  # one failing entry fails alone


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the first test waits for every entry (~7 min on this 2-core machine, CI ~2x)
@pytest.mark.parametrize("name", CI)
def test_ci_claims_are_the_recorded_ones(name, outcomes):
    if name not in outcomes:
        pytest.skip(f"{name} needs {', '.join(missing(CATALOG[name], 'ci'))}, not in this checkout")
    if isinstance(outcomes[name], BaseException):
        raise outcomes[name]
    claims, markdown = outcomes[name]
    assert recorded_claims(name, "ci"), f"{name}: no recorded ci outcome; run fedbench reproduce all --scale ci --record"
    assert claims == recorded_claims(name, "ci"), markdown
