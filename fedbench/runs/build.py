"""Config -> Federation: load the data, split it, build the model and the algorithm."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from omegaconf import DictConfig

from fedbench.core.origin import qualified_name
from fedbench.core.types import LocalExtras, Setting
from fedbench.config.validate import checked_algorithm, params_of, partition_of
from fedbench.data import DATASETS, Dataset, fingerprint, make_partition
from fedbench.data.validate import check_dataset
from fedbench.engine.gradients import auto_executor, auto_loop_below, eval_batch_size, make_grad_fn
from fedbench.engine.lazy_clients import LazyClientData
from fedbench.engine.local import ClientData, objective_gradient
from fedbench.engine.loop import Federation
from fedbench.core.errors import ConfigError
from fedbench.models import build_model
from fedbench.runs.interrupts import raise_received


@dataclass
class BuildInfo:
    partition_fingerprint: str
    dim: int
    executor: str
    device: str
    num_train: int
    num_test: int


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


_CPU_CHUNK_BYTES = 16 * 2**20


# Share of an accelerator's free memory a chunk's gradient call may take: the lanes' parameter rows
# take up to half (runs.batched.auto_max_batch), the allocator's slack the rest.
_ACCELERATOR_CHUNK_FRACTION = 0.35


def client_chunk(requested: int, cohort: int, dim: int, dtype: torch.dtype, device: torch.device, executor: str,
                 client_bytes: int = 0, free_bytes: int = 0) -> int:
    """Clients trained at once. The loop executor trains client by client; vmap takes the
    requested chunk, or (0) on an accelerator the whole cohort, capped by memory when a client's
    gradient call is measured (`client_bytes`: a conv net's activations, not its parameters, fill
    the GPU: 20 lanes of ResNet-18-GN ran out of memory at the whole cohort), and on CPU as many
    clients as keep the chunk's [s, d] parameters within ~16 MiB, near the last-level cache: for
    mlp_2nn at S = 100 a chunk of 20 runs a round 2x faster than the whole cohort
    (scripts/bench_engine.py). Results do not depend on the chunk."""
    if executor == "loop":
        return 1
    if requested:
        return min(requested, cohort)
    if device.type != "cpu":
        if client_bytes and free_bytes:
            return max(1, min(cohort, int(_ACCELERATOR_CHUNK_FRACTION * free_bytes) // client_bytes))
        return cohort
    itemsize = torch.empty((), dtype=dtype).element_size()
    return max(1, min(cohort, _CPU_CHUNK_BYTES // (dim * itemsize)))


def client_gradient_bytes(grad_fn, x0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, width: int) -> int:
    """Peak accelerator memory of one client's gradient on a minibatch of `width` samples: its
    activations, gradient row and workspace, measured as half a two-client call (which counts the call's
    fixed part twice: a safe side)."""
    device = x0.device
    X = x0.expand(2, -1).clone()
    xb, yb = torch.stack((x[:width],) * 2), torch.stack((y[:width],) * 2)
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    grad_fn(X, xb, yb, None)
    torch.cuda.synchronize(device)
    return max(1, (torch.cuda.max_memory_allocated(device) - base) // 2)


EAGER_SYNTHETIC_BYTES = 240_000  # memory per user of the sequential generator's data set (issue 35's measure)
# The per_user generator's set-up, measured as peak RSS of build_federation (issue 42): 66-73 bytes per user
# (sizes, hashes, weights, client tables' index) and 10.6 kB per evaluated user at test_fraction 0.2.
PER_USER_SETUP_BYTES = 96
EVAL_USER_BYTES_PER_TEST_FRACTION = 80_000


def setup_bytes(cfg: DictConfig) -> tuple[int, str]:
    """What setting up the run will hold in memory, estimated from the config before anything is made
    (0 where it does not grow with a setting), and what holds it."""
    from fedbench.data.synthetic import resolve_generator

    ds = cfg.dataset
    if ds.name != "synthetic":
        return 0, ""
    users = int(ds.num_users)
    if resolve_generator(str(ds.get("generator", "sequential")), users) == "sequential":
        return users * EAGER_SYNTHETIC_BYTES, "with dataset.generator=sequential holds every user's data in memory"
    tested = users if int(ds.get("eval_users", 0)) <= 0 else min(users, int(ds.eval_users))
    need = users * PER_USER_SETUP_BYTES + int(tested * EVAL_USER_BYTES_PER_TEST_FRACTION * float(ds.get("test_fraction", 0.2)))
    return need, f"with dataset.eval_users={ds.get('eval_users', 0)} holds each user's size and weight and {tested} users' test data"


def check_setup_fits(cfg: DictConfig) -> None:
    """Refuse, before allocating anything, a run whose set-up cannot fit in the memory available: minutes
    of generating would end in a traceback or the kernel's OOM killer."""
    need, what = setup_bytes(cfg)
    if not need:
        return
    from fedbench.core.memory import available_bytes

    free = available_bytes(torch.device("cpu"))
    if need > free:
        ds = cfg.dataset
        fix = ("dataset.generator=per_user makes each user's data when it is sampled" if "sequential" in what else
               "choose fewer users (dataset.num_users) or a smaller test sample (dataset.eval_users)")
        gib = lambda n: f"{n / 2**30:.{0 if n >= 10 * 2**30 else 1}f} GiB"  # noqa: E731
        raise ConfigError(f"dataset.num_users={ds.num_users} {what} (~{gib(need)}, more than this machine "
                          f"has available); {fix}")


def check_population(cfg: DictConfig, population) -> None:
    """A population made on demand is split by its own users, and its training data is never whole."""
    if cfg.partition.name != "natural":
        raise ConfigError(f"partition={cfg.partition.name}: dataset.generator=per_user makes each user's data when it "
                          "is sampled, so only partition=natural (the data set's own users) applies")
    if int(cfg.num_clients) != population.num_clients:
        raise ConfigError(f"partition=natural: the data set has {population.num_clients} users; "
                          f"set num_clients={population.num_clients}")
    if int(cfg.train_loss_every):
        raise ConfigError(f"train_loss_every={cfg.train_loss_every}: the full training loss needs every user's data; "
                          "dataset.generator=per_user makes users when sampled (set train_loss_every=0)")


def build_federation(cfg: DictConfig) -> tuple[Federation, BuildInfo]:
    return build_lanes([cfg])[0]


def build_lanes(cfgs: list[DictConfig]) -> list[tuple[Federation, BuildInfo]]:
    """Federations of runs that differ only in what lanes may differ in (the seed, step sizes and
    the algorithm's numeric hyperparameters; runs.batched groups them): the data set, its split
    (partition.seed) and the model are built once and shared; each run has its own algorithm,
    setting, seed and initial model x0 (drawn with its seed). Chunks hold the lanes' clients."""
    cfg = cfgs[0]
    algorithms = [checked_algorithm(c) for c in cfgs]  # each config is validated here unless preflight did
    device = resolve_device(str(cfg.engine.device))
    check_setup_fits(cfg)
    factory = DATASETS.get(cfg.dataset.name)
    dataset = factory(
        root=str(cfg.data.root), download=bool(cfg.data.download), **{
            k: v for k, v in params_of(cfg.dataset).items() if k not in ("root", "download")
        }
    )
    if not isinstance(dataset, Dataset):  # a plugin's factory (config.plugins) that returns something else
        raise ConfigError(f"dataset {cfg.dataset.name!r}: {qualified_name(factory, cfg.dataset.name)} returned a {type(dataset).__name__}, not a "
                          "fedbench.data.Dataset (like the built-ins of fedbench/data/datasets.py)")
    check_dataset(dataset, f"dataset {cfg.dataset.name} (data.root={cfg.data.root})")  # behind each reader's own checks
    positive = cfg.data.get("binary_classes")
    if positive:
        if dataset.task != "classification":
            raise ConfigError(f"data.binary_classes needs a classification data set; {cfg.dataset.name} is {dataset.task}")
        check_binary_classes(list(positive), dataset.num_classes, str(cfg.dataset.name))
        dataset = dataset.to_binary(list(positive))
    population = dataset.population
    if population is None:
        owner = None if dataset.train_owner is None else dataset.train_owner.numpy()
        split_seed, split_params = partition_of(cfg)
        parts = make_partition(
            cfg.partition.name, dataset.y_train.numpy() if dataset.task == "classification" else
            dataset.y_train.numpy().round().astype(np.int64), cfg.num_clients, split_seed, owner=owner, **split_params,
        )
    else:
        check_population(cfg, population)
    dtype = {"float32": torch.float32, "float64": torch.float64}[str(cfg.engine.dtype)]

    def model(seed: int):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                flat = build_model(cfg.model.name, dataset.input_shape, dataset.num_classes, **params_of(cfg.model))
            except (ValueError, RuntimeError) as exc:
                raise misfit(cfg, dataset, str(exc)) from None
        flat.module.to(device=device, dtype=dtype)
        return flat

    flat = model(cfg.seed)
    dataset = dataset.cast(dtype)
    x0 = flat.initial_vector().to(device)
    try:  # a shape mismatch between model and data shows on one sample
        out = flat.forward_flat(x0, dataset.x_test[:1].to(device))
    except RuntimeError as exc:
        raise misfit(cfg, dataset, str(exc)) from None
    if tuple(out.shape[1:]) != (dataset.num_classes,):  # the loss would fail (or broadcast) inside the first round
        raise misfit(cfg, dataset, f"it gives outputs of shape {list(out.shape[1:])} per sample, where its "
                                  f"{output_need(dataset)}")
    dataset = dataset.to(device)
    executor, loop_below = cfg.engine.executor, 0
    if executor == "auto":
        executor = auto_executor(cfg.model.name, flat.module, device)
        loop_below = auto_loop_below(executor, device)
    grad_fn = make_grad_fn(flat, dataset.task, executor, loop_below)
    if population is None:
        clients = ClientData.from_partition(
            dataset.x_train, dataset.y_train, parts, cfg.seed, grad_fn, cfg.loss_scale, transform=dataset.augment
        )
    else:
        clients = LazyClientData.of(population, cfg.seed, grad_fn, cfg.loss_scale, dtype, device)
    sizes = clients.size.double()
    objective_weights = sizes / sizes.sum() if cfg.aggregation == "num_samples" else torch.full_like(sizes, 1 / len(sizes))
    # the chunk rule sees every lane's cohort: on an accelerator all of them train at once
    client_bytes = free_bytes = 0
    if device.type == "cuda" and not int(cfg.engine.client_chunk) and executor != "loop" and population is None:
        from fedbench.core.memory import available_bytes

        largest = int(clients.size.max())
        width = min(int(cfg.batch_size) or largest, largest)  # batch_size=0: full batch
        client_bytes = client_gradient_bytes(grad_fn, x0, dataset.x_train, dataset.y_train, width)
        free_bytes = available_bytes(device)
    chunk = client_chunk(int(cfg.engine.client_chunk), cfg.clients_per_round * len(cfgs), flat.dim, dtype, device, executor,
                         client_bytes, free_bytes)
    state_device = cfg.engine.client_state_device
    info = BuildInfo(fingerprint(parts) if population is None else population.fingerprint, flat.dim, executor,
                     str(device), dataset.num_train, len(dataset.y_test))
    out = []
    for k, (c, algorithm) in enumerate(zip(cfgs, algorithms)):
        algorithm.setup(
            Setting(
                num_clients=c.num_clients,
                clients_per_round=c.clients_per_round,
                dim=flat.dim,
                eta_l=float(c.eta_l),
                eta_g=float(c.eta_g),
                eta_l_decay=float(c.eta_l_decay),
                extras=LocalExtras(float(c.weight_decay), float(c.grad_clip), float(c.local_momentum)),
                client_sizes=clients.size,
                device=device,
                client_weights=objective_weights.to(device) if c.aggregation == "num_samples" else None,
                objective_grad=partial(objective_gradient, clients, weights=objective_weights, chunk=chunk),
            )
        )
        fed = Federation(
            dataset=dataset,
            clients=clients,
            flat=flat,
            algorithm=algorithm,
            x0=x0 if c.seed == cfg.seed else model(c.seed).initial_vector().to(device),
            seed=c.seed,
            rounds=c.rounds,
            clients_per_round=c.clients_per_round,
            batch_size=c.batch_size,
            local_steps=c.local_steps,
            local_epochs=c.local_epochs,
            client_chunk=chunk,
            eval_every=c.eval_every,
            train_loss_every=c.train_loss_every,
            aggregation=c.aggregation,
            client_state_device=device if state_device in ("auto", "disk") else torch.device(state_device),
            client_state_disk=state_device == "disk",
            device=device,
            eval_batch=eval_batch_size(cfg.model.name, device),
        )
        out.append((fed, info))
    raise_received()  # a signal during the imports above (torch's) ends the job here, before its record starts
    return out


def output_need(dataset) -> str:
    """What the data set's task needs of a model's output, in words."""
    if dataset.task == "classification":
        return f"{dataset.num_classes} classes need [{dataset.num_classes}]"
    return f"{dataset.task} task needs [1]"


def misfit(cfg: DictConfig, dataset, why: str) -> ConfigError:
    """A model that does not fit the data set, with the model choices that do."""
    fit = models_that_fit(dataset.input_shape, dataset.num_classes)
    return ConfigError(f"model {cfg.model.name!r} does not fit data set {cfg.dataset.name!r}: {why}; models that fit "
                       f"it: {', '.join(fit) or '(none)'}")


def models_that_fit(input_shape: tuple[int, ...], num_classes: int) -> list[str]:
    """The model choices (conf/model, as the files set them) that take these inputs and give `num_classes` outputs,
    tried on the meta device: no memory, no compute."""
    from fedbench.config.compose import conf_dir
    from fedbench.config.preflight import group_choices
    from fedbench.core.user_yaml import load_yaml
    from fedbench.models import build_model

    fit = []
    for choice in group_choices(conf_dir(), "model"):
        try:
            params = load_yaml((conf_dir() / "model" / f"{choice}.yaml").read_text())
            name = params.pop("name")
            with torch.device("meta"):
                out = build_model(name, input_shape, num_classes, **params).module(torch.empty(1, *input_shape))
        except Exception:  # noqa: BLE001 - a model that cannot take these inputs (any error of its own) does not fit
            continue
        if tuple(out.shape[1:]) == (num_classes,):
            fit.append(choice)
    return fit


def check_binary_classes(positive: list, num_classes: int, name: str) -> None:
    """data.binary_classes must name classes of the data set, and leave at least one out: a task whose
    labels are all 1 (or all 0) trains nothing and scores accuracy 1.0."""
    valid = f"{name} has the {num_classes} classes 0..{num_classes - 1}"
    unknown = [c for c in positive if not isinstance(c, int) or not 0 <= c < num_classes]
    if unknown:
        raise ConfigError(f"data.binary_classes={positive}: {', '.join(map(str, unknown))} not a class; {valid}")
    if len(set(positive)) == num_classes:
        raise ConfigError(f"data.binary_classes={positive} names every class, a task with one label; {valid}: "
                          "leave at least one out (label 0)")
