"""Where a round's time goes, fedbench beside the sequential loop, on one bench_peers workload: the rounds after
warm-up under torch.profiler, each framework's top operators by device (or CPU) time, and the counts that tell a
launch-bound step from a compute-bound one (kernels, host-device copies, synchronisations per round).

Made for issue 43 §3's open row: on an H200 `cnn100dir` runs 1.80x ahead of the loop where the goal is 3x, a stacked
step of ten CNN lanes costing ~4.8 ms against ~0.6 ms of arithmetic (docs/performance.md). One device call:

    PYTHONPATH=. python scripts/profile_round.py --device cuda --workload cnn100dir --rounds 8
    bash scripts/gpu_session.sh profile            # the same, inside the device session's script

On a CPU (`--device cpu`) it profiles the CPU operators (a check that the script runs, and the CPU's own profile).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_peers as peers  # noqa: E402  (the workloads, their federation and the loop, shared with the benchmark)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def profile_fedbench(workload: dict, rounds: int, warmup: int, device: str) -> tuple[profile, list[float]]:
    """fedbench's rounds warmup+1..rounds under the profiler, and every round's seconds."""
    from fedbench.engine.loop import initial_state, run

    fed, info = peers.federation(workload, rounds)
    prof, seconds, last = profiler(device), [], [time.perf_counter()]

    def on_round(state, metrics):
        sync(device)
        now = time.perf_counter()
        seconds.append(now - last[0])
        if state.round == warmup:
            prof.start()
        last[0] = time.perf_counter()

    run(fed, initial_state(fed), on_round)
    prof.stop()
    print(f"fedbench executor: {info.executor}")
    return prof, seconds


def profile_seq(workload: dict, rounds: int, warmup: int, device: str) -> tuple[profile, list[float]]:
    """The sequential loop's rounds (bench_peers.seq_round, the benchmark's own) warmup+1..rounds under the profiler."""
    fed, _ = peers.federation(workload, rounds)
    module, global_sd = peers.seq_start(fed)
    prof, seconds = profiler(device), []
    for r in range(rounds):
        if r == warmup:
            prof.start()
        start = time.perf_counter()
        global_sd = peers.seq_round(module, global_sd, fed, peers.client_batches(fed, r, peers.cohort(fed, r)))
        sync(device)
        seconds.append(time.perf_counter() - start)
    prof.stop()
    return prof, seconds


def profiler(device: str) -> profile:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    return profile(activities=activities)


def summary(name: str, prof: profile, seconds: list[float], warmup: int, device: str, top: int) -> None:
    timed = seconds[warmup:]
    rounds = max(1, len(timed))
    events = prof.key_averages()
    by = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    count = {kind: sum(e.count for e in events if match(e.key)) for kind, match in COUNTED.items()}
    kernels = sum(e.count for e in events if getattr(e, "device_type", None) is not None
                  and str(e.device_type).endswith("CUDA")) if device == "cuda" else 0
    print(f"\n== {name}: {rounds} profiled rounds, {sum(timed) / rounds * 1e3:.1f} ms a round (median "
          f"{sorted(timed)[len(timed) // 2] * 1e3:.1f}); per round: {kernels / rounds:.0f} device kernels, "
          + ", ".join(f"{c / rounds:.0f} {kind}" for kind, c in count.items()))
    print(events.table(sort_by=by, row_limit=top, max_name_column_width=60))


COUNTED = {
    "host-device copies": lambda key: "memcpy" in key.lower(),
    "synchronisations": lambda key: "synchronize" in key.lower(),
    "aten ops": lambda key: key.startswith("aten::"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--workload", default="cnn100dir", choices=sorted(peers.WORKLOADS))
    parser.add_argument("--rounds", type=int, default=8, help="rounds run; those after --warmup are profiled")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="operators listed per framework")
    args = parser.parse_args()
    if not 0 <= args.warmup < args.rounds:
        parser.error(f"--warmup {args.warmup} must be in [0, --rounds {args.rounds})")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu)")
    workload = peers.workload_spec(args.workload, args.device, None)
    print(f"{args.workload} on {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}, torch {torch.__version__}")
    for name, fn in (("fedbench", profile_fedbench), ("seq", profile_seq)):
        prof, seconds = fn(workload, args.rounds, args.warmup, args.device)
        summary(name, prof, seconds, args.warmup, args.device, args.top)


if __name__ == "__main__":
    main()
