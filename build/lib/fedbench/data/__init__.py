"""Data: in-memory data sets and partitioners. Every module here registers on import."""

import importlib
import pkgutil

from fedbench.data.base import Dataset
from fedbench.data.datasets import DATASETS
from fedbench.data.partitions import PARTITIONS, fingerprint, make_partition

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["DATASETS", "PARTITIONS", "Dataset", "fingerprint", "make_partition"]
