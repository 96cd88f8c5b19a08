"""The run config's schema and its one checker: every key of the yaml is declared (a new key cannot
skip the checker), each value is checked against its type and range, and a config is validated
once per process, but always once."""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from typing import Literal, Optional

import pytest
from omegaconf import OmegaConf

from fedbench.config import validate as validation
from fedbench.config.checker import check_value
from fedbench.config.schema import Data, Engine, RunConfig, Spec, Tracking
from fedbench.core.errors import ConfigError
from tests.conftest import CONF, make_cfg


def _keys(schema) -> set[str]:
    return {f.name for f in dataclasses.fields(schema)}


def test_every_key_of_the_yaml_has_a_schema_entry_and_back():
    """config.yaml's keys (its groups included) and the engine, tracking and data sections are the schema's."""
    top = OmegaConf.load(Path(CONF) / "config.yaml")
    groups = {k for d in top.defaults if isinstance(d, dict) or OmegaConf.is_dict(d) for k in d} - {"_self_", "experiment", "scale", "optional arm"}  # global-package groups: no key of their own
    assert {k for k in top if k not in ("defaults", "hydra")} | groups == _keys(RunConfig)
    assert set(top.data) == _keys(Data)
    for schema, group in ((Engine, "engine"), (Tracking, "tracking")):
        for path in (Path(CONF) / group).glob("*.yaml"):
            assert set(OmegaConf.load(path)) == _keys(schema), path


def test_every_schema_field_has_a_doc_line_and_a_checkable_type():
    for schema in (RunConfig, Engine, Tracking, Data):
        hints = typing.get_type_hints(schema)
        for f in dataclasses.fields(schema):
            assert f.metadata["spec"].doc, f"{schema.__name__}.{f.name} has no doc line"
            assert hints[f.name] is not typing.Any


@pytest.mark.parametrize("tp,spec,value,message", [
    (int, Spec(ge=1), 0, "k must be an integer >= 1, got 0"),
    (int, Spec(ge=1), True, "k must be an integer >= 1, got True"),
    (int, Spec(ge=0, le=5), 6, "k must be an integer in [0, 5], got 6"),
    (float, Spec(gt=0), math.inf, "k must be a finite number > 0, got inf"),
    (float, Spec(), "x", "k must be a number, got 'x'"),
    (Optional[int], Spec(ge=1), 0, "k must be an integer >= 1 or null, got 0"),
    (Literal["vmap", "loop"], Spec(), "vmapp", "Unknown k 'vmapp'. Available: loop, vmap. Did you mean 'vmap'?"),
    (list[float], Spec(gt=0, le=1), [0.5, 2], "k[1] must be a finite number in (0, 1], got 2"),
    (str, Spec(pattern=r"a|b", valid="a or b"), "c", "k must be a or b, got 'c'"),
    (bool, Spec(), "yes", "k must be true or false, got 'yes'"),
])
def test_a_bad_value_names_the_key_the_value_and_what_is_valid(tp, spec, value, message):
    with pytest.raises(ConfigError) as err:
        check_value("k", value, tp, spec)
    assert str(err.value) == message


@pytest.mark.parametrize("tp,spec,value", [
    (int, Spec(ge=1), 1), (float, Spec(gt=0), 2), (Optional[int], Spec(ge=1), None), (list[float], Spec(gt=0, le=1), []),
    (float, Spec(), math.inf), (Literal["a"], Spec(), "a"), (dict, Spec(), {"l1": 0.1}),
])
def test_a_good_value_passes(tp, spec, value):
    check_value("k", value, tp, spec)


def test_a_checked_config_is_not_validated_again_but_a_changed_one_is(monkeypatch):
    cfg = make_cfg("num_clients=4", "clients_per_round=2")
    validation.validate(cfg)
    calls = []
    monkeypatch.setattr(validation, "check_section", lambda *a: calls.append(a))
    algorithm = validation.checked_algorithm(make_cfg("num_clients=4", "clients_per_round=2"))  # composed again
    assert calls == [] and algorithm.name == "fedavg"
    monkeypatch.undo()
    validation.validate(cfg)
    cfg.clients_per_round = 5
    with pytest.raises(ConfigError, match="clients_per_round=5 exceeds num_clients=4"):
        validation.checked_algorithm(cfg)


def test_a_config_composed_without_preflight_is_validated_by_the_build():
    from fedbench.runs.build import build_federation

    with pytest.raises(ConfigError, match="engine.threads must be an integer >= 0, got -1"):
        build_federation(make_cfg("engine.threads=-1"))
