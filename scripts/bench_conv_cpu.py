"""fedbench's round against the research loop's, in one process on the same cohort: where a
whole-run benchmark (bench_peers.py) is too noisy on a shared machine.

For each workload of bench_peers.py (FedAvg on Fashion-MNIST, batch 50, one local epoch), round
`--round`'s cohort is trained by

  fedbench  engine.loop.client_round + aggregate_round (the executor `auto` picks)
  seq       bench_peers.py's research client (load_state_dict, DataLoader, torch.optim.SGD) on
            the same minibatches, state_dict averaging

alternately over --repeats passes (one warm-up each); prints the medians, seq / fedbench and the
largest difference of the two global models. `--clock cpu` times the process's CPU time (with
--threads 1 the compute alone, little moved by other processes on the machine); `wall` is what a
user waits.

    PYTHONPATH=. python scripts/bench_conv_cpu.py [--workloads cnn100,cnn100dir] [--threads 1] [--clock cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import bench_peers as bp
from fedbench.engine.loop import aggregate_round, client_round, initial_state


def rounds(workload: str, r: int):
    """(fedbench's round, seq's round, executor) on round r's cohort; each returns the global model."""
    fed, info = bp.federation(bp.WORKLOADS[workload], r + 1)
    ids = bp.cohort(fed, r)
    batches = bp.client_batches(fed, r, ids)
    module, global_sd = bp.seq_start(fed)

    def fedbench_round():
        state = initial_state(fed)
        state.round = r
        aggregate_round(fed, state, client_round(fed, state, ids))
        return fed.algorithm.model(state.server)

    def seq_round():
        return bp.to_vector(bp.seq_round(module, global_sd, fed, batches))

    return fedbench_round, seq_round, info.executor, [len(b) for b in batches]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="cnn100,cnn100dir")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="wall")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--round", type=int, default=3, help="the round whose cohort is trained")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} seconds per round, medians of "
          f"{args.repeats} interleaved passes")
    for workload in args.workloads.split(","):
        fedbench_round, seq_round, executor, steps = rounds(workload, args.round)
        fns = {"fedbench": fedbench_round, "seq": seq_round}
        models = {k: fn() for k, fn in fns.items()}  # warm-up
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.repeats):
            for k, fn in fns.items():
                t = clock()
                fn()
                times[k].append(clock() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        dev = float((models["fedbench"] - models["seq"]).abs().max())
        print(f"{workload:<10} steps/client {min(steps)}-{max(steps)} (sum {sum(steps)})  fedbench[{executor}] "
              f"{med['fedbench']:.3f}  seq {med['seq']:.3f}  seq/fedbench {med['seq'] / med['fedbench']:.3f}  "
              f"max |model diff| {dev:.1e}", flush=True)


if __name__ == "__main__":
    main()
