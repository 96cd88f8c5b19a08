"""The one checker of a run config's values: each value against its declared type (an annotation:
the schema's, or a group factory's signature) and what is valid (schema.Spec); every key against
the keys declared where it sits, with a did-you-mean. Works on plain resolved containers."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

from fedbench.config.schema import MAX_INT64, Spec, spec_of
from fedbench.core.values import is_number
from fedbench.config.suggest import nested_key
from fedbench.core.errors import ConfigError, did_you_mean, unknown_choice
from fedbench.core.secrets import redact

_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
          dict: "a mapping"}


def _union_args(tp) -> tuple | None:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _beyond(value: Any, largest: float) -> bool:
    """An integer literal beyond `largest`: MAX_INT64 for an integer key (the engine's tensors hold it as int64),
    the largest float for a number (10**400 has no float)."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > largest


def _bounds(s: Spec) -> str:
    if s.bounds:
        return s.bounds
    low = f"{'(' if s.gt is not None else '['}{s.gt if s.gt is not None else s.ge:g}" if (s.gt, s.ge) != (None, None) else ""
    if s.le is not None:
        return f"in {low or '(-inf'}, {s.le:g}]"
    if s.lt is not None:
        return f"in {low or '(-inf'}, {s.lt:g})"
    return f"> {s.gt:g}" if s.gt is not None else f">= {s.ge:g}" if s.ge is not None else ""


def describe(tp, s: Spec) -> str:
    """What a value of this type and spec is, in words: 'an integer >= 1', 'a finite number > 0'."""
    arms = _union_args(tp)
    if arms is not None:
        inner = [describe(a, s) for a in arms if a is not type(None)]
        return " or ".join(inner) + (" or null" if type(None) in arms else "")
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if s.valid:
        return s.valid
    base = typing.get_origin(tp) or tp
    if base is list and typing.get_args(tp):
        return f"a list of {_plural(describe(typing.get_args(tp)[0], s))}"
    bounds = _bounds(s)
    if base is float and bounds:
        return f"a finite number {bounds}"
    word = _WORDS.get(base, getattr(base, "__name__", str(base)))
    return f"{word} {bounds}".strip() if base in (int, float) else word


def _plural(text: str) -> str:
    return text.replace("an integer", "integers", 1).replace("a finite number", "finite numbers", 1) \
        .replace("a number", "numbers", 1).replace("a string", "strings", 1)


def _fits(value: Any, tp, s: Spec) -> bool:
    """Whether `value` has type `tp` and satisfies `s` (list elements: each one)."""
    arms = _union_args(tp)
    if arms is not None:
        return any(_fits(value, a, s) for a in arms)
    if tp is type(None):
        return value is None
    if typing.get_origin(tp) is Literal:
        return value in typing.get_args(tp)
    base = typing.get_origin(tp) or tp
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool) and not _beyond(value, MAX_INT64) and _in_range(value, s)
    if base is float:
        return is_number(value) and not _beyond(value, sys.float_info.max) and (not _ranged(s) or (math.isfinite(value) and _in_range(value, s)))
    if base is str:
        return isinstance(value, str) and (not s.nonempty or value.strip() != "") and (
            s.pattern is None or re.fullmatch(s.pattern, value) is not None) and (
            s.max_length is None or len(value) <= s.max_length)
    if base is list:
        (item,) = typing.get_args(tp) or (Any,)
        return isinstance(value, list) and all(_fits(v, item, s) for v in value)
    if base is dict:
        return isinstance(value, dict)
    return True  # a type a config cannot hold (an array the engine passes): nothing to check


def _ranged(s: Spec) -> bool:
    return (s.ge, s.gt, s.le, s.lt) != (None, None, None, None)


def _in_range(value: float, s: Spec) -> bool:
    return ((s.ge is None or value >= s.ge) and (s.gt is None or value > s.gt)
            and (s.le is None or value <= s.le) and (s.lt is None or value < s.lt))


def check_value(key: str, value: Any, tp, s: Spec) -> None:
    """Raise one ConfigError naming the key, the value and what is valid, unless the value fits."""
    if tp is Any or tp is inspect.Parameter.empty or _fits(value, tp, s):
        return
    if typing.get_origin(tp) is Literal:
        raise unknown_choice(key, value, map(str, typing.get_args(tp)))
    if s.choices and isinstance(value, str):
        raise unknown_choice(key, value, s.choices)
    base = typing.get_origin(tp) or tp
    if base is list and isinstance(value, list):  # name the first bad element
        (item,) = typing.get_args(tp) or (Any,)
        for i, v in enumerate(value):
            check_value(f"{key}[{i}]", v, item, s)
    hint = f" ({s.hint})" if s.hint else ""
    if _beyond(value, MAX_INT64) and not s.bounds:
        digits = str(abs(value))
        shown = f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}" if len(digits) > 30 else str(value)
        raise ConfigError(f"{key} must be {describe(tp, s)}{hint}, got {shown}: beyond what a run holds (an integer: "
                          "at most 2**63 - 1, a number: at most 1.8e+308)")
    if isinstance(value, str) and s.max_length is not None and len(value) > s.max_length:
        raise ConfigError(f"{key} must be at most {s.max_length} characters (the size of the column MLflow's SQL stores "
                          f"keep it in), got {len(value)}: {value[:40]!r}...")
    raise ConfigError(f"{key} must be {describe(tp, s)}{hint}, got {redact(repr(value))}")  # a URI's password masked


def unknown_key(where: str, key: str, valid: list[str]) -> ConfigError:
    """An unknown key of a section, naming the valid keys and the closest one."""
    message = f"Unknown key {where}.{key}. Valid: {', '.join(sorted(valid)) or '(none)'}."
    return ConfigError(message + did_you_mean(key, valid))


def check_section(values: Mapping[str, Any], schema: type, where: str = "") -> None:
    """Check a schema section (RunConfig, Engine, ...) and its sub-sections: unknown keys, missing
    keys, then every value in the schema's order. Group entries are left to check_group."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    for key in values:
        if key not in fields:
            if not where:
                if (full := nested_key(key, values)) is not None:  # +mu=0.1 beside algorithm.mu
                    raise ConfigError(f"Unknown top-level key {key!r}. Available: {', '.join(sorted(fields))}. "
                                      f"Did you mean {full!r}?")
                raise unknown_choice("top-level key", key, fields)
            raise unknown_key(where, key, list(fields))
    for name, f in fields.items():
        full = f"{where}.{name}" if where else name
        if name not in values:
            raise ConfigError(f"the config has no {full} ({spec_of(f).doc}); it is set in "
                              f"{'config.yaml' if not where else f'conf/{where}/'}")
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            if not isinstance(values[name], dict):
                raise ConfigError(f"{full} must be a mapping of {', '.join(x.name for x in dataclasses.fields(tp))}, "
                                  f"got {values[name]!r}")
            check_section(values[name], tp, full)
        elif tp is not dict:
            check_value(full, values[name], tp, spec_of(f))


@functools.cache
def parameters(factory: Callable, skip: int) -> tuple[list[str] | None, dict[str, Any]]:
    """A factory's settable parameters (None: it takes any keyword) and their annotations.
    For an algorithm class these are its dataclass fields (the __init__ signature)."""
    signature = inspect.signature(factory)
    if any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        return None, {}
    accepted = list(signature.parameters)[skip:]
    try:
        plain_class = inspect.isclass(factory) and not dataclasses.is_dataclass(factory)
        hints = typing.get_type_hints(factory.__init__ if plain_class else factory)  # a class's own: its fields'
    except Exception:  # an annotation that does not evaluate here: check the names alone
        hints = {}
    return accepted, {k: hints.get(k, inspect.Parameter.empty) for k in accepted}


def check_group(kind: str, name: str, params: Mapping[str, Any], factory: Callable, skip: int,
                specs: Mapping[str, Spec]) -> None:
    """A group's parameters against its factory: known names, values of the annotated types,
    and the ranges of `specs` (keyed '<kind>.<parameter>')."""
    accepted, hints = parameters(factory, skip)
    if accepted is None:
        return
    for key, value in params.items():
        if key not in accepted:
            raise ConfigError(f"Unknown parameter {kind}.{key} for {kind} {name!r}. "
                              f"Valid: {', '.join(accepted) or '(none)'}.{did_you_mean(key, accepted)}")
        check_value(f"{kind}.{key}", value, hints[key], specs.get(f"{kind}.{key}", Spec()))
