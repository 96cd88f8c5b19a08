"""What a plugin algorithm's methods return is checked where the engine receives it: the server state from init and
aggregate, the uploads and client state from client_update. A plugin that returns a number, a list or a tensor of
another shape or precision stops at the first round with one line naming its class, its file and the entry, not
with a traceback from deep inside the engine, the checkpoint or torch (docs/own_method.md)."""

from __future__ import annotations

import torch

from fedbench.core.errors import FedbenchError
from fedbench.core.origin import qualified_name, source_line


class AlgorithmReturnError(FedbenchError):
    """An algorithm method returned what the engine cannot take (exit code 1)."""


def is_plugin(algo) -> bool:
    """An algorithm from outside fedbench. fedbench's own are held to what they return by their contract tests
    (tests/algorithms/test_contract.py), so the round loop checks plugins only."""
    return not type(algo).__module__.startswith("fedbench.")


def where(algo, method: str) -> str:
    """The algorithm's method, by its class, and the file and line it is defined in."""
    at = source_line(getattr(type(algo), method, None))
    return f"{qualified_name(type(algo))}.{method}{f' ({at})' if at else ''}"


def _what(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {list(value.shape)}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def check_state(algo, method: str, state, dtype: torch.dtype, rows: int | None = None, like=None,
                what: str = "") -> None:
    """`state`, returned by `algo.method`, is a dict of tensors: floating ones in the run's `dtype` or wider (FedSSO
    keeps float64 pairs in a float32 run), with `rows` clients on dim 0 where given; each entry of `like` (the state
    it replaces) keeps its dtype and its shape but for dim 0 (a history, FedSSO's pairs, grows there).
    `what`: which of the method's returns it is (client_update's upload or client state)."""
    if not is_plugin(algo):
        return
    if not isinstance(state, dict):
        raise AlgorithmReturnError(f"{where(algo, method)} returned {what}{_what(state)}, not a dict of tensors")
    for key, value in state.items():
        bad = None
        if not isinstance(value, torch.Tensor):
            bad = "not a torch.Tensor"
        elif value.is_floating_point() and torch.finfo(value.dtype).bits < torch.finfo(dtype).bits:
            bad = f"the run computes in {str(dtype).removeprefix('torch.')} (engine.dtype), and this loses precision"
        elif rows is not None and (value.dim() == 0 or value.shape[0] != rows):
            bad = f"it needs the chunk's {rows} clients on dim 0"
        elif like is not None and isinstance(like.get(key), torch.Tensor) and (value.dtype != like[key].dtype or
                value.dim() != like[key].dim() or value.shape[1:] != like[key].shape[1:]):  # a history grows on dim 0
            bad = f"it was {_what(like[key])} before"
        if bad:
            raise AlgorithmReturnError(f"{where(algo, method)} returned {what}{key!r} as {_what(value)}: {bad}")


def check_model(algo, server, x0: torch.Tensor) -> None:
    """The global model of a new server state (algo.model) is a vector like the initial one."""
    if not is_plugin(algo):
        return
    x = algo.model(server)
    if not isinstance(x, torch.Tensor) or x.shape != x0.shape or x.dtype != x0.dtype:
        raise AlgorithmReturnError(f"{where(algo, 'aggregate')} returned a state whose model ({where(algo, 'model')}) "
                                   f"is {_what(x)}, where the model's parameters are {_what(x0)}")


def blame(algo, up) -> str:
    """Where a plugin's non-finite model came from, for the divergence message: the uploads of its client_update,
    or else its aggregate (empty for fedbench's own algorithms, where the learning rates are the usual cause)."""
    if not is_plugin(algo):
        return ""
    uploads_bad = any(isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())
                      for v in up.values())
    return f" after {where(algo, 'client_update' if uploads_bad else 'aggregate')}"
