"""The contract every algorithm keeps, driven by the registry: each registered algorithm (and each
variant file of the algorithm group) runs with the run settings its config imposes on a tiny
federation of unequal clients (float64, partial participation where allowed, minibatches), and

  (a) the vmap and loop executors give the same rounds (the loop as the research loop: one client
      at a time, no grouping, no skipped rows), and so does the stacked executor where the model is
      a Sequential of linear, conv and pool layers (it refuses the others in one line; conv nets:
      test_the_stacked_executor_trains_conv_nets_as_the_loop_does),
  (b) the result does not depend on engine.client_chunk,
  (c) k rounds, a checkpoint, a resume and k more rounds give the 2k rounds run straight, bit for bit,
  (d) the floats sent down and up per round are what the method's paper says it sends, as its class
      declares it (Algorithm.sends, or floats_per_client; an algorithm without one fails),
  (e) the yaml defaults equal the dataclass defaults,
  (f) runs trained together as lanes (the batched launcher: other seeds, another step size) each get
      the rounds they get alone,
  (g) the shared local-step extras (weight_decay, grad_clip, local_momentum) at 0 leave the run bit
      for bit; each is taken (it changes the run) or refused with one message; lanes with extras on
      equal their runs alone.

A new algorithm is covered by registering it. (a)-(d) and (f) are the public contract kit
(fedbench.testing.Contract) applied to each case: a user's own algorithm is checked the same way.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import CONF, make_cfg
from fedbench.algorithms import load_all
from fedbench.algorithms.base import EXTRAS
from fedbench.config.validate import params_of, validate
from fedbench.core.errors import ConfigError
from fedbench.core.types import LocalExtras
from fedbench.models.stacked import why_not_stacked
from fedbench.engine.loop import Federation, RunState, initial_state, run_lanes
from fedbench.runs.build import build_federation, build_lanes
from fedbench.testing import PROBLEM as KIT_PROBLEM
from fedbench.testing import Contract, assert_same_state

REGISTERED = load_all().names()
# files of the algorithm group that configure a registered algorithm differently (fedavg/adam, fedsso/ref_v1, ...)
VARIANT_FILES = sorted(name for p in (Path(CONF) / "algorithm").rglob("*.yaml")
                       if (name := str(p.relative_to(Path(CONF) / "algorithm").with_suffix(""))) not in REGISTERED)
# code paths the default configs leave untouched
BRANCHES = {
    "scaffold_option_I": ["algorithm=scaffold", "algorithm.option=I"],
    "fedspeed_participating": ["algorithm=fedspeed", "algorithm.server_correction_avg=participating"],
    "fedspeed_ing_lookahead": ["algorithm=fedspeed_ing", "algorithm.zeta=0.3", "algorithm.ing_init_from_lookahead=true",
                               "algorithm.ing_correction_anchor=x_tilde"],
    "fedadmm_local": ["algorithm=fedadmm", "algorithm.local_init=local", "algorithm.server_step=participation"],
    "fedadmm_lowrank_l1": ["algorithm=fedadmm_lowrank", "algorithm.regularizer=l1", "algorithm.grad_scale=one"],
    "losac_paper_l1": ["algorithm=losac/paper", "algorithm.regularizer=l1", "algorithm.lam=0.01"],
}
CASES = {**{name: [f"algorithm={name}"] for name in [*REGISTERED, *VARIANT_FILES]}, **BRANCHES}

PROBLEM = list(KIT_PROBLEM)
# the same size for the data sets an algorithm may impose instead of lstsq
TINY_DATA = {"lowrank": ["dataset.dim=4", "dataset.rank=2", "dataset.num_users=6", "dataset.samples_per_user=12",
                         "dataset.test_samples=10"]}


def _imposed(cfg) -> set[str]:
    return set(cfg.algorithm.get("imposes") or ())


@functools.cache
def _config(case: str):
    """The case's composed config: PROBLEM less what the algorithm imposes, sized for its data set."""
    imposed = _imposed(make_cfg(*CASES[case]))
    overrides = [o for o in PROBLEM if o.split("=")[0].split(".")[0] not in imposed]
    cfg = make_cfg(*overrides, *CASES[case], "engine.executor=vmap")
    if cfg.dataset.name in TINY_DATA:
        cfg = make_cfg(*overrides, *TINY_DATA[cfg.dataset.name], *CASES[case], "engine.executor=vmap")
    return cfg


@functools.cache
def _contract(case: str) -> Contract:
    return Contract.of(_config(case))


def _federation(case: str, executor: str = "vmap") -> Federation:
    return _contract(case).federation(executor)


def _reference(case: str) -> RunState:
    """2K rounds straight, vmap over the whole cohort."""
    return _contract(case).reference


_run = Contract.run
_assert_same = assert_same_state


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_keeps_its_shapes_and_the_model_moves(case):
    """Server entries keep their dtype and shape (a history, FedSSO's pairs, may grow along dim 0),
    client rows have their declared shapes, the model is finite and has moved."""
    fed, state = _federation(case), _reference(case)

    def layout(server):
        return {k: (v.dtype, v.shape[1:]) for k, v in server.items()}

    assert layout(state.server) == layout(initial_state(fed).server)
    specs = fed.algorithm.client_states()
    for name, table in state.tables.items():
        assert table.rows, f"{name}: the cohorts' rows were never written"
        assert all(row.shape == specs[name].shape and row.dtype == fed.x0.dtype for row in table.rows.values())
    x = fed.algorithm.model(state.server)
    assert torch.isfinite(x).all() and not torch.equal(x, fed.x0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_vmap_and_loop_executors_agree(case):
    _contract(case).check_executors()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stacked_executor_agrees_where_the_model_is_fully_connected(case):
    if why_not_stacked(_federation(case).flat.module) is not None:
        with pytest.raises(ConfigError, match="^engine.executor=stacked runs Sequential"):
            _federation(case, "stacked")
        return
    _assert_same(_run(_federation(case, "stacked")), _reference(case), tol=1e-10)


# every Sequential conv net of the zoo that takes digits' 8x8 images (the LeNets need 16x16 or more:
# tests/models/test_paper_models.py holds their gradients); ResNet-18-GN is not a Sequential and is refused
CONV_PROBLEM = ["dataset=digits", "num_clients=5", "clients_per_round=3", "batch_size=7", "local_steps=3", "local_epochs=null",
                "eta_l=0.05", "aggregation=num_samples", "rounds=2", "engine.dtype=float64", "eval_every=0"]
CONV_MODELS = ["model=cnn", "model=composite/cnn", "model=fedsso/cnn", "model=fedadmm/cnn1", "model=fedadmm/cnn2",
               "model=fedadmm/cnn1 model.conv_relu=true model.output_softmax=false"]


@pytest.mark.parametrize("model", CONV_MODELS)
def test_the_stacked_executor_trains_conv_nets_as_the_loop_does(model):
    """Conv nets as one grouped convolution over the chunk (engine.executor=stacked): FedAvg's rounds
    equal the research loop's (one client at a time) in float64."""
    feds = {}
    for executor in ("stacked", "loop"):
        fed, _ = build_federation(make_cfg(*CONV_PROBLEM, *model.split(), f"engine.executor={executor}"))
        if executor == "loop":
            fed.group_by_work = fed.clients.skip_done = False
        feds[executor] = fed
    assert feds["stacked"].client_chunk == 3  # the cohort in one chunk
    want = _run(feds["loop"])
    assert not torch.equal(want.server["x"], feds["loop"].x0)
    _assert_same(_run(feds["stacked"]), want, tol=1e-10)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_client_chunk_does_not_change_the_run(case):
    _contract(case).check_client_chunk()


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_from_a_checkpoint_equals_the_straight_run(case, tmp_path):
    _contract(case).check_resume(tmp_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_floats_per_round_are_what_the_paper_sends(case):
    _contract(case).check_declared_counts()


@pytest.mark.parametrize("case", sorted(CASES))
def test_lanes_trained_together_equal_each_run_alone(case):
    _contract(case).check_lanes()


# -- (e) defaults ---------------------------------------------------------------------------------

def _dataclass_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("name", REGISTERED)
def test_yaml_defaults_equal_the_dataclass_defaults(name):
    """conf/algorithm/<name>.yaml and the dataclass are the two places a default is written: they agree."""
    cfg = make_cfg(f"algorithm={name}")
    assert cfg.algorithm.name == name
    yaml = params_of(cfg.algorithm)
    yaml.pop("imposes", None)
    code = _dataclass_defaults(load_all().get(name))
    assert set(yaml) <= set(code), f"yaml keys the dataclass lacks: {set(yaml) - set(code)}"
    differing = {k: (yaml[k], _plain(code[k])) for k in yaml if yaml[k] != _plain(code[k])}
    assert not differing, f"yaml vs dataclass defaults differ: {differing}"
    missing = set(code) - set(yaml)
    assert not missing, f"dataclass fields with no yaml default (users cannot see them in --cfg job): {missing}"



# -- (g) the shared local-step extras -------------------------------------------------------------

EXTRAS_OFF = ["weight_decay=0", "grad_clip=0", "local_momentum=0"]
EXTRAS_ON = ["weight_decay=0.01", "grad_clip=0.5", "local_momentum=0.5"]


def _algorithm_of(case: str) -> str:
    """The registered algorithm a case runs, read from its algorithm file without composing (a variant file's is
    its base's, the first entry of its defaults): composing every case at collection cost each pytest-xdist
    worker 9 s. test_a_case_runs_the_algorithm_its_file_names checks it against the composed config."""
    choice = next(o.partition("=")[2] for o in reversed(CASES[case]) if o.startswith("algorithm="))
    while choice not in REGISTERED:
        data = yaml.safe_load((Path(CONF) / "algorithm" / f"{choice}.yaml").read_text())
        if "name" in data:
            return data["name"]
        choice = data["defaults"][0].removeprefix("/algorithm/").partition("@")[0]
    return choice


TAKES_ALL = sorted(case for case in CASES if set(EXTRAS) <= set(load_all().get(_algorithm_of(case)).local_extras))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_case_runs_the_algorithm_its_file_names(case):
    assert _config(case).algorithm.name == _algorithm_of(case)


def _with(case: str, *overrides: str):
    return make_cfg(*[o for o in PROBLEM if o.split("=")[0].split(".")[0] not in _imposed(_config(case))],
                    *(TINY_DATA.get(_config(case).dataset.name, [])), *CASES[case], "engine.executor=vmap", *overrides)


@pytest.mark.parametrize("case", sorted(CASES))
def test_extras_at_zero_leave_the_run_bit_for_bit(case, monkeypatch):
    """Weight decay, clipping and momentum at 0 (off) give the run of the code without them: the
    extras' hook (common.with_extras) replaced by the identity."""
    cfg = _with(case, *EXTRAS_OFF)
    off = _run(build_federation(cfg)[0])
    import fedbench.algorithms.common as common
    import fedbench.algorithms.fedavg as fedavg

    def untouched(extras, G, X):
        assert extras == LocalExtras()
        return G

    monkeypatch.setattr(common, "with_extras", untouched)
    monkeypatch.setattr(fedavg, "with_extras", untouched)
    _assert_same(off, _run(build_federation(cfg)[0]), tol=None)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("key", EXTRAS)
def test_an_extra_is_taken_or_refused_with_one_message(name, key):
    """Every algorithm's local step takes each extra (the run changes), or a non-zero value stops the
    config with one message naming the key and the algorithm."""
    case = name
    cfg = _with(case, *EXTRAS_OFF, f"{key}=0.5")
    if key in load_all().get(name).local_extras:
        fed = build_federation(cfg)[0]
        assert getattr(fed.algorithm.setting.extras, LocalExtras.NAMES[key]) == 0.5
        if name != "fedsgd" or key != "local_momentum":  # one full-batch step: momentum has nothing to act on
            assert not torch.equal(_run(fed).server["x"], _run(build_federation(_with(case, *EXTRAS_OFF))[0]).server["x"])
    else:
        with pytest.raises(ConfigError, match=f"{key}=0.5: algorithm {name} has no local SGD step that takes it"):
            validate(cfg)


@pytest.mark.parametrize("case", TAKES_ALL)
def test_lanes_with_extras_equal_each_run_alone(case):
    """(f) with every extra on: seeds 0 and 1 share chunks; seed 2 has other extras (and half the step
    size), so its clients must not train in the others' chunks (engine.loop.mixing_key)."""
    cfgs = [_with(case, *EXTRAS_ON, "seed=0"), _with(case, *EXTRAS_ON, "seed=1"),
            _with(case, "weight_decay=0.03", "grad_clip=0.2", "local_momentum=0.3", "seed=2")]
    cfgs[2].eta_l = float(cfgs[2].eta_l) * 0.5
    feds = [fed for fed, _ in build_lanes(cfgs)]
    states = [initial_state(fed) for fed in feds]
    failures = []
    run_lanes(feds, states, None, lambda k, st, exc: failures.append((k, exc)))
    assert not failures
    for cfg, got in zip(cfgs, states):
        _assert_same(got, _run(build_federation(cfg)[0]), tol=1e-10)
