"""fedbench against the frameworks people use, side by side in one run on the same workload.

Workloads: FedAvg on Fashion-MNIST, IID, one local epoch of batch 50 at lr 0.05, uniform
averaging, no evaluation during the timed rounds:

  mlp_2nn / cnn, 100 clients x 250 samples (a seeded draw of 25,000 of the 60,000 training
          images), 10 clients per round: 5 local steps of 50
  mlp_2nn / cnn, 1,000 clients x 60 samples (all 60,000 images), 100 clients per round: one
          epoch is a step of 50 and a step of 10
  mlp_2nn / cnn, unequal clients: 100 clients of all 60,000 images split by Dirichlet(0.1) labels
          (mlp100dir, cnn100dir) or log-normal sizes, sigma 1 (mlp100qs), 10 per round: one epoch
          is 1 to ~100 steps of 50; mlp1000dir: 1,000 Dirichlet(0.3) clients (2 to ~250 samples), 100 per round
          (Dirichlet(0.1) over 1,000 clients leaves some client empty in every one of 1,000 draws)

Frameworks, each in its own process (start-up = process launch to the start of round 1):

  fedbench  fedbench.engine.loop.run on the federation built from the config
  seq       a sequential per-client PyTorch loop as research code writes it: one module reused,
            load_state_dict, a DataLoader and an SGD optimizer per client, state_dict averaging
  flower    Flower's simulation engine (run_simulation, Ray backend), its FedAvg strategy with
            a ClientApp running the same client code as `seq`
  pfl       pfl-research's SimulatedBackend + FederatedAveraging + PyTorchModel (its own loop)
  bare      a bare vmap'd training loop (scripts/bench_engine.py) on the same shapes: the
            kernel-only bound, timed in the orchestrating process

Fairness: all run the same computation. They start from the same initial weights (fedbench's
seeded model), train the cohorts of fedbench.core.streams.sample_cohort, visit each client's
samples in the order that fedbench.engine.local.LocalWork.batch gives (the peers' shuffling is
replaced by that order), and average the cohort's models uniformly (fedbench's default
`aggregation=uniform`; Flower's FedAvg would weight by examples: its clients report a weight of 1
under the key the strategy weights by). Checks (`checks` says what each one means and what it
cannot see): round1, every framework's round-1 global model equals `seq`'s to 1e-4 (max abs);
replay, the framework rerun untimed with `seq`'s global model put in place at the start of every
round ends each round within 10x the replayed noise floor (or 1e-4) of `seq`'s model; acc, test
accuracies after the last round agree within 0.5 points. The noise floor (row `seq-noise`) is `seq`
rerun with another torch thread count: the same computation with other float rounding. On chaotic
workloads (many unequal local steps, e.g. cnn100dir) rounding differences grow over the rounds and
within a round: that row shows by how much rounding alone moves the model and the final accuracy,
and a line per framework prints its deviation from `seq` after every round, free and replayed.
Each framework runs --runs times, the frameworks interleaved (run k of every framework before
run k+1 of any, the order rotated each time) so that a change of load hits them alike; a row is
the median over runs of each run's median seconds per round.

    PYTHONPATH=. /tmp/peers/bin/python scripts/bench_peers.py [--workloads mlp100,cnn100,mlp1000]
        [--frameworks fedbench,seq,flower,pfl] [--rounds 30] [--pfl-python /tmp/pflenv/bin/python] [--no-replay]

Install the peers with `pip install -e .[peers]` (flwr[simulation], pfl); pfl may need its own
virtual env (`--pfl-python`). Seconds per round are medians over rounds 6 and later.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

WORKLOADS = {
    "mlp100": dict(model="mlp_2nn", num_clients=100, per_client=250, cohort=10),
    "cnn100": dict(model="cnn", num_clients=100, per_client=250, cohort=10),
    "mlp1000": dict(model="mlp_2nn", num_clients=1000, per_client=60, cohort=100),
    "cnn1000": dict(model="cnn", num_clients=1000, per_client=60, cohort=100),
    # unequal clients (all 60,000 images): a local epoch is 1 to ~100 steps of 50
    "mlp100dir": dict(model="mlp_2nn", num_clients=100, cohort=10, partition=["partition=dirichlet", "partition.alpha=0.1"]),
    "mlp100qs": dict(model="mlp_2nn", num_clients=100, cohort=10, partition=["partition=quantity_skew", "partition.sigma=1.0"]),
    "cnn100dir": dict(model="cnn", num_clients=100, cohort=10, partition=["partition=dirichlet", "partition.alpha=0.1"]),
    "mlp1000dir": dict(model="mlp_2nn", num_clients=1000, cohort=100, partition=["partition=dirichlet", "partition.alpha=0.3"]),
    # a ResNet-18-GN cohort on CIFAR-10 (or synthetic images of its shapes: --cifar-root), 100 clients x 500
    # images, 10 per round: 10 local steps of 50
    "resnet100": dict(model="resnet18_gn", dataset="cifar10", num_clients=100, per_client=500, cohort=10),
}
BATCH, LR, SEED = 50, 0.05, 0
TIMED_FROM = 6  # rounds 1..5 are warm-up
ROUND1_TOL, ACC_TOL = 1e-4, 0.5
NOISE_FACTOR = 10  # replay check: a round's deviation may exceed the noise floor's by this much
FRAMEWORKS = ("fedbench", "seq", "flower", "pfl")
NOISE = "seq-noise"  # seq again with another thread count: the noise floor row, not a framework
# On a GPU every framework computes in full float32: cuDNN's default TF32 convolutions (about 1e-3 relative)
# would differ between fedbench's batched kernels and the peers' per-client ones by more than ROUND1_TOL.
# Set on import: the children and Flower's Ray workers all import this module.
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False


# -- the shared workload -------------------------------------------------------------------------
def federation(w: dict, rounds: int):
    """fedbench's Federation for a workload (a WORKLOADS entry, with the run's "device" and, for CIFAR-10,
    "data_root" added): its own partition (unequal clients) or, by default, the equal-size IID split."""
    from fedbench.config.compose import compose
    from fedbench.runs.build import build_federation
    from fedbench.engine.local import ClientData

    overrides = [
        f"dataset={w.get('dataset', 'fmnist')}", f"model={w['model']}", *w.get("partition", ["partition=iid"]), f"num_clients={w['num_clients']}",
        f"clients_per_round={w['cohort']}", "local_steps=null", "local_epochs=1", f"batch_size={BATCH}",
        f"eta_l={LR}", "eval_every=0", f"rounds={rounds}", f"seed={SEED}", f"engine.device={w.get('device', 'cpu')}",
        *([f"data.root={w['data_root']}"] if "data_root" in w else []),
    ]
    fed, info = build_federation(compose(overrides))
    if "partition" in w:
        return fed, info
    # The iid partition splits all 60,000 images; the 100-client workload holds 250 each.
    parts = split(len(fed.clients.y), w["num_clients"], w["per_client"])
    c = fed.clients
    clients = ClientData.from_partition(c.x, c.y, parts, c.seed, c.grad_fn, c.loss_scale)
    return dataclasses.replace(fed, clients=clients), info


def workload_spec(name: str, device: str, cifar_root: str | None) -> dict:
    """A WORKLOADS entry with the run's device and, for CIFAR-10, the data root that holds it."""
    w = dict(WORKLOADS[name], device=device)
    if w.get("dataset") == "cifar10":
        w["data_root"] = cifar_root
    return w


def has_cifar10(root: str) -> bool:
    """Whether the cifar10 data set would find its python batches under `root`."""
    from fedbench.data.vision import CIFAR10_BATCHES, cifar_folder

    return cifar_folder(root, "cifar10", "cifar-10-batches-py", sum(CIFAR10_BATCHES, [])) is not None


def write_synthetic_cifar10(root: Path) -> None:
    """CIFAR-10's python batches (5 x 10,000 training, 10,000 test images) in the original format, of random
    pixels and labels: CIFAR-10's shapes for timing where the real set is missing (accuracy is chance)."""
    import pickle

    from fedbench.data.vision import CIFAR10_BATCHES

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng([SEED, 0xC1FA])
    for name in sum(CIFAR10_BATCHES, []):
        batch = {b"batch_label": b"synthetic", b"data": rng.integers(0, 256, (10_000, 3072), dtype=np.uint8),
                 b"labels": rng.integers(0, 10, 10_000).tolist(), b"filenames": [b"synthetic.png"] * 10_000}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)  # the originals are Python-2 pickles with bytes keys


def split(num_samples: int, num_clients: int, per_client: int) -> list[np.ndarray]:
    perm = np.random.default_rng([SEED, 0x5B]).permutation(num_samples)[: num_clients * per_client]
    return [np.sort(p) for p in np.split(perm, num_clients)]


def cohort(fed, r: int) -> list[int]:
    from fedbench.core.streams import sample_cohort

    return sample_cohort(fed.seed, r, fed.clients.num_clients, fed.clients_per_round).tolist()


def client_batches(fed, r: int, ids: list[int]) -> list[list[torch.Tensor]]:
    """Each client's minibatches (sample indices into the training set) in round r, exactly as
    LocalWork.batch draws them."""
    from fedbench.engine.local import LocalWork

    ids_t = torch.tensor(ids, device=fed.clients.size.device)
    every_row = dataclasses.replace(fed.clients, skip_done=False)  # batch(t) with a row per client
    work = LocalWork(every_row, ids_t, r, fed.algorithm.setting.local_lr(r), fed.batch_size, torch.ones_like(ids_t), None)
    out: list[list[torch.Tensor]] = [[] for _ in ids]
    for t in range(work.max_steps):
        idx, valid = work.batch_index(t), work.batch(t).w > 0
        active = work.active(t)
        for i in range(len(ids)):
            if active[i]:
                out[i].append(idx[i][valid[i]])
    return out


def train_client(module: nn.Module, global_sd: dict, x, y, batches: list[torch.Tensor], lr: float) -> dict:
    """The research-code client: load the global model, a DataLoader and an optimizer, SGD."""
    module.load_state_dict(global_sd)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), sampler=batches, batch_size=None)
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for xb, yb in loader:
        opt.zero_grad()
        loss_fn(module(xb), yb).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def seq_round(module: nn.Module, global_sd: dict, fed, batches: list[list[torch.Tensor]]) -> dict:
    """One round of the research loop: each client of the cohort (its minibatches in `batches`) trained from
    `global_sd`, the uniform mean of their state dicts summed in cohort order."""
    acc = {k: torch.zeros_like(v) for k, v in global_sd.items()}
    for client in batches:
        sd = train_client(module, global_sd, fed.clients.x, fed.clients.y, client, fed.eta_l)
        for k in acc:
            acc[k] += sd[k] / len(batches)
    return acc


def to_vector(module_or_sd) -> torch.Tensor:
    sd = module_or_sd.state_dict() if isinstance(module_or_sd, nn.Module) else module_or_sd
    return torch.cat([torch.as_tensor(v).reshape(-1).float() for v in sd.values()])


def to_state_dict(vector: torch.Tensor, like: dict) -> dict:
    """The inverse of to_vector for a state dict shaped as `like`."""
    sizes = [v.numel() for v in like.values()]
    return {k: p.reshape(v.shape).to(device=v.device, dtype=v.dtype).clone() for (k, v), p in zip(like.items(), vector.split(sizes))}


def accuracy(fed, vector: torch.Tensor) -> float:
    data = fed.dataset
    with torch.no_grad():
        out = fed.flat.forward_flat(vector.to(fed.x0.dtype), data.x_test)
    return 100.0 * float((out.argmax(1) == data.y_test).double().mean())


class Clock:
    """Round start times (wall clock, comparable across processes) and the end of the last round."""

    def __init__(self):
        self.starts: list[float] = []
        self.end = 0.0

    def stop(self):
        """The end of the last round (its kernels run)."""
        self.tick()
        self.end = self.starts.pop()

    def tick(self):
        if torch.cuda.is_initialized():  # a round ends when its kernels have run, not when they are queued
            torch.cuda.synchronize()
        self.starts.append(time.time())

    def result(self, models: list[torch.Tensor], fed) -> dict:
        """`models`: the global model after each round (1, 2, ...)."""
        ends = [*self.starts[1:], self.end or time.time()]
        return {
            "first_round_at": self.starts[0],
            "round_times": [e - s for s, e in zip(self.starts, ends)],
            "round1": models[0].cpu(),
            "models": torch.stack([m.float().cpu() for m in models]),
            "accuracy": accuracy(fed, models[-1]),
        }


# -- the frameworks (each runs in a child process) --------------------------------------------------
# Each runner takes `replay`: None, or seq's global models after rounds 1..R-1, which then replace
# the runner's own global model at the start of rounds 2..R (checks: `replay`).
def run_fedbench(workload: dict, rounds: int, replay: torch.Tensor | None = None) -> dict:
    from fedbench.engine.loop import initial_state, run

    fed, info = federation(workload, rounds)
    clock, models = Clock(), []

    def on_round(state, metrics):
        models.append(fed.algorithm.model(state.server).clone())
        if replay is not None and state.round < rounds:
            state.server = fed.algorithm.init(replay[state.round - 1].to(fed.x0))
        if state.round < rounds:
            clock.tick()

    state = initial_state(fed)
    clock.tick()
    state = run(fed, state, on_round)
    clock.stop()
    out = clock.result(models, fed)
    out["executor"] = info.executor
    return out


def seq_start(fed) -> tuple[nn.Module, dict]:
    """The research loop's module at fedbench's initial weights, and its global state dict (a copy)."""
    module = fed.flat.module
    torch.nn.utils.vector_to_parameters(fed.x0.clone(), module.parameters())
    return module, {k: v.detach().clone() for k, v in module.state_dict().items()}


def run_seq(workload: dict, rounds: int, replay: torch.Tensor | None = None) -> dict:
    fed, _ = federation(workload, rounds)
    module, global_sd = seq_start(fed)
    clock, models = Clock(), []
    for r in range(rounds):
        clock.tick()
        if replay is not None and r:
            global_sd = to_state_dict(replay[r - 1], global_sd)
        ids = cohort(fed, r)
        global_sd = seq_round(module, global_sd, fed, client_batches(fed, r, ids))
        models.append(to_vector(global_sd))
    clock.stop()
    return clock.result(models, fed)


_ACTOR: dict = {}  # per Ray worker process: the federation, loaded once
UNIFORM_KEY = "uniform-weight"
FLOWER_GPU_SHARE = 0.1  # ten clients at once share the GPU (every workload's cohort is a multiple of 10)


def _flower_train(msg, context):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    if "fed" not in _ACTOR:
        fed, _ = federation(json.loads(str(msg.content["config"]["workload"])), 1)
        _ACTOR["fed"] = fed
        _ACTOR["module"] = fed.flat.module.to(fed.x0.device)  # the flat engine keeps the module's own weights on the CPU
    fed, module = _ACTOR["fed"], _ACTOR["module"]
    cfg = msg.content["config"]
    cid, r = int(cfg["cid"]), int(cfg["server-round"]) - 1
    (batches,) = client_batches(fed, r, [cid])
    sd = train_client(module, msg.content["arrays"].to_torch_state_dict(), fed.clients.x, fed.clients.y, batches, fed.eta_l)
    n = int(fed.clients.size[cid])
    # uniform averaging, as seq and fedbench (aggregation=uniform): every reply weighs 1
    content = RecordDict({"arrays": ArrayRecord(sd), "metrics": MetricRecord({"num-examples": n, UNIFORM_KEY: 1})})
    return Message(content, reply_to=msg)


def run_flower(workload: dict, rounds: int, replay: torch.Tensor | None = None) -> dict:
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    import bench_peers  # by reference, so that Ray workers import it and keep _ACTOR

    fed, _ = federation(workload, rounds)
    module = fed.flat.module
    torch.nn.utils.vector_to_parameters(fed.x0.clone(), module.parameters())
    clock, result, grid_nodes = Clock(), {"models": []}, []

    class CohortFedAvg(FedAvg):
        """FedAvg sending round r's fedbench cohort; node k of the sorted node ids serves client k."""

        def configure_train(self, server_round, arrays, config, grid):
            clock.tick()
            if replay is not None and server_round > 1:
                arrays = ArrayRecord(to_state_dict(replay[server_round - 2], arrays.to_torch_state_dict()))
            grid_nodes[:] = grid.get_node_ids()
            nodes = sorted(grid_nodes)
            messages = []
            for cid in cohort(fed, server_round - 1):
                conf = ConfigRecord({"server-round": server_round, "cid": cid, "workload": json.dumps(workload)})
                content = RecordDict({"arrays": arrays, "config": conf})
                messages.append(Message(content=content, message_type=MessageType.TRAIN, dst_node_id=nodes[cid]))
            return messages

        def aggregate_train(self, server_round, replies):
            # the cohort's order, as seq sums it (replies arrive as the workers finish)
            nodes = sorted(grid_nodes)
            position = {nodes[cid]: k for k, cid in enumerate(cohort(fed, server_round - 1))}
            replies = sorted(replies, key=lambda reply: position[reply.metadata.src_node_id])
            arrays, metrics = super().aggregate_train(server_round, replies)
            result["models"].append(to_vector(arrays.to_torch_state_dict()))
            return arrays, metrics

    server = ServerApp()

    @server.main()
    def main(grid, context):
        while len(list(grid.get_node_ids())) < fed.clients.num_clients:  # nodes still registering
            time.sleep(0.05)
        strategy = CohortFedAvg(fraction_evaluate=0.0, weighted_by_key=UNIFORM_KEY)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(module.state_dict()), num_rounds=rounds)
        clock.stop()

    client = ClientApp()
    client.train()(bench_peers._flower_train)
    # On a GPU, Flower's recommended fractional GPU per client: FLOWER_GPU_SHARE of it, so that 1 / share
    # clients (Ray actors, each with its own CUDA context) train at once; on a CPU, Flower's default resources.
    gpu = workload.get("device", "cpu") != "cpu"
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": FLOWER_GPU_SHARE}} if gpu else None
    run_simulation(server_app=server, client_app=client, num_supernodes=fed.clients.num_clients, backend_config=backend)
    return clock.result(result["models"], fed)


def run_pfl(workload: dict, rounds: int, replay: torch.Tensor | None = None) -> dict:
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel

    fed, _ = federation(workload, rounds)
    torch.nn.utils.vector_to_parameters(fed.x0.clone(), fed.flat.module.parameters())
    x, y = fed.clients.x, fed.clients.y

    class Net(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, inputs):
            return self.net(inputs)

        def loss(self, inputs, targets, eval=False):
            return nn.functional.cross_entropy(self(inputs), targets)

        def metrics(self, inputs, targets, eval=False):
            return {}

    schedule = [(r, cid) for r in range(rounds) for cid in cohort(fed, r)]
    position = iter(schedule)
    current: dict = {}

    def sample_user():
        current["round"], cid = next(position)
        return cid

    def make_dataset(cid):  # the client's data laid out in this round's minibatch order
        (batches,) = client_batches(fed, current["round"], [cid])
        order = torch.cat(batches)
        return Dataset((x[order], y[order]), user_id=str(cid))

    net = Net(fed.flat.module)
    model = PyTorchModel(
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    clock, models = Clock(), []

    class Timer(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            clock.tick()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            models.append(to_vector(net))
            if replay is not None and central_iteration + 1 < rounds:
                with torch.no_grad():
                    torch.nn.utils.vector_to_parameters(replay[central_iteration].to(fed.x0), net.parameters())
            if central_iteration + 1 < rounds:
                clock.tick()
            return False, Metrics()

    backend = SimulatedBackend(training_data=FederatedDataset(make_dataset, sample_user), val_data=None)
    algo_params = NNAlgorithmParams(
        central_num_iterations=rounds, evaluation_frequency=rounds + 1, train_cohort_size=fed.clients_per_round,
        val_cohort_size=None,
    )
    train_params = NNTrainHyperParams(local_num_epochs=1, local_learning_rate=fed.eta_l, local_batch_size=BATCH)
    FederatedAveraging().run(algo_params, backend, model, train_params, None, callbacks=[Timer()])
    clock.stop()
    return clock.result(models, fed)


RUNNERS = {"fedbench": run_fedbench, "seq": run_seq, "flower": run_flower, "pfl": run_pfl, NOISE: run_seq}


def noise_threads(threads: int) -> int:
    """The noise floor's thread count: another one than the frameworks' (0: torch's default)."""
    return 1 if (threads or torch.get_num_threads()) != 1 else 2


# -- the checks --------------------------------------------------------------------------------------
def deviations(models: torch.Tensor, reference: torch.Tensor) -> list[float]:
    """Max-abs distance of the global model from the reference's after each round both ran."""
    R = min(len(models), len(reference))
    return (models[:R] - reference[:R]).abs().amax(1).tolist()


def first_above_floor(dev: list[float], floor: list[float] | None) -> int | None:
    """The first round (from 1) whose deviation exceeds max(ROUND1_TOL, NOISE_FACTOR x the floor's
    in that round), None if none does; no floor: ROUND1_TOL alone."""
    floor = floor or [0.0] * len(dev)
    return next((r + 1 for r, (d, f) in enumerate(zip(dev, floor)) if d > max(ROUND1_TOL, NOISE_FACTOR * f)), None)


def checks(row: dict, reference: dict, noise: dict | None, same_rounds: bool) -> list[str]:
    """A row's checks against `seq` (`reference`). `noise` is seq rerun with another thread count (the
    same computation, other float rounding: the noise floor), None where it did not run. A row's
    "models" are its global models after each round; "replayed", where present, the models of the
    same framework run again with seq's global model put in place at the start of every round.

    round1  the global model after round 1 equals seq's to ROUND1_TOL (max abs), or to NOISE_FACTOR x the
            noise row's round-1 deviation where that is larger: same initial model, cohort, minibatches,
            learning rate and averaging. The floor matters on a GPU only: cuDNN's nondeterministic
            kernels moved seq's own rerun 4e-3 from seq in round 1 of resnet100 (H100); on the CPU it is ~1e-8.
    replay  every round, started from seq's model of the round before, ends within NOISE_FACTOR times
            the noise floor's deviation in that round (the noise row replayed alike; at least
            ROUND1_TOL) of seq's model of that round. Rounding grows within one round only, so a
            difference in any round's cohort, minibatches, learning rate or averaging shows in that
            round, unless rounding alone swings that round as much
            (cnn100dir: seq at 1 vs 2 threads differs 6e-4 in round 2 and 8e-4 in round 9 from the same
            start, 1e-6 in most rounds; reversed minibatches or lr 0.045 in one round: 2e-3 to 4e-3).
            Not checked: the free-running deviation after round r against the noise row's. Rounding
            differences grow over the rounds on chaotic workloads, from a seed (the round-1 deviation)
            that differs between frameworks: fedbench's stacked executor starts 8e-6 off on mlp100dir,
            the noise row 1e-8, and is 2e-4 off after round 2 against the row's 5e-6, while replayed
            it is 1e-8 off in rounds 2 to 4. Those deviations are printed, not judged.
    acc     final test accuracies agree within ACC_TOL points. Where rounding alone moves the final
            accuracy by that much (the noise row's own gap), this check measures chaos, not the frameworks.
    """
    dev = deviations(row["models"], reference["models"])
    floor1 = deviations(noise["models"][:1], reference["models"])[0] if noise is not None and "models" in noise else 0.0
    out = [f"round1 {'ok' if dev[0] <= max(ROUND1_TOL, NOISE_FACTOR * floor1) else 'FAIL'}"
           + (f" ({dev[0]:.0e}, floor {floor1:.0e})" if NOISE_FACTOR * floor1 > ROUND1_TOL else "")]
    if "replayed" in row:
        step = deviations(row["replayed"], reference["models"])
        floor = deviations(noise["replayed"], reference["models"]) if noise is not None and "replayed" in noise else None
        bad = first_above_floor(step, floor)
        out.append(f"replay ok (max {max(step):.0e})" if bad is None else f"replay FAIL from round {bad} ({step[bad - 1]:.0e})")
    if same_rounds:
        gap = abs(row["accuracy"] - reference["accuracy"])
        out.append(f"acc {'ok' if gap <= ACC_TOL else 'FAIL'} ({gap:.2f} pt)")
    return out


# -- the orchestrator -------------------------------------------------------------------------------
def run_child(framework: str, workload: str, rounds: int, python: str, threads: int, device: str, cifar_root: str,
              replay: torch.Tensor | None = None) -> dict:
    """Runs one framework in a fresh process; start-up is launch to the start of round 1."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        here = Path(__file__).resolve().parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])}
        cmd = [python, __file__, "--child", framework, "--workloads", workload, "--rounds", str(rounds), "--out", str(out),
               "--threads", str(threads), "--device", device, "--cifar-root", cifar_root]
        if replay is not None:
            torch.save(replay, Path(tmp) / "replay.pt")
            cmd += ["--replay-from", str(Path(tmp) / "replay.pt")]
        launched = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            log = Path(tempfile.gettempdir()) / f"bench_peers_{framework}_{workload}.log"
            log.write_text(proc.stdout + proc.stderr)
            return {"error": f"exit {proc.returncode}, output in {log}"}
        result = json.loads(out.read_text())
        result["models"] = torch.load(out.with_suffix(".pt"), weights_only=True)
        result["round1"] = result["models"][0]
    result["startup"] = result.pop("first_round_at") - launched
    return result


def interleaved_runs(frameworks: list[str], run, runs: int) -> dict[str, list[dict]]:
    """`runs` results per framework, run k of every framework before run k+1 of any, the order
    rotated each time (a load change during one pass hits every framework, and none always runs first)."""
    results: dict[str, list[dict]] = {fw: [] for fw in frameworks}
    for k in range(runs):
        for fw in frameworks[k % len(frameworks):] + frameworks[: k % len(frameworks)]:
            results[fw].append(run(fw))
    return results


def combined(results: list[dict]) -> dict:
    """One row from a framework's runs: the median over runs of each run's seconds per round (and
    start-up); the models and accuracy of its first run (every run trains the same rounds). A
    failed run fails the row."""
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    row = dict(results[0])
    row["seconds"] = statistics.median(median_timed(r) for r in results)
    row["startup"] = statistics.median(r["startup"] for r in results)
    row["runs"] = len(results)
    return row


def bare_seconds(workload: dict, repeats: int) -> float:
    """The bare vmap'd loop of scripts/bench_engine.py on round 1's minibatches (exact shapes)."""
    from bench_engine import bare_vmap_round, interleaved_medians

    fed, _ = federation(workload, 1)
    ids = cohort(fed, 0)
    per_client = client_batches(fed, 0, ids)

    class Batches:
        cohort_size = len(ids)

        def __iter__(self):
            for t in range(len(per_client[0])):
                idx = torch.stack([b[t] for b in per_client])
                yield fed.clients.x[idx], fed.clients.y[idx]

    return interleaved_medians({"bare": bare_vmap_round(fed, Batches())}, repeats)["bare"]


def median_timed(result: dict) -> float:
    times = result["round_times"]
    return statistics.median(times[TIMED_FROM - 1 :] or times[1:] or times)  # short runs: all but round 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="mlp100,cnn100,mlp1000")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--rounds", default="30", help="rounds per run; or per workload: mlp100=30,mlp1000=10")
    parser.add_argument("--flower-rounds", type=int, default=0, help="cap Flower's rounds (it is slow); 0: no cap")
    parser.add_argument("--pfl-python", default=sys.executable, help="interpreter of pfl's virtual env")
    parser.add_argument("--runs", type=int, default=3, help="runs of each framework, interleaved; rows are medians")
    parser.add_argument("--threads", type=int, default=0, help="torch threads in every framework (0: torch's default)")
    parser.add_argument("--no-replay", dest="replay", action="store_false",
                        help="skip the replay check (each framework rerun, untimed, from seq's model every round)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats of the bare loop")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where every framework trains (cuda: data, models and clients on the GPU; Flower's clients "
                             f"take {FLOWER_GPU_SHARE:g} GPU each)")
    parser.add_argument("--cifar-root", default="data", help="data root holding CIFAR-10's python batches (resnet100); "
                        "missing: synthetic images of its shapes, said so")
    parser.add_argument("--child", choices=list(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--replay-from", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.child:
        torch.manual_seed(SEED)
        replay = torch.load(args.replay_from, weights_only=True) if args.replay_from else None
        spec = workload_spec(args.workloads, args.device, args.cifar_root)
        result = RUNNERS[args.child](spec, int(args.rounds), replay)
        del result["round1"]  # models[0]
        torch.save(result.pop("models"), Path(args.out).with_suffix(".pt"))
        Path(args.out).write_text(json.dumps(result))
        return

    rounds = {w: int(args.rounds) for w in WORKLOADS} if "=" not in args.rounds else {
        k: int(v) for k, v in (item.split("=") for item in args.rounds.split(","))
    }
    frameworks = args.frameworks.split(",")
    unknown = sorted(set(args.workloads.split(",")) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: choose from {', '.join(WORKLOADS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible to torch")
    synthetic = None
    if any(WORKLOADS[w].get("dataset") == "cifar10" for w in args.workloads.split(",")) and not has_cifar10(args.cifar_root):
        synthetic = tempfile.TemporaryDirectory(prefix="bench_peers_cifar_")
        write_synthetic_cifar10(Path(synthetic.name))
        print(f"CIFAR-10 not found under {args.cifar_root}: resnet100 trains on synthetic images of its shapes (random "
              "pixels and labels; accuracy is chance)")
        args.cifar_root = synthetic.name
    if args.device == "cuda":
        print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda}); every "
              f"framework trains on it, Flower's clients {FLOWER_GPU_SHARE:g} GPU each")
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {len(os.sched_getaffinity(0))} of "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; s/round = median over "
          f"{args.runs} interleaved runs of each run's median of rounds >= {TIMED_FROM}")
    header = (f"{'workload':<10} {'framework':<17} {'rounds':>6} {'s/round':>8} {'start-up':>8} {'/fedbench':>9} "
              f"{'/bare':>7} {'round1 dev':>10} {'acc %':>6}  checks")
    print(header)
    print("-" * len(header))
    for workload in args.workloads.split(","):
        # the bare loop needs every client's batches of one shape: equal-size workloads only
        spec = workload_spec(workload, args.device, args.cifar_root)
        bare = float("nan") if "partition" in spec else bare_seconds(spec, args.repeats)

        def rounds_of(fw: str) -> int:
            R = rounds[workload]
            return min(R, args.flower_rounds) if fw == "flower" and args.flower_rounds else R

        def one_run(fw: str, replay: torch.Tensor | None = None) -> dict:
            python = args.pfl_python if fw == "pfl" else sys.executable
            threads = noise_threads(args.threads) if fw == NOISE else args.threads
            result = run_child(fw, workload, rounds_of(fw), python, threads, args.device, args.cifar_root, replay)
            # a line per run as it ends, so that a run cut short by a time limit still leaves its timings
            done = f"failed: {result['error']}" if "error" in result else (
                f"{median_timed(result):.4f} s/round, start-up {result['startup']:.1f} s")
            print(f"  {workload} {fw}{' (replay)' if replay is not None else ''}: {done}", flush=True)
            if replay is not None:
                return result
            if fw in first_models:  # the checks read each framework's first run: keep one trajectory
                result.pop("models", None)
            elif "models" in result:
                first_models.add(fw)
            return result

        first_models: set[str] = set()
        results = {fw: (rounds_of(fw), combined(runs)) for fw, runs in interleaved_runs(frameworks, one_run, args.runs).items()}
        reference = results.get("seq", (0, {}))[1]
        noise = None
        if "error" not in reference and "models" in reference and rounds[workload] > 1:
            noise = combined([one_run(NOISE)])  # one run: its times are not compared
            results[NOISE] = (rounds[workload], noise)
            noise = None if "error" in noise else noise
        # each framework once more, untimed, from seq's model every round (checks: replay)
        if args.replay and noise is not None:
            for fw in [*frameworks, NOISE]:
                if fw != "seq" and "error" not in results[fw][1]:
                    again = one_run(fw, reference["models"][: rounds_of(fw) - 1])
                    if "error" in again:
                        print(f"{workload:<10} {fw:<17} replay failed: {again['error']}")
                    else:
                        results[fw][1]["replayed"] = again["models"]
        base = results["fedbench"][1].get("seconds") if "fedbench" in results else None
        trajectories = {}
        for fw, (R, res) in results.items():
            if "error" in res:
                print(f"{workload:<10} {fw:<17} {R:>6}  failed: {res['error']}")
                continue
            t = res["seconds"]
            dev = float("nan")
            row_checks = []
            if "models" in reference and fw != "seq":
                trajectories[fw] = deviations(res["models"], reference["models"])
                dev = trajectories[fw][0]
                same_rounds = R == rounds[workload] == results["seq"][0]
                row_checks = checks(res, reference, noise, same_rounds) if fw != NOISE else [
                    f"noise floor, not judged: seq with {noise_threads(args.threads)} thread(s), replayed max "
                    f"{max(deviations(res.get('replayed', res['models']), reference['models'])):.0e}, "
                    f"acc gap {abs(res['accuracy'] - reference['accuracy']):.2f} pt"]
            ratio = f"{t / base:>9.2f}" if base and fw != NOISE else f"{'-':>9}"
            name = fw + (f"[{res['executor']}]" if "executor" in res else "")
            print(f"{workload:<10} {name:<17} {R:>6} {t:>8.4f} {res['startup']:>8.1f} {ratio} {t / bare:>7.2f} "
                  f"{dev:>10.1e} {res['accuracy']:>6.2f}  {', '.join(row_checks)}", flush=True)
        for fw, dev in trajectories.items():
            print(f"{workload:<10} {fw:<17} max-abs deviation from seq after rounds 1..{len(dev)}: "
                  + " ".join(f"{d:.0e}" for d in dev))
            if "replayed" in results[fw][1]:
                step = deviations(results[fw][1]["replayed"], reference["models"])
                print(f"{workload:<10} {fw:<17} the same, every round from seq's model (replay):      "
                      + " ".join(f"{d:.0e}" for d in step))
        if bare == bare:
            print(f"{workload:<10} {'bare':<17} {'':>6} {bare:>8.4f} {'':>8} {bare / base if base else float('nan'):>9.2f} {1.0:>7.2f}")
        peers = {fw: res["seconds"] for fw, (_, res) in results.items() if fw in ("seq", "pfl") and "error" not in res}
        if base and peers:
            best = min(peers, key=peers.get)
            print(f"{workload:<10} best of {'/'.join(peers)}: {best}; it / fedbench = {peers[best] / base:.2f}; load average "
                  f"now {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
