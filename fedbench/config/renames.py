"""Config choices that were renamed: RENAMED[group][old] = new. `fedbench run` refuses an old name
with one line naming the new one (config.preflight); `fedbench resume` maps the names recorded in
an old run folder (cli/run.py)."""

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
