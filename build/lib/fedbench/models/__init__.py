"""Models: the zoo and the flat-parameter view. Every module here registers on import."""

import importlib
import pkgutil

from fedbench.models.flat import FlatModel
from fedbench.models.zoo import MODELS

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **kwargs) -> FlatModel:
    return FlatModel(MODELS.get(name)(tuple(input_shape), num_classes, **kwargs))


__all__ = ["MODELS", "FlatModel", "build_model"]
