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
        if sep and key in RENAMED and value in RENAMED[key]:
            out[i] = f"{key}={RENAMED[key][value]}"
            under = MOVED_UNDER.get(key, {}).get(value)
            if under:
                for j, other in enumerate(overrides):
                    prefix = other[: len(other) - len(other.lstrip("+~"))]
                    name = other[len(prefix):]
                    if name.startswith(f"{key}.") and not name.startswith((f"{key}.name=", f"{key}.{under}.")):
                        out[j] = f"{prefix}{key}.{under}.{name[len(key) + 1:]}"
    return out
