"""Cost against the population (issue 35): FedProx Synthetic with N users, 100 per round.

For N in 10^3, 10^4, 10^5, 10^6 and FedAvg and SCAFFOLD (mclr, d = 610), each run in a fresh
subprocess:

  fedbench  dataset=synthetic dataset.generator=per_user dataset.num_users=N partition=natural
            num_clients=N clients_per_round=100 (one local epoch, B = 20), SCAFFOLD's c_i in a
            memory-mapped table (engine.client_state_device=disk); the test set is 1,000 users'
            test data (dataset.eval_users=1000, all users at N = 10^3)
  set-up    building the run (data, population sizes, test users, model) and its initial state
  round     median seconds of a round (sampling, making the cohort's data, training, aggregation)
  eval      seconds of one evaluation of the global model
  peak      the subprocess's peak resident memory (ru_maxrss)

Printed as seconds / MB and as ratios to N = 10^3, all measured in this one run; with --repeats R
the Ns are interleaved R times and medians reported.

Peer (--flower-budget > 0): Flower's run_simulation (Ray backend) with num_supernodes=N and its FedAvg
sampling 100 clients a round, each ClientApp making its user's data with the same per_user
generator and training mclr one epoch; N grows until a run does not finish 2 rounds within
the budget (seconds) or fails, and where it stopped is printed. Flower's set-up cannot be told
apart from its first round (its virtual nodes start while round 1 runs): its round column is the
median of rounds 1 and 2, set-up and evaluation show as nan, peak memory is the driver process's.

    python scripts/bench_scale.py [--ns 1000,10000,100000,1000000] [--rounds 5] [--repeats 1] [--flower-budget 300]
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
ALGORITHMS = ("fedavg", "scaffold")
COHORT = 100


def _overrides(n: int, algorithm: str) -> list[str]:
    out = ["dataset=synthetic", "dataset.generator=per_user", f"dataset.num_users={n}", "dataset.eval_users=1000",
           "partition=natural", f"num_clients={n}", f"clients_per_round={COHORT}", f"algorithm={algorithm}"]
    return out + (["engine.client_state_device=disk"] if algorithm == "scaffold" else [])


def worker_fedbench(n: int, algorithm: str, rounds: int) -> dict:
    import torch

    from fedbench.config.compose import compose
    from fedbench.engine.evaluation import evaluate
    from fedbench.engine.loop import initial_state, run_round, warm_up
    from fedbench.runs.build import build_federation

    torch.set_num_threads(1)  # the same compute in every subprocess, whatever the load
    t0 = time.perf_counter()
    fed, _ = build_federation(compose(_overrides(n, algorithm)))
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        state = initial_state(fed, Path(folder))
        setup = time.perf_counter() - t0
        warm_up(fed, state)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            run_round(fed, state)
            state.round += 1
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        data = fed.dataset
        evaluate(fed.flat, fed.algorithm.model(state.server), data.x_test, data.y_test, data.task, fed.eval_batch)
        eval_time = time.perf_counter() - t
    return {"setup": setup, "round": statistics.median(times), "eval": eval_time,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "made": fed.clients.population.made}


_ACTOR: dict = {}  # per Ray worker: the population, made once


def _flower_train(msg, context):
    """One client's epoch of mclr SGD (B = 20, eta 0.1) on its user's data, made here."""
    import torch
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    from fedbench.data.synthetic import PerUserSynthetic, test_count

    n = int(msg.content["config"]["num-users"])
    if _ACTOR.get("n") != n:
        _ACTOR.update(n=n, gen=PerUserSynthetic(0, n, 60, 10, 1.0, 1.0, False))
    gen = _ACTOR["gen"]
    k = int(context.node_config["partition-id"])
    x, y = gen.user(k)
    cut = int(test_count(gen.sizes[k], 0.2))
    x, y = torch.tensor(x[cut:], dtype=torch.float32), torch.tensor(y[cut:])
    model = torch.nn.Linear(60, 10)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for idx in torch.randperm(len(y)).split(20):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": len(y)})})
    return Message(content, reply_to=msg)


def worker_flower(n: int, rounds: int) -> dict:
    import torch
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    import bench_scale  # by reference, so that Ray workers import it

    t0 = time.perf_counter()
    marks: dict = {}  # configure_train's start of each round

    class TimedFedAvg(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            marks[server_round] = time.perf_counter()
            return super().configure_train(server_round, arrays, config, grid)

    server = ServerApp()

    @server.main()
    def main(grid, context):
        strategy = TimedFedAvg(fraction_train=COHORT / n, min_train_nodes=COHORT, min_available_nodes=n,
                               fraction_evaluate=0.0)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(torch.nn.Linear(60, 10).state_dict()),
                       train_config=ConfigRecord({"num-users": n}), num_rounds=rounds)
        marks["end"] = time.perf_counter()

    client = ClientApp()
    client.train()(bench_scale._flower_train)
    run_simulation(server_app=server, client_app=client, num_supernodes=n)
    starts = [marks[r] for r in range(1, rounds + 1)] + [marks["end"]]
    # set-up is not separable (virtual nodes and their Ray actors start while round 1 runs): the first
    # round carries it; peak memory is the driver's (Ray's workers are not this process's children)
    return {"setup": float("nan"), "round": statistics.median(b - a for a, b in zip(starts, starts[1:])),
            "total": marks["end"] - t0, "eval": float("nan"),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_worker(args: list[str], timeout: float | None = None) -> dict | str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])}
    try:
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", *args], capture_output=True,
                             text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"over the {timeout:.0f} s budget"
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed (exit {out.returncode}: {tail[:120]})"
    return json.loads(lines[-1])


def _row(label: str, r: dict, base: dict) -> str:
    ratios = "  ".join(f"{r[k] / base[k]:6.2f}x" if base[k] == base[k] and base[k] else "      -"
                       for k in ("setup", "round", "eval", "peak_mb"))
    return (f"{label:<22} {r['setup']:8.2f} {r['round']:8.3f} {r['eval']:8.3f} {r['peak_mb']:8.0f}   {ratios}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="1000,10000,100000,1000000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--flower-budget", type=float, default=300.0, help="seconds per Flower run (0: no peer column)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, n = args.worker[0], int(args.worker[1])
        result = worker_flower(n, args.rounds) if kind == "flower" else worker_fedbench(n, kind, args.rounds)
        print(json.dumps(result), flush=True)
        return
    ns = [int(v) for v in args.ns.split(",")]
    load = os.getloadavg()
    print(f"# {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start; "
          f"{args.rounds} rounds of {COHORT} clients, mclr; torch 1 thread per process")
    results: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeats):  # the Ns interleaved: a change of load hits them alike
        for n in ns:
            for algorithm in ALGORITHMS:
                got = run_worker([algorithm, str(n)] + ["--rounds", str(args.rounds)])
                if isinstance(got, str):
                    print(f"# fedbench {algorithm} N={n}: {got}", flush=True)
                    continue
                results.setdefault((algorithm, n), []).append(got)
                print(f"# fedbench {algorithm} N={n}: {got}", flush=True)
    print(f"\n{'system, N':<22} {'set-up s':>8} {'round s':>8} {'eval s':>8} {'peak MB':>8}   "
          f"{'set-up':>7} {'round':>7} {'eval':>7} {'peak':>7}  (ratios to N = {ns[0]:,})")
    for algorithm in ALGORITHMS:
        rows = {n: {k: statistics.median(r[k] for r in results[(algorithm, n)]) for k in ("setup", "round", "eval", "peak_mb")}
                for n in ns if (algorithm, n) in results}
        if ns[0] not in rows:
            continue
        for n, r in rows.items():
            print(_row(f"fedbench {algorithm} {n:,}", r, rows[ns[0]]))
    if args.flower_budget > 0:
        flower: dict[int, dict] = {}
        for n in ns:
            got = run_worker(["flower", str(n), "--rounds", "2"], timeout=args.flower_budget)
            if isinstance(got, str):
                print(f"flower fedavg {n:,}: {got}; the peer column stops here")
                break
            flower[n] = got
            print(_row(f"flower fedavg {n:,}", got, flower[ns[0]]), flush=True)


if __name__ == "__main__":
    main()
