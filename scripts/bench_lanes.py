"""The engine part of the batched launcher: R runs trained as lanes of one round loop
(engine.loop.run_lanes) against the same R runs trained one after another (engine.loop.run), in
one process, side by side. Data, split and model are built once for the lanes and once per run
for the sequential side, as the launchers do; both evaluate every round. No MLflow, no Hydra
launch: this isolates what batching the rounds buys (scripts/bench_batched.py times the launchers
end to end).

    python scripts/bench_lanes.py                                   # MCLR on digits, 24 runs
    python scripts/bench_lanes.py --preset resnet --device cuda engine.client_chunk=40   # 20 ResNet-18-GN runs on a GPU
"""

from __future__ import annotations

import argparse
import itertools
import time

PRESETS = {
    "digits": ([], {"eta_l": [0.01, 0.03, 0.1, 0.3, 0.5, 1.0], "seed": [0, 1, 2, 3]}, 30),
    "fmnist": (["dataset=fmnist", "model=mlp_2nn", "partition.alpha=0.3", "num_clients=100", "clients_per_round=10"],
               {"eta_l": [0.03, 0.1, 0.3], "seed": [0, 1, 2, 3]}, 30),
    "resnet_small": (["dataset=fmnist", "model=resnet18_gn", "model.cifar_stem=true", "partition.alpha=0.3",
                      "num_clients=100", "clients_per_round=10", "batch_size=50", "local_epochs=null", "local_steps=10"],
                     {"eta_l": [0.01, 0.2], "seed": [0, 1]}, 3),
    "resnet": (["dataset=fmnist", "model=resnet18_gn", "model.cifar_stem=true", "partition.alpha=0.3",
                "num_clients=100", "clients_per_round=10", "batch_size=50", "local_epochs=null", "local_steps=10"],
               {"eta_l": [0.01, 0.03, 0.05, 0.1, 0.2], "seed": [0, 1, 2, 3]}, 10),
}


def configs(base: list[str], grid: dict[str, list], rounds: int, device: str):
    from fedbench.config.compose import compose

    out = []
    for values in itertools.product(*grid.values()):
        pairs = [f"{k}={v}" for k, v in zip(grid, values)]
        out.append(compose([*base, *pairs, f"rounds={rounds}", f"engine.device={device}", "eval_every=1"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="digits", choices=sorted(PRESETS))
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("overrides", nargs="*", help="more overrides for every run (e.g. engine.client_chunk=40)")
    args = parser.parse_args()
    import torch

    from fedbench.engine.loop import initial_state, run, run_lanes
    from fedbench.runs.build import build_federation, build_lanes

    base, grid, rounds = PRESETS[args.preset]
    cfgs = configs([*base, *args.overrides], grid, args.rounds or rounds, args.device)

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    build_federation(cfgs[0])  # data files read once before either side is timed (page cache)
    t0 = time.perf_counter()
    alone = []
    for cfg in cfgs:
        fed, _ = build_federation(cfg)
        alone.append(run(fed, initial_state(fed)))
    sync()
    t_alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    feds = [fed for fed, _ in build_lanes(cfgs)]
    states = [initial_state(fed) for fed in feds]
    run_lanes(feds, states, None, lambda k, st, exc: print(f"lane {k} failed: {exc}"))
    sync()
    t_lanes = time.perf_counter() - t0
    worst = max(abs(a.history[-1]["test_accuracy"] - b.history[-1]["test_accuracy"]) for a, b in zip(alone, states))
    train_alone, train_lanes = sum(s.wall_time for s in alone), sum(s.wall_time for s in states)
    print(f"{args.preset}: {len(cfgs)} runs x {cfgs[0].rounds} rounds on {args.device}")
    print("| | one after another (s) | as lanes (s) | speed-up |")
    print("|---|---|---|---|")
    print(f"| build + rounds + evaluation | {t_alone:.1f} | {t_lanes:.1f} | {t_alone / t_lanes:.2f}x |")
    print(f"| training rounds (wall_time) | {train_alone:.1f} | {train_lanes:.1f} | {train_alone / train_lanes:.2f}x |")
    print(f"largest difference of final test accuracy: {worst:.1e}")
    for r in range(len(alone[0].history)):
        gap = max(abs(a.history[r]["test_loss"] - b.history[r]["test_loss"]) / abs(a.history[r]["test_loss"])
                  for a, b in zip(alone, states))
        print(f"round {r + 1}: largest relative difference of test loss {gap:.1e}")


if __name__ == "__main__":
    main()
