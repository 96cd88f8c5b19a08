"""The ci scale of every reproduction, run afresh, against its record (docs/results.md,
fedbench/reproduce/results/ci.csv): each claim must be judged as recorded, held or not, so that a change of
outcome either way fails until the record is regenerated (`fedbench reproduce all --scale ci --record
engine.threads=1`) and the change explained.

Each entry is a test of its own that trains on one thread (engine.threads=1, as recorded) in a spawned worker
process, as the record's `--jobs` workers do: pytest-xdist spreads the entries over its workers before the rest
of the suite, longest first (tests/scheduling.py)."""

from __future__ import annotations

import multiprocessing
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
SECONDS = recorded("ci").groupby("reproduction")["seconds"].first().to_dict()
LONGEST_FIRST = sorted(CI, key=lambda n: -float(SECONDS.get(n, 1e9)))  # an entry not yet recorded counts as long


def test_ci_list_is_every_ci_scale():
    assert sorted(CI) == sorted(n for n, r in CATALOG.items() if "ci" in r.scales)


def ci_outcome(name: str, folder: str) -> tuple[list[tuple[str, bool]], str]:
    """One ci reproduction in this (worker) process: its claims and its report."""
    from fedbench.reproduce.run import reproduce

    outcome = reproduce(CATALOG[name], "ci", (f"tracking.uri=sqlite:///{folder}/mlflow.db", "engine.threads=1",
                                              "tracking.artifacts=false", "tracking.checkpoint_every=0"),
                        outputs=Path(folder) / "out")
    return [(c.text, c.holds) for c in outcome.claims], outcome.markdown


@pytest.fixture(scope="session")
def entry_process():
    """One spawned process per pytest process, reused by its entries (as the record's workers are): an entry
    never sees what the tests before it left in the test process (default dtype, threads, imported plugins)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the longest, fedadmm/fig6, was recorded in 1,919 s on a busy 2-core machine
@pytest.mark.parametrize("name", LONGEST_FIRST)  # in this order the first to start
def test_ci_claims_are_the_recorded_ones(name, entry_process, tmp_path):
    lacking = missing(CATALOG[name], "ci")
    if lacking:
        pytest.skip(f"{name} needs {', '.join(lacking)}, not in this checkout")
    claims, markdown = entry_process.submit(ci_outcome, name, str(tmp_path)).result()
    assert recorded_claims(name, "ci"), f"{name}: no recorded ci outcome; run fedbench reproduce all --scale ci --record"
    assert claims == recorded_claims(name, "ci"), markdown
