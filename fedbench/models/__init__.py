"""Models: the zoo and the flat-parameter view. Every module here registers on import; the
registry imports them on first use."""

from torch.nn import Module

from fedbench.models.flat import FlatModel
from fedbench.models.zoo import MODELS


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **kwargs) -> FlatModel:
    factory = MODELS.get(name)
    module = factory(tuple(input_shape), num_classes, **kwargs)
    if not isinstance(module, Module):  # a plugin's factory (config.plugins) that returns something else
        from fedbench.core.errors import ConfigError
        from fedbench.core.origin import qualified_name

        raise ConfigError(f"model {name!r}: {qualified_name(factory, name)} returned a {type(module).__name__}, not a torch.nn.Module "
                          "(a model factory takes (input_shape, num_classes, **parameters) and returns the module)")
    return FlatModel(module)


__all__ = ["MODELS", "FlatModel", "build_model"]
