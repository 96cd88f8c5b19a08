"""Data: in-memory data sets and partitioners. Every module here registers on import; the
registries import them on first use, so a light module (e.g. data.locations) loads alone."""

import importlib

_EXPORTS = {
    "DATASETS": "fedbench.data.datasets", "PARTITIONS": "fedbench.data.partitions", "Dataset": "fedbench.data.base",
    "fingerprint": "fedbench.data.partitions", "make_partition": "fedbench.data.partitions",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_EXPORTS)
