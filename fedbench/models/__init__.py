"""Models: the zoo and the flat-parameter view. Every module here registers on import; the
registry imports them on first use."""

from fedbench.models.flat import FlatModel
from fedbench.models.zoo import MODELS


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **kwargs) -> FlatModel:
    return FlatModel(MODELS.get(name)(tuple(input_shape), num_classes, **kwargs))


__all__ = ["MODELS", "FlatModel", "build_model"]
