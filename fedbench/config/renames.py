"""Config choices that were renamed (RENAMED[group][old] = new) and keys that moved (MOVED_KEYS).
`fedbench run` refuses an old name or key with one line naming the new one (config.preflight,
config.compose); `fedbench resume` maps the names recorded in an old run folder (cli/run.py)."""

from __future__ import annotations

RENAMED = {
    "algorithm": {
        "fedavgm": "fedavg/avgm",
        "fedadagrad": "fedavg/adagrad",
        "fedadam": "fedavg/adam",
        "fedyogi": "fedavg/yogi",
        "fedsso_ref_v1": "fedsso/ref_v1",
        "fedsso_ref_v2": "fedsso/ref_v2",
        "scaffold_prox": "scaffold/prox",
        "losac_paper": "losac/paper",
    },
    # paper-specific data sets and models under <group>/<paper>/; the registered names (dataset.name,
    # model.name) are unchanged
    "dataset": {
        "fmnist_fedadmm": "fedadmm/fmnist",
        "mnist_pfl": "fedsso/mnist",
        "emnist_pfl": "fedsso/emnist",
        "cifar10_pfl": "fedsso/cifar10",
        "ijcnn1_pfl": "fedsso/ijcnn1",
        "mnist_raw": "losac/mnist",
        "mnist_binary": "losac/mnist_binary",
        "har_binary": "losac/har_binary",
        "lowrank": "losac/lowrank",
        "proxy_synth": "fedspeed/proxy_synth",
    },
    "model": {
        "cnn1_fedadmm": "fedadmm/cnn1",
        "cnn2_fedadmm": "fedadmm/cnn2",
        "fc_fedadmm": "fedadmm/fc",
        "lenet": "fedsso/lenet",
        "cnn_fedsso": "fedsso/cnn",
        "mlp_sent140": "fedsso/mlp_sent140",
        "lenet_fedspeed": "fedspeed/lenet",
        "cnn_composite": "composite/cnn",
    },
}

# a renamed choice whose own hyperparameters moved under a key: algorithm.beta1 of fedadam is
# algorithm.server_opt.beta1 of fedavg/adam
MOVED_UNDER = {
    "algorithm": {"fedavgm": "server_opt", "fedadagrad": "server_opt", "fedadam": "server_opt", "fedyogi": "server_opt"},
}


# keys that moved: an algorithm's own local-step extras became the shared top-level ones that every
# algorithm's local step takes (core.types.LocalExtras): FedSpeed's weight_decay and grad_clip,
# FedADMM's momentum
MOVED_KEYS = {"algorithm.weight_decay": "weight_decay", "algorithm.grad_clip": "grad_clip",
              "algorithm.momentum": "local_momentum"}
# where they sat in their algorithm's file before (config_hash rebuilds that layout: the same run keeps its hash)
_FORMER_PLACE = {"fedspeed": {"weight_decay": "clip_mode", "grad_clip": "clip_mode"},
                 "fedspeed_ing": {"weight_decay": "clip_mode", "grad_clip": "clip_mode"},
                 "fedadmm": {"local_momentum": "local_init"}}  # key -> the algorithm key it preceded


def moved_message(key: str, value: str = "<value>") -> str | None:
    """The one line that tells a user a moved key's new place (None for any other key)."""
    new = MOVED_KEYS.get(key)
    if new is None:
        return None
    return (f"{key} moved to the top level: use {new}={value} (a shared local-step extra that every "
            "algorithm's local step takes, so that all methods of a comparison get the same)")


# algorithm switches added later whose off value is the earlier behaviour (issue 36): FedADMM's chained clients,
# FedProx's random epochs
LATER_SWITCHES = {"fedadmm": {"chained": False}, "fedprox": {"hetero_epochs": False}}


def before_later_switches(container: dict) -> dict:
    """A resolved config as recorded before LATER_SWITCHES existed (in place): a switch at its off value
    dropped, so runs and checkpoints of earlier versions keep their config hash."""
    algorithm = container.get("algorithm") or {}
    for key, off in LATER_SWITCHES.get(algorithm.get("name"), {}).items():
        if key in algorithm and algorithm[key] == off:
            algorithm.pop(key)
    return container


def before_shared_extras(container: dict) -> dict:
    """A resolved config as recorded before the local-step extras were shared (in place): extras
    at 0 (off) dropped, FedSpeed's weight_decay/grad_clip and FedADMM's momentum back in the
    algorithm group where its file had them, and an `imposes` that lists only them dropped. The
    config hash reads this layout, so runs and checkpoints of earlier versions keep their hash."""
    algorithm = container.get("algorithm") or {}
    former = _FORMER_PLACE.get(algorithm.get("name"), {})
    moved = {key: container.pop(key) for key in former if key in container}
    for key in [k for k in MOVED_KEYS.values() if k in container and not container[k]]:
        container.pop(key)
    if former and "imposes" in algorithm and set(algorithm["imposes"] or ()) <= set(former):
        algorithm.pop("imposes")
    if moved:
        old_name = {new: old.split(".", 1)[1] for old, new in MOVED_KEYS.items()}
        rebuilt = {}
        for k, v in algorithm.items():
            rebuilt.update({old_name[key]: value for key, value in moved.items() if former[key] == k})
            rebuilt[k] = v
        rebuilt.update({old_name[key]: value for key, value in moved.items() if former[key] not in algorithm})
        container["algorithm"] = rebuilt
    return container


def renamed_message(group: str, old: str) -> str | None:
    """The one line that tells a user an old choice's new name (None for a current name)."""
    new = RENAMED.get(group, {}).get(old)
    if new is None:
        return None
    moved = MOVED_UNDER.get(group, {}).get(old)
    hint = f" (its hyperparameters are now {group}.{moved}.<key>)" if moved else ""
    return f"{group}={old} was renamed: use {group}={new}{hint}"


def map_overrides(overrides: list[str]) -> list[str]:
    """A recorded command line with its renamed choices (and the keys that moved with them) mapped."""
    out = list(overrides)
    for i, item in enumerate(overrides):
        key, sep, value = item.partition("=")
        sign = key[: len(key) - len(key.lstrip("+~"))]  # +dataset=..., ~model=...
        key = key[len(sign):]
        if sep and key in MOVED_KEYS:
            out[i] = f"{MOVED_KEYS[key]}={value}"
            continue
        if sep and key in RENAMED and value in RENAMED[key]:
            out[i] = f"{sign}{key}={RENAMED[key][value]}"
            under = MOVED_UNDER.get(key, {}).get(value)
            if under:
                for j, other in enumerate(overrides):
                    prefix = other[: len(other) - len(other.lstrip("+~"))]
                    name = other[len(prefix):]
                    if name.startswith(f"{key}.") and not name.startswith((f"{key}.name=", f"{key}.{under}.")):
                        out[j] = f"{prefix}{key}.{under}.{name[len(key) + 1:]}"
    return out
