"""Shared test helpers: compose configs, build federations, small runs."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

CONF = str(Path(__file__).resolve().parent.parent / "conf")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

torch.set_num_threads(1)

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which the commands a test
# runs inherit (`fedbench list` then wraps its lines): a worker takes the values of the process that started
# it, which imports this file first
TERMINAL = ("COLUMNS", "LINES")
if "PYTEST_XDIST_WORKER" in os.environ:
    for name, value in zip(TERMINAL, os.environ.get("FEDBENCH_TESTS_TERMINAL", ",").split(",")):
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
else:
    os.environ["FEDBENCH_TESTS_TERMINAL"] = ",".join(os.environ.get(name, "") for name in TERMINAL)


@pytest.fixture(autouse=True)
def signals_of_this_test(monkeypatch):
    """The signals a test's code took stay with that test (runs.interrupts.RECEIVED names a later error as their
    interrupt, and the job-building code raises one it finds: CI at 1f413ed failed on a leftover of another test)."""
    from fedbench.runs import interrupts

    monkeypatch.setattr(interrupts, "RECEIVED", [])


@pytest.fixture(autouse=True)
def store_password_of_this_test():
    """A password a test's code withheld (core.secrets.withhold_uri keeps it in this process's environment) stays
    with that test: a later test's fedbench inherited it and said nothing of where to give one."""
    from fedbench.core.secrets import PASSWORD_ENV

    before = os.environ.get(PASSWORD_ENV)
    yield
    if before is None:
        os.environ.pop(PASSWORD_ENV, None)
    else:
        os.environ[PASSWORD_ENV] = before


def composed(*overrides: str):
    """The config Hydra composes from conf/ and `overrides`."""
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=list(overrides))


# Hydra composes a config in ~0.1 s, and the suite asks for ~900, most of them differing from an earlier one in
# plain values only (seeds, step sizes): composed once per set of config files, as the reproductions' jobs are
COMPOSERS: dict[tuple, object] = {}  # per sys.path and installed plugins' config folders
CHECK_DERIVED = os.environ.get("FEDBENCH_TESTS_CHECK_DERIVED", "") == "1"  # every derived config against Hydra's


def make_cfg(*overrides: str):
    """composed(*overrides), each set of config files composed once in a process: the plain values (key=value)
    set on a copy as Hydra sets them (config.preflight.JobComposer); anything else, or any error, composed
    by Hydra."""
    from fedbench.config.plugins import installed_config_dirs
    from fedbench.config.preflight import JobComposer

    key = (tuple(sys.path), installed_config_dirs())
    if key not in COMPOSERS:
        COMPOSERS[key] = JobComposer(Path(CONF), [], composer=lambda line: composed(*line))
    cfg = COMPOSERS[key](list(overrides))
    if CHECK_DERIVED:
        assert_composed_alike(cfg, composed(*overrides), overrides)
    return cfg


def assert_composed_alike(cfg, reference, overrides) -> None:
    """`cfg` is the config `reference` is: the same YAML and the same struct flag."""
    from omegaconf import OmegaConf

    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(reference), overrides
    assert cfg._get_flag("struct") == reference._get_flag("struct"), overrides


def require_data(available: bool, reason: str) -> None:
    """Skip when a data set or an optional dependency is absent, except in CI, where each is mandatory.
    Callable in a test or at a test module's top (it then skips or fails the whole module, not the session)."""
    if not available:
        if IN_CI:
            pytest.fail(f"mandatory in CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def require_module(name: str, reason: str):
    """`pytest.importorskip` for an optional extra, except in CI, where the extra is mandatory."""
    require_data(importlib.util.find_spec(name.split(".")[0]) is not None
                 and importlib.util.find_spec(name) is not None, reason)
    return importlib.import_module(name)


@pytest.fixture
def tracking(tmp_path):
    """A private MLflow store for a test: returns the override list."""
    return [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "tracking.artifacts=false"]


def run_history(*overrides: str):
    from fedbench.runs.build import build_federation
    from fedbench.engine.loop import run

    fed, _ = build_federation(make_cfg(*overrides))
    return run(fed).history


def build(*overrides):
    """The Federation of a composed config."""
    from fedbench.runs.build import build_federation

    return build_federation(make_cfg(*overrides))[0]


def advance(fed, state, rounds, each=None):
    """Run `rounds` rounds in place on `state`, calling `each(state)` after every round."""
    from fedbench.engine.loop import run_round

    for _ in range(rounds):
        run_round(fed, state)
        state.round += 1
        if each is not None:
            each(state)
    return state


@pytest.fixture(scope="session")
def local_cluster():
    """One scripts/local_cluster.sh cluster (PostgreSQL, an MLflow server on it, a Ray head and a
    worker node) for every test that needs it; each test gets it whole (parts a test stopped are
    started again) and it is torn down at the end of the session, whatever failed."""
    from tests.clusterkit import LocalCluster, missing

    reason = missing()
    if reason is not None:
        require_data(False, reason)
    cluster = LocalCluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def cluster(local_cluster):
    local_cluster.restore()
    return local_cluster


# -- pytest-xdist (pyproject.toml: -n logical): tests/scheduling.py shares the suite among the workers ---


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own choice; a hook of xdist only
def pytest_xdist_make_scheduler(config, log):
    from tests.scheduling import scheduler

    return scheduler(config, log) if config.getvalue("dist") == "load" else None


def pytest_collection_modifyitems(config, items):
    from tests.scheduling import RAY_MODULES, spread

    strays = sorted({item.nodeid.split("::")[0] for item in items if "local_cluster" in getattr(item, "fixturenames", ())
                     and not item.nodeid.startswith(RAY_MODULES)})
    if strays:  # its own cluster on a second worker would start beside the first
        raise pytest.UsageError(f"{', '.join(strays)} use the cluster: add them to RAY_MODULES in tests/scheduling.py")
    # stable: the long ones first, in their order, then the Ray tests (minutes in all), then the rest as collected
    items.sort(key=lambda item: (not spread(item.nodeid), not item.nodeid.startswith(RAY_MODULES)))
