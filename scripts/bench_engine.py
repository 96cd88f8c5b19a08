"""Engine speed, side by side in one run on the same workload:

  engine   fedbench's round (cohort sampling, minibatch streams, local SGD, aggregation),
           with executor=vmap, executor=stacked (Sequential models: linear, conv, pool layers) and executor=loop
           (`auto`'s choice marked *)
  seq      a sequential per-client PyTorch loop as research code writes it (one nn.Module reused
           in place, autograd, torch.optim.SGD), same minibatches
  bare     a bare vmap'd training loop with no FL logic (batches pre-gathered)

for mclr, mlp_2nn and cnn at S in {10, 100} clients per round and B in {10, 50}, K local steps.
Prints seconds per round (median over interleaved repeats) and the ratio engine(auto) / min(seq, bare).

    python scripts/bench_engine.py [--steps 5] [--repeats 5] [--models mclr,mlp_2nn,cnn]

With --unequal: clients of unequal sizes, one local epoch each (from 1 to ~100 steps of B=20), Fashion-MNIST,
100 clients, 10 per round, for every partition of conf/partition that applies to it, at its default and
at strong skew. Columns: `auto` (the default: stacked for fully connected models, the loop for conv nets),
the executors with the engine's grouping of clients by step count (vmap, stacked, loop), `padded` (the
engine before it: vmap in one chunk, every client computing its busiest neighbour's steps), the ratio
auto / min(vmap, stacked, loop, padded), and the share of a round the evaluation of the 10,000
test images adds to a round of the reference workload (bench_peers' mlp100: 10 clients x 5 steps of 50).

    python scripts/bench_engine.py --unequal [--models mclr,mlp_2nn,cnn] [--repeats 3]

With --hetero: system heterogeneity as the FedADMM paper runs it (each client draws E_i ~ U{1..5} epochs every round
inside FedADMM and FedProx), Fashion-MNIST, 100 IID clients of 600, B = 50, the fedadmm/fig6 model (784-64-10)
and mlp_2nn. Columns: `own` (chunks grouped by the epochs each client draws: Algorithm.work_of) and `configured`
(the engine before it: chunks grouped by the configured E, every client the same count, the finished ones computed
and masked), with their ratio. The same numbers either way (tests/engine/test_unequal_work.py).

    python scripts/bench_engine.py --hetero [--models fig6_fc,mlp_2nn] [--cohorts 10,100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.func import functional_call, grad, vmap

from fedbench.config.compose import compose
from fedbench.runs.build import build_federation
from fedbench.engine.local import LocalWork
from fedbench.engine.loop import initial_state, run_round
from fedbench.models.stacked import why_not_stacked
from fedbench.core.streams import sample_cohort


def federation(model: str, S: int, B: int, K: int, executor: str):
    overrides = [
        "dataset=fmnist", f"model={model}", "partition=iid", f"num_clients={max(S, 100)}", f"clients_per_round={S}",
        "local_epochs=null", f"local_steps={K}", f"batch_size={B}", "eta_l=0.05", f"engine.executor={executor}",
        "eval_every=0",
    ]
    return build_federation(compose(overrides))


def interleaved_medians(fns: dict, repeats: int, min_seconds: float = 1.0) -> dict[str, float]:
    """Median wall time of each fn(), the variants timed in turn (one call each per pass) so that
    a change of machine load hits all of them alike; at least `repeats` passes and, for fast
    cells, as many as fill `min_seconds` per variant. One warm-up call each first."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    passes = 0
    while passes < repeats or min(sum(v) for v in times.values()) < min_seconds and passes < 200:
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
        passes += 1
    return {k: statistics.median(v) for k, v in times.items()}


def engine_round(fed):
    state = initial_state(fed)

    def one_round():
        run_round(fed, state)
        state.round += 1

    return one_round


class CohortBatches:
    """Round 0's minibatch indices, fixed in advance; each pass gathers the samples per step, as
    any training loop over in-memory data must."""

    def __init__(self, fed, K: int):
        from fedbench.core.streams import sample_cohort

        ids = torch.tensor(sample_cohort(fed.seed, 0, fed.clients.num_clients, fed.clients_per_round))
        work = LocalWork(fed.clients, ids, 0, fed.algorithm.setting.eta_l, fed.batch_size, None, K)
        self.x, self.y = fed.clients.x, fed.clients.y
        self.index = [work.batch_index(t) for t in range(K)]

    def __iter__(self):
        for idx in self.index:
            yield self.x[idx], self.y[idx]

    def client(self, i: int):
        for idx in self.index:
            yield self.x[idx[i]], self.y[idx[i]]

    @property
    def cohort_size(self) -> int:
        return self.index[0].shape[0]


def sequential_round(fed, batches):
    module = fed.flat.module
    x0 = fed.x0
    S = batches.cohort_size
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(module.parameters(), lr=fed.eta_l)

    def one_round():
        acc = torch.zeros_like(x0)
        for i in range(S):
            torch.nn.utils.vector_to_parameters(x0.clone(), module.parameters())  # the params would alias x0
            for xb, yb in batches.client(i):
                opt.zero_grad(set_to_none=True)
                loss_fn(module(xb), yb).backward()
                opt.step()
            acc += torch.nn.utils.parameters_to_vector(module.parameters())
        return acc / S

    return one_round


def bare_vmap_round(fed, batches):
    flat = fed.flat
    module = flat.module
    S = batches.cohort_size

    def loss(params, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(module, params, (xb,)), yb)

    g = vmap(grad(loss))

    def one_round():
        X = fed.x0.expand(S, -1).clone()
        for xb, yb in batches:
            grads = g(flat.unflatten(X), xb, yb)
            X = X - fed.eta_l * torch.cat([grads[n].reshape(S, -1) for n in flat.names], 1)
        return X.mean(0)

    return one_round


# partitions of conf/partition on Fashion-MNIST: (label, overrides), default then strong skew
PARTITIONS = [
    ("iid", ["partition=iid"]),
    ("iid_stratified", ["partition=iid_stratified"]),
    ("dirichlet 0.5", ["partition=dirichlet"]),
    ("dirichlet 0.1", ["partition=dirichlet", "partition.alpha=0.1"]),
    ("dirichlet_bal 0.6", ["partition=dirichlet_balanced"]),
    ("dirichlet_bal 0.1", ["partition=dirichlet_balanced", "partition.alpha=0.1"]),
    ("quantity σ=1", ["partition=quantity_skew"]),
    ("quantity σ=2", ["partition=quantity_skew", "partition.sigma=2.0"]),
    ("label_k 2", ["partition=label_k"]),
    ("label_k 1", ["partition=label_k", "partition.k=1"]),
    ("shards 2", ["partition=shards"]),
    ("label_sorted", ["partition=label_sorted"]),
    ("c_noniid 0.5", ["partition=c_noniid"]),
    ("c_noniid 1.0", ["partition=c_noniid", "partition.c=1.0"]),
    ("pfl_noniid", ["partition=pfl_noniid", "num_clients=20"]),
    ("imbalanced_shards", ["partition=imbalanced_shards", "num_clients=200", "clients_per_round=20"]),
]
NOT_ON_FMNIST = {"natural": "the data set's own users (synthetic, LEAF)", "composite_mnist": "MNIST only (10 clients)"}


def unequal_federation(model: str, partition: list[str], executor: str, padded: bool = False, cohort: int = 10):
    overrides = ["dataset=fmnist", f"model={model}", "num_clients=100", f"clients_per_round={cohort}", *partition,
                 "local_steps=null", "local_epochs=1", "batch_size=20", "eta_l=0.05", f"engine.executor={executor}",
                 "eval_every=0"]
    fed, info = build_federation(compose(overrides))
    if padded:  # the engine before grouping: one chunk pads every client to the busiest one's steps
        fed.group_by_work = fed.clients.skip_done = False
    return fed, info


def evaluation_share(fed, repeats: int) -> float:
    """Seconds of one evaluation of the test set over seconds of one round (medians)."""
    from fedbench.engine.evaluation import evaluate

    data, x = fed.dataset, fed.x0
    t = interleaved_medians({"eval": lambda: evaluate(fed.flat, x, data.x_test, data.y_test, data.task, fed.eval_batch),
                             "round": engine_round(fed)}, repeats)
    return t["eval"] / t["round"]


def unequal_table(models: list[str], repeats: int, only: list[str] | None = None, cohort: int = 10) -> None:
    from fedbench.engine.loop import work_groups, work_spread

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; FMNIST, 100 clients, {cohort} per round, "
          f"1 epoch of B=20; s/round (median of {repeats}+ interleaved rounds)")
    header = (f"{'model':<8} {'partition':<18} {'steps/client':>13} | {'auto':>8} {'vmap':>8} {'stacked':>8} {'loop':>8} "
              f"{'padded':>8} | {'auto/best':>9} {'padded/auto':>11}")
    print(header)
    print("-" * len(header))
    for model in models:
        for label, partition in PARTITIONS:
            if only and label not in only and label.split()[0] not in only:
                continue
            feds = {
                "auto": unequal_federation(model, partition, "auto", cohort=cohort)[0],
                "vmap": unequal_federation(model, partition, "vmap", cohort=cohort)[0],
                "loop": unequal_federation(model, partition, "loop", cohort=cohort)[0],
                "padded": unequal_federation(model, partition, "vmap", padded=True, cohort=cohort)[0],
            }
            fed = feds["auto"]
            if why_not_stacked(fed.flat.module) is None:
                feds["stacked"] = unequal_federation(model, partition, "stacked", cohort=cohort)[0]
            ids = torch.tensor(sample_cohort(fed.seed, 0, fed.clients.num_clients, fed.clients_per_round))
            steps = LocalWork(fed.clients, ids, 0, 0.05, 20, torch.ones_like(ids), None).steps.tolist()
            t = interleaved_medians({k: engine_round(f) for k, f in feds.items()}, repeats)
            best = min(v for k, v in t.items() if k != "auto")
            shape = f"{min(steps)}-{max(steps)} ({len(work_groups(steps, fed.client_chunk, work_spread(fed.flat.dim)))}ch)"
            stacked = f"{t['stacked']:>8.3f}" if "stacked" in t else f"{'-':>8}"
            print(f"{model:<8} {label:<18} {shape:>13} | {t['auto']:>8.3f} {t['vmap']:>8.3f} {stacked} {t['loop']:>8.3f} "
                  f"{t['padded']:>8.3f} | {t['auto'] / best:>9.2f} {t['padded'] / t['auto']:>11.2f}", flush=True)
        fed, _ = federation(model, 10, 50, 5, "auto")  # the peer benchmark's reference workload
        print(f"{model:<8} evaluation of the 10,000 test images = {evaluation_share(fed, repeats):.0%} of a round of "
              "the reference workload (IID, 10 clients x 5 steps of 50)")
    for name, why in NOT_ON_FMNIST.items():
        print(f"(partition {name}: not on Fashion-MNIST: {why})")


def hetero_table(models: list[str], cohorts: list[int], repeats: int) -> None:
    import fedbench.engine.loop as loop

    own_steps = loop._own_steps

    def configured(lane, round_):  # the engine before Algorithm.work_of: the run's schedule for every client
        return lane.steps

    def grouped_by(fn, steps_of):
        def call():
            loop._own_steps = steps_of
            try:
                fn()
            finally:
                loop._own_steps = own_steps
        return call

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; FMNIST, 100 IID clients, E_i ~ U{{1..5}}, "
          f"B=50; s/round (median of {repeats}+ interleaved rounds)")
    header = f"{'algorithm':<9} {'model':<12} {'S':>4} | {'own':>8} {'configured':>10} | {'configured/own':>14}"
    print(header)
    print("-" * len(header))
    for algorithm in ("fedadmm", "fedprox"):
        for model in models:
            for S in cohorts:
                shape = ["model=fedadmm/fc", "model.hidden=64"] if model == "fig6_fc" else [f"model={model}"]
                fed, _ = build_federation(compose([
                    "dataset=fmnist", *shape, "num_clients=100", f"clients_per_round={S}", "partition=iid",
                    f"algorithm={algorithm}", "algorithm.hetero_epochs=true", "local_steps=null", "local_epochs=5",
                    "batch_size=50", "eta_l=0.05", "eval_every=0"]))
                t = interleaved_medians({"own": grouped_by(engine_round(fed), own_steps),
                                         "configured": grouped_by(engine_round(fed), configured)}, repeats)
                print(f"{algorithm:<9} {model:<12} {S:>4} | {t['own']:>8.3f} {t['configured']:>10.3f} | "
                      f"{t['configured'] / t['own']:>14.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="mclr,mlp_2nn,cnn")
    parser.add_argument("--cohorts", default="10,100")
    parser.add_argument("--batches", default="10,50")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--hetero", action="store_true", help="system heterogeneity: chunks by the drawn E_i or not")
    parser.add_argument("--unequal", action="store_true", help="the unequal-client table (every partition)")
    parser.add_argument("--cohort", type=int, default=10, help="with --unequal: clients per round")
    parser.add_argument("--partitions", default="", help="with --unequal: only these rows (comma-separated labels' first words)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.hetero:
        models = ["fig6_fc", "mlp_2nn"] if args.models == parser.get_default("models") else args.models.split(",")
        hetero_table(models,
                     [int(c) for c in args.cohorts.split(",")], args.repeats)
        return
    if args.unequal:
        unequal_table(args.models.split(","), args.repeats, [p for p in args.partitions.split(",") if p], args.cohort)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, K={args.steps} local steps, s/round (median)")
    header = (f"{'model':<8} {'S':>4} {'B':>3} | {'eng-vmap':>9} {'eng-stack':>9} {'eng-loop':>9} | {'seq':>9} {'bare':>9} | "
              f"{'auto/best':>9} {'seq/auto':>8}")
    print(header)
    print("-" * len(header))
    for model in args.models.split(","):
        for S in map(int, args.cohorts.split(",")):
            for B in map(int, args.batches.split(",")):
                fed_v, _ = federation(model, S, B, args.steps, "vmap")
                rounds = {"vmap": engine_round(fed_v), "loop": engine_round(federation(model, S, B, args.steps, "loop")[0])}
                if why_not_stacked(fed_v.flat.module) is None:
                    rounds["stacked"] = engine_round(federation(model, S, B, args.steps, "stacked")[0])
                _, info_a = federation(model, S, B, args.steps, "auto")
                batches = CohortBatches(fed_v, args.steps)
                t = interleaved_medians(
                    {**rounds, "seq": sequential_round(fed_v, batches), "bare": bare_vmap_round(fed_v, batches)},
                    args.repeats,
                )
                t_auto, best = t[info_a.executor], min(t["seq"], t["bare"])
                cells = " ".join(f"{t[k]:>8.4f}{'*' if k == info_a.executor else ' '}" if k in t else f"{'-':>8} "
                                 for k in ("vmap", "stacked", "loop"))
                print(
                    f"{model:<8} {S:>4} {B:>3} | {cells} | {t['seq']:>9.4f} {t['bare']:>9.4f} | "
                    f"{t_auto / best:>9.2f} {t['seq'] / t_auto:>8.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
