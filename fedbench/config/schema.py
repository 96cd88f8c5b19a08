"""The schema of a run config: every key of config.yaml and of its engine, tracking and data groups,
declared once with its type (the annotation), what is valid (a range, choices or a pattern) and a
doc line. The values live in the yaml files alone (the one source of defaults): these classes are
never instantiated. config/checker.py walks a composed config against them; the parameters of the
dataset, partition, model and algorithm groups are declared by their factories' signatures and the
algorithms' dataclass fields instead (GROUPS).

Plain dataclasses with `typing` annotations, not OmegaConf structured configs: merging a config
into a structured one converts values (eta_l=1 becomes 1.0), which would change the resolved
config, and so the config hash that resume and skip_finished match runs by; it also knows no ranges."""

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

MAX_INT64 = 2**63 - 1  # every count of a run is a 64-bit integer in its tensors
MAX_SEED = MAX_INT64  # the random streams hash the seed as a signed 64-bit integer
DEVICE = r"auto|cpu|mps|cuda(:\d+)?"
# the stores MLflow opens (its tracking-store registry's schemes); a path without one would be its
# retired file store, a sqlite:// without a third slash an in-memory store that keeps nothing
TRACKING_URI = r"(?i)(sqlite:///|https?://|(postgresql|mysql|mssql)(\+\w+)?://|file:|databricks(-uc)?(://|$)|uc(://|$)).*"


@dataclass(frozen=True)
class Spec:
    """What is valid beyond the type: bounds (ge/gt/le/lt), a regular expression the value must match
    in full (`pattern`, described in words by `valid`, or listed by `choices` for a did-you-mean),
    a non-empty string, and a hint appended to the message."""

    doc: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    bounds: str = ""  # the range in words where the numbers would not read well (2**63 - 1)
    pattern: str | None = None
    valid: str = ""
    choices: tuple[str, ...] = ()
    nonempty: bool = False
    max_length: int | None = None  # a string the store keeps in a column of this size
    hint: str = ""


def spec(doc: str, **valid: Any):
    """A schema field: its doc line and what is valid (Spec's keywords). No default: the yaml holds it."""
    return field(metadata={"spec": Spec(doc, **valid)})


def spec_of(f) -> Spec:
    return f.metadata.get("spec", Spec())


@dataclass
class Data:
    root: str = spec("where data sets are looked up and downloaded")
    download: bool = spec("fetch missing data sets (needs a network)")
    binary_classes: Optional[list[int]] = spec("a binary task: label 1 for these classes")


@dataclass
class Engine:
    device: str = spec("where the run computes", pattern=DEVICE, valid="auto, cpu, cuda[:k] or mps")
    executor: Literal["vmap", "stacked", "loop", "auto"] = spec("how client gradients are batched")
    client_chunk: int = spec("clients trained at once (0 = auto)", ge=0)
    client_state_device: str = spec("where per-client state lives", pattern=DEVICE + "|disk",
                                    valid="auto (= engine.device), cpu, cuda[:k], mps or disk")
    dtype: Literal["float32", "float64"] = spec("floating-point precision")
    threads: int = spec("torch CPU threads (0 = torch's default; at most the machine's cores)", ge=0)


@dataclass
class Tracking:
    uri: Optional[str] = spec("MLflow tracking URI (null = the local store)", pattern=TRACKING_URI,
                              valid="an MLflow tracking URI: sqlite:///<file> (sqlite:////<absolute file>), "
                                    "http(s)://<server>, postgresql|mysql|mssql[+driver]://<database>, "
                                    "databricks or file:<folder> (with MLFLOW_ALLOW_FILE_STORE=true)")
    experiment: str = spec("MLflow experiment", nonempty=True, valid="the name of an MLflow experiment",
                           max_length=256)
    run_name: Optional[str] = spec("MLflow run name", max_length=250)
    checkpoint_every: int = spec("rounds between checkpoints (0 = never)", ge=0)
    artifacts: bool = spec("log the metrics CSV, curves and resolved config")
    skip_finished: bool = spec("in a sweep, skip a configuration that FINISHED")
    objective: str = spec("what a job returns to a Hydra sweeper", pattern=r"final_accuracy|best_accuracy|final_loss|rounds_to_.+",
                          choices=("final_accuracy", "best_accuracy", "final_loss", "rounds_to_<t>"))


@dataclass
class RunConfig:
    dataset: dict = spec("the data set: conf/dataset/<name>.yaml")
    partition: dict = spec("how the data is split across clients: conf/partition/<name>.yaml")
    model: dict = spec("the model: conf/model/<name>.yaml")
    algorithm: dict = spec("the algorithm and its hyperparameters: conf/algorithm/<name>.yaml")
    engine: Engine = spec("how the rounds are computed")
    tracking: Tracking = spec("where the run is recorded")
    seed: int = spec("seed of every random stream", ge=0, le=MAX_SEED, bounds="in [0, 2**63 - 1]")
    rounds: int = spec("communication rounds", ge=1)
    num_clients: int = spec("clients N", ge=1)
    clients_per_round: int = spec("clients S sampled per round", ge=1)
    local_steps: Optional[int] = spec("local steps per round (exactly one of local_steps / local_epochs)", ge=1)
    local_epochs: Optional[int] = spec("local epochs per round", ge=1)
    batch_size: int = spec("minibatch size (0 = the full local batch)", ge=0)
    eta_l: float = spec("local learning rate", gt=0)
    eta_l_decay: float = spec("eta_l at round r = eta_l * eta_l_decay**r", gt=0)
    eta_g: float = spec("server learning rate", gt=0)
    weight_decay: float = spec("L2 weight decay of every method's local step (0 = off)", ge=0)
    grad_clip: float = spec("global-norm clip of each local step's data gradient (0 = off)", ge=0)
    local_momentum: float = spec("heavy-ball momentum of every method's local SGD (0 = off)", ge=0, lt=1)
    aggregation: Literal["uniform", "num_samples"] = spec("client weights: 1/S or n_i / sum n")
    loss_scale: Literal["mean", "sum"] = spec("f_i is the mean or the sum of the client's losses")
    eval_every: int = spec("rounds between test evaluations (0 = never)", ge=0)
    train_loss_every: int = spec("rounds between full training-loss evaluations (0 = never)", ge=0)
    targets: list[float] = spec("test accuracies for rounds-to-target", gt=0, le=1)
    stop_at_targets: bool = spec("end the run at the first round where every target is reached")
    resume: bool = spec("continue from the run directory's checkpoint")
    data: Data = spec("where data comes from")


# The groups whose parameters are a factory's: the leading positional parameters the engine fills
# (not settable in the config), and the keys a group's yaml may hold beyond the parameters.
# `_target_`: a user's own code by import path (config.plugins).
GROUPS: dict[str, tuple[int, tuple[str, ...]]] = {
    "dataset": (0, ("name", "_target_")),
    "partition": (3, ("name", "seed", "_target_")),  # labels, num_clients, rng; seed: the split's own seed
    "model": (2, ("name", "_target_")),  # input_shape, num_classes
    "algorithm": (0, ("name", "imposes", "_target_")),  # imposes: the run settings the file sets (documentation)
}

# Ranges of group parameters, for every entry of the group that has the parameter.
PARAMETER_SPECS: dict[str, Spec] = {
    "partition.alpha": Spec(gt=0, hint="large alpha approaches an IID split; partition=iid is the limit"),
    "partition.seed": Spec(ge=0, le=MAX_SEED, bounds="in [0, 2**63 - 1]",
                           hint="the split's own seed, fixed by default so that runs of different seeds share it; "
                                "null: the run's seed"),
    "dataset.alpha": Spec(ge=0, hint="a variance of Synthetic(alpha, beta): how much the users' models differ"),
    "dataset.beta": Spec(ge=0, hint="a variance of Synthetic(alpha, beta): how much the users' data differ"),
    "partition.min_size": Spec(ge=0, hint="the fewest samples a client may hold"),
    "model.hidden": Spec(ge=1, hint="a layer's width"),
    # a task needs two classes at least: with one, every label is that class and accuracy is 1.0 at round 0
    "dataset.num_classes": Spec(ge=2, hint="a task of one class has nothing to learn"),
    "dataset.n_classes": Spec(ge=2, hint="a task of one class has nothing to learn"),
    # scikit-learn's make_classification (its own ranges; a value outside ended in its traceback at the build)
    "dataset.n_samples": Spec(ge=1),  # <= 0 was refused as dataset.n_test, a key the user did not set
    "dataset.n_features": Spec(ge=1),
    "dataset.n_informative": Spec(ge=1),
    "dataset.n_redundant": Spec(ge=0),
    "dataset.n_clusters_per_class": Spec(ge=1),
    "dataset.class_sep": Spec(gt=0, hint="a factor on the hypercube the clusters sit on: larger spreads the classes apart"),
    "dataset.flip_y": Spec(ge=0, le=1, hint="the share of labels drawn at random"),
    # lstsq (<= 0 left each client one sample, silently; its upper bound is the memory: data.problems)
    "dataset.size_growth": Spec(gt=0, hint="client k holds samples_per_user * size_growth**k samples"),
}
