"""A round whose cohort is made on demand against the same round with its data in memory (issue 43).

FedProx Synthetic, SCAFFOLD (c_i in a memory-mapped table), 100 clients a round, mclr, one local
epoch, torch at 1 thread, each (N, mode) in a fresh subprocess:

  on demand     dataset.generator=per_user as shipped: round r's cohort is made while round r-1
                trains (LazyClientData.prefetch); round 0's is made on the training thread
  no prefetch   the same population, each round making its cohort before training (the engine
                before issue 43)
  in memory     the same population and rounds, each round's cohort made before the round's timer
                starts: the same round with its data already in memory
  sequential    (N <= 10^4) dataset.generator=sequential: every user made at set-up, as the issue's
                reference (the same distribution, other numbers)

Printed per N: the median seconds of rounds 1..R-1 (steady state) and round 0 (start-up: nothing
to prefetch yet), each mode's ratio to `in memory`, and peak resident memory. With --repeats K
the modes are interleaved K times and medians reported.

    python scripts/bench_ondemand.py [--ns 1000,1000000] [--rounds 6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("on demand", "no prefetch", "in memory", "sequential")


def worker(n: int, mode: str, rounds: int) -> dict:
    import torch

    from bench_scale import _overrides
    from fedbench.config.compose import compose
    from fedbench.core.streams import sample_cohort
    from fedbench.engine.loop import initial_state, run_round
    from fedbench.runs.build import build_federation

    torch.set_num_threads(1)
    overrides = _overrides(n, "scaffold") + [f"rounds={rounds}"]
    if mode == "sequential":
        overrides = [o.replace("generator=per_user", "generator=sequential") for o in overrides]
    fed, _ = build_federation(compose(overrides))
    if mode in ("no prefetch", "in memory"):
        fed.clients.prefetch = lambda ids: None
    times = []
    with tempfile.TemporaryDirectory(prefix="bench-ondemand-") as folder:
        state = initial_state(fed, Path(folder))
        for r in range(rounds):
            if mode == "in memory":
                fed.clients.prepare(sample_cohort(fed.seed, r, n, fed.clients_per_round).tolist())
            t = time.perf_counter()
            run_round(fed, state)
            state.round += 1
            times.append(time.perf_counter() - t)
    return {"first": times[0], "round": statistics.median(times[1:]),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_worker(n: int, mode: str, rounds: int) -> dict | str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(n), mode, "--rounds", str(rounds)],
                         capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return f"failed (exit {out.returncode}: {(out.stderr.strip().splitlines() or ['?'])[-1][:160]})"
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="1000,1000000")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(int(args.worker[0]), args.worker[1], args.rounds)), flush=True)
        return
    ns = [int(v) for v in args.ns.split(",")]
    load = os.getloadavg()
    print(f"# {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start; SCAFFOLD, "
          f"{args.rounds} rounds of 100 clients, mclr, torch 1 thread; medians of {args.repeats} interleaved repeats")
    results: dict[tuple[int, str], list[dict]] = {}
    for _ in range(args.repeats):
        for n in ns:
            for mode in MODES:
                if mode == "sequential" and n > 10_000:
                    continue
                got = run_worker(n, mode, args.rounds)
                print(f"# N={n} {mode}: {got}", flush=True)
                if isinstance(got, dict):
                    results.setdefault((n, mode), []).append(got)
    print(f"\n{'N':>9} {'mode':<12} {'round s':>8} {'x in mem':>8} {'round 0 s':>9} {'x in mem':>8} {'peak MB':>8}")
    for n in ns:
        med = {mode: {k: statistics.median(r[k] for r in rs) for k in ("first", "round", "peak_mb")}
               for (m, mode), rs in results.items() if m == n}
        ref = med.get("in memory")
        for mode, row in med.items():
            ratio = (lambda k: f"{row[k] / ref[k]:7.2f}x") if ref else (lambda k: "       -")
            print(f"{n:>9,} {mode:<12} {row['round']:8.3f} {ratio('round')} {row['first']:9.3f} {ratio('first')} "
                  f"{row['peak_mb']:8.0f}")


if __name__ == "__main__":
    main()
