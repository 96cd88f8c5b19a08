"""What `fedbench report` and `fedbench plot` spend reading run histories, side by side in one run:

  per run   MLflow's client, one `get_metric_history` call a run (an ORM object and an entity a row)
  one query tracking.metric_rows.read_histories: the rows of every run in one query per 500 runs

on a scratch SQLite store of RUNS finished fedbench-like runs (three algorithms, seeds) that each logged
test_accuracy and test_loss for ROUNDS rounds. Each pass times, for both readers in turn, the report's
load (tracking.report.load_runs: the runs' search and their test_accuracy histories) and the plot's
curves of test_loss (metric_curves); the table shows medians over the passes, their ratio, and checks
that both readers gave the same rows.

    python scripts/bench_report.py [--runs 60 --rounds 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def make_store(db: Path, runs: int, rounds: int) -> str:
    """A store of `runs` finished runs, written by fedbench's own row writer (as `fedbench run` records)."""
    from mlflow.entities import Metric, Param

    from fedbench.tracking.metric_rows import write_batch
    from fedbench.tracking.store import quiet_libraries, store_client

    quiet_libraries()
    uri = f"sqlite:///{db}"
    client = store_client(uri)
    experiment = client.create_experiment("fedbench")
    for i in range(runs):
        run_id = client.create_run(experiment).info.run_id
        client.log_batch(run_id, params=[Param("algorithm.name", ("fedavg", "fedprox", "scaffold")[i % 3]),
                                         Param("rounds", str(rounds)), Param("seed", str(i // 3)), Param("eta_l", "0.1")])
        write_batch(client, run_id, [Metric("test_accuracy", min(1.0, 0.1 + r / (1.5 * rounds) + (i % 7) / 100), r, r)
                                     for r in range(1, rounds + 1)]
                    + [Metric("test_loss", 2.0 / r + i / 1000, r, r) for r in range(1, rounds + 1)])
        client.set_terminated(run_id)
    return uri


def timed_pass(uri: str, per_run: bool) -> tuple[float, float, object]:
    """(load s, curves s, what both read) with one of the readers."""
    from unittest import mock

    from fedbench.tracking import metric_rows
    from fedbench.tracking.report import labelled, load_runs, metric_curves

    with mock.patch.object(metric_rows, "sql_store", lambda client: None) if per_run else contextlib.nullcontext():
        t0 = time.perf_counter()
        frame = load_runs(uri, "fedbench")
        t1 = time.perf_counter()
        curves = metric_curves(labelled(frame, None, None)[0], uri, "test_loss")
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, (frame["history"].tolist(), curves.to_csv())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5, help="passes (both readers once per pass)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        t0 = time.perf_counter()
        uri = make_store(Path(tmp) / "mlflow.db", args.runs, args.rounds)
        made = time.perf_counter() - t0
        times: dict[str, list[float]] = {}
        read = {}
        timed_pass(uri, per_run=False)  # MLflow's and SQLAlchemy's first-use costs, outside the timing
        for _ in range(args.repeats):
            for name, per_run in (("per run", True), ("one query", False)):
                load, curves, read[name] = timed_pass(uri, per_run)
                times.setdefault(f"{name}|load_runs (report)", []).append(load)
                times.setdefault(f"{name}|metric_curves test_loss (plot)", []).append(curves)
    if read["per run"] != read["one query"]:
        raise SystemExit("the two readers read different rows")
    print(f"{args.runs} runs x {args.rounds} rounds (2 metrics; store written in {made:.1f} s); median of {args.repeats} "
          f"interleaved passes, {os.cpu_count()} CPUs, python {sys.version.split()[0]}; both readers read the same rows")
    print("| step | per run s | one query s | per run / one query |\n|---|---:|---:|---:|")
    for step in ("load_runs (report)", "metric_curves test_loss (plot)"):
        slow, fast = (statistics.median(times[f"{name}|{step}"]) for name in ("per run", "one query"))
        print(f"| {step} | {slow:.3f} | {fast:.3f} | {slow / fast:.1f}x |")


if __name__ == "__main__":
    main()
