"""The batched launcher against Hydra's basic launcher, end to end, side by side in one run.

Each workload is a `fedbench run -m` grid launched twice in fresh processes, once with
hydra/launcher=basic and once with hydra/launcher=batched, each into a fresh MLflow store and
sweep folder; the time is the whole command (start-up, composing the jobs, data, training,
evaluation every round, the MLflow record and artifacts). Beside the ratio stands its bound: the
basic launcher's time over one command's start-up (a one-round run of the grid's first job, less its
arithmetic) plus the batched grid's arithmetic (training rounds, evaluations and warm-up as the runs
logged them): the speed-up if composing and recording the jobs cost nothing.
Both launchers must record the same
jobs; the largest difference of their final test accuracies is printed beside the ratio (float
rounding: lanes of several step sizes compute X - lr * G in one fused pass).

    python scripts/bench_batched.py                      # the issue's workloads (CPU: ~15 min on 2 cores)
    python scripts/bench_batched.py --workloads digits   # one of them
    python scripts/bench_batched.py --rounds 3 --repeats 1   # a quick pass
    python scripts/bench_batched.py --workloads resnet --device cuda   # on a GPU
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}

FMNIST = ["dataset=fmnist", "model=mlp_2nn", "partition=dirichlet", "partition.alpha=0.3", "num_clients=100",
          "clients_per_round=10", "eval_every=1"]
WORKLOADS = {
    # 12 jobs: eta_l x 4 seeds, FedAvg on Fashion-MNIST, unequal clients (Dirichlet 0.3)
    "fmnist": (FMNIST + ["algorithm=fedavg", "eta_l=0.03,0.1,0.3", "seed=0,1,2,3"], 30),
    # 24 jobs of the offline default (MCLR on digits)
    "digits": (["eta_l=0.01,0.03,0.1,0.3,0.5,1.0", "seed=0,1,2,3"], 30),
    # a mixed grid: 3 algorithms x 2 step sizes x 2 seeds on the Fashion-MNIST setting
    "mixed": (FMNIST + ["algorithm=fedavg,fedprox,scaffold", "eta_l=0.03,0.1", "seed=0,1"], 30),
    # 20 jobs of ResNet-18-GN (GPU): 5 step sizes x 4 seeds, Fashion-MNIST
    "resnet": (FMNIST + ["model=resnet18_gn", "model.cifar_stem=true", "algorithm=fedavg", "batch_size=50",
                         "local_epochs=null", "local_steps=10", "eta_l=0.01,0.03,0.05,0.1,0.2", "seed=0,1,2,3"], 10),
}


def run_grid(launcher: str, overrides: list[str], rounds: int, device: str, folder: Path) -> float:
    db = folder / f"{launcher}.db"
    cmd = [sys.executable, "-m", "fedbench.cli", "run", "-m", f"hydra/launcher={launcher}", *overrides,
           f"rounds={rounds}", f"engine.device={device}", f"tracking.uri=sqlite:///{db}",
           f"hydra.sweep.dir={folder / launcher}"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=ENV)
    took = time.perf_counter() - t0
    if res.returncode not in (0, 1):  # 1: some jobs failed (a diverging step size), the others ran
        raise SystemExit(f"{launcher} failed:\n{res.stderr[-3000:]}")
    if res.returncode == 1:
        print(f"  {launcher}: {res.stderr.splitlines()[-2].strip() if len(res.stderr.splitlines()) > 1 else ''} "
              f"{[line for line in res.stderr.splitlines() if 'job(s) failed' in line]}", flush=True)
    return took


def startup_cost(overrides: list[str], device: str, folder: Path) -> float:
    """What any `fedbench run` command pays before and after its arithmetic: one job of the grid (each swept
    key at its first value), one round without evaluation, timed whole, minus the arithmetic it logged."""
    single = [o.split(",")[0] for o in overrides if "eval_every" not in o] + ["eval_every=0", "targets=[]"]
    db = folder / "startup.db"
    cmd = [sys.executable, "-m", "fedbench.cli", "run", *single, "rounds=1", f"engine.device={device}",
           f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={folder / 'startup'}"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=ENV)
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"the start-up run failed:\n{res.stderr[-3000:]}")
    return took - sum(v[2] for v in final_accuracies(db).values())


def final_accuracies(db: Path) -> dict[str, float]:
    from fedbench.tracking.store import store_client

    client = store_client(f"sqlite:///{db}")
    out = {}
    for e in client.search_experiments():
        for r in client.search_runs([e.experiment_id]):
            m = r.data.metrics
            arithmetic = sum(m.get(k, 0.0) for k in ("wall_time", "eval_time", "warmup_time"))
            out[r.data.tags["config_hash"]] = (r.info.status, m.get("test_accuracy", float("nan")), arithmetic,
                                               r.data.tags.get("mlflow.runName", ""))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=["fmnist", "digits", "mixed"], choices=sorted(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=0, help="rounds per job (0: the workload's own)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each launcher; medians are shown")
    args = parser.parse_args()
    rows = []
    for name in args.workloads:
        overrides, rounds = WORKLOADS[name]
        rounds = args.rounds or rounds
        with tempfile.TemporaryDirectory() as tmp:
            # the launchers interleaved over repeats (their order alternating), each repeat in fresh folders and
            # stores; medians of each figure
            times: dict[str, list[float]] = {"basic": [], "batched": []}
            startups, arithmetics, worst = [], [], 0.0
            for repeat in range(args.repeats):
                folder = Path(tmp) / f"repeat{repeat}"
                folder.mkdir()
                order = ("basic", "batched") if repeat % 2 == 0 else ("batched", "basic")
                for launcher in order:
                    times[launcher].append(run_grid(launcher, overrides, rounds, args.device, folder))
                basic, batched = final_accuracies(folder / "basic.db"), final_accuracies(folder / "batched.db")
                assert basic.keys() == batched.keys(), "the launchers ran different jobs"
                assert all(basic[k][0] == batched[k][0] for k in basic), "a job ended differently under the two launchers"
                worst_job = max(basic, key=lambda k: abs(basic[k][1] - batched[k][1]))
                worst = max(worst, abs(basic[worst_job][1] - batched[worst_job][1]))
                print(f"  repeat {repeat + 1}: basic {times['basic'][-1]:.1f} s, batched {times['batched'][-1]:.1f} s; "
                      f"largest final-accuracy difference: {basic[worst_job][3]} ({basic[worst_job][0]}): basic "
                      f"{basic[worst_job][1]:.4f}, batched {batched[worst_job][1]:.4f}", flush=True)
                # the grid's arithmetic: training rounds, evaluations and the kernels' warm-up, as the runs logged
                # them (lanes log their share of each round); everything else is start-up, composing and recording
                arithmetics.append(sum(v[2] for v in batched.values()))
                startups.append(startup_cost(overrides, args.device, folder))
            times = {launcher: statistics.median(values) for launcher, values in times.items()}
            startup, arithmetic = statistics.median(startups), statistics.median(arithmetics)
        jobs = len(basic)
        bound = times["basic"] / (startup + arithmetic)
        rows.append((name, jobs, rounds, times["basic"], times["batched"], times["basic"] / times["batched"], startup,
                     arithmetic, bound, worst))
        print(f"{name}: {jobs} jobs x {rounds} rounds, medians of {args.repeats}: basic {times['basic']:.1f} s, batched {times['batched']:.1f} s, "
              f"{times['basic'] / times['batched']:.2f}x; one command's start-up {startup:.1f} s plus the batched grid's "
              f"arithmetic {arithmetic:.1f} s, so no cut of the rest can beat {bound:.2f}x (final accuracies differ by at "
              f"most {worst:.1e})", flush=True)
    print("\n| workload | jobs | rounds | basic launcher (s) | batched launcher (s) | speed-up | start-up (s) | batched "
          "arithmetic (s) | bound: basic / (start-up + arithmetic) | max final-accuracy difference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, jobs, rounds, t_basic, t_batched, ratio, startup, arithmetic, bound, worst in rows:
        print(f"| {name} | {jobs} | {rounds} | {t_basic:.1f} | {t_batched:.1f} | {ratio:.2f}x | {startup:.1f} | "
              f"{arithmetic:.1f} | {bound:.2f}x | {worst:.1e} |")


if __name__ == "__main__":
    main()
