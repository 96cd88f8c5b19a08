"""The contract every algorithm keeps, driven by the registry: each registered algorithm (and each
variant file of the algorithm group) runs with the run settings its config imposes on a tiny
federation of unequal clients (float64, partial participation where allowed, minibatches), and

  (a) the vmap and loop executors give the same rounds (the loop as the research loop: one client
      at a time, no grouping, no skipped rows), and so does the stacked executor where the model is
      a Sequential of linear, conv and pool layers (it refuses the others in one line; conv nets:
      test_the_stacked_executor_trains_conv_nets_as_the_loop_does),
  (b) the result does not depend on engine.client_chunk,
  (c) k rounds, a checkpoint, a resume and k more rounds give the 2k rounds run straight, bit for bit,
  (d) the floats sent down and up per round are what the method's paper says it sends (SENDS: the
      one datum written per algorithm; an algorithm without one fails),
  (e) the yaml defaults equal the dataclass defaults,
  (f) runs trained together as lanes (the batched launcher: other seeds, another step size) each get
      the rounds they get alone,
  (g) the shared local-step extras (weight_decay, grad_clip, local_momentum) at 0 leave the run bit
      for bit; each is taken (it changes the run) or refused with one message; lanes with extras on
      equal their runs alone.

A new algorithm is covered by registering it; only its communication count must be added here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

import pytest
import torch

from tests.conftest import CONF, make_cfg
from tests.problems import LEAST_SQUARES
from fedbench.algorithms import load_all
from fedbench.algorithms.base import EXTRAS
from fedbench.config.validate import params_of, validate
from fedbench.core.errors import ConfigError
from fedbench.core.types import LocalExtras
from fedbench.engine.checkpoint import load_checkpoint, save_checkpoint
from fedbench.models.stacked import why_not_stacked
from fedbench.engine.loop import Federation, RunState, initial_state, run, run_lanes
from fedbench.runs.build import build_federation, build_lanes

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

K = 2  # rounds before the checkpoint; the straight run has 2K
# 6 clients of 6 * 1.3**k samples (6 .. 22), d = 10, two local epochs of batches of 3 (4 .. 16 steps),
# 4 clients a round weighted by their sizes: cohorts, minibatches, unequal work and the chunks' order all matter
PROBLEM = [
    *LEAST_SQUARES, "num_clients=6", "dataset.num_users=6", "dataset.dim=9", "dataset.samples_per_user=6",
    "dataset.size_growth=1.3", "clients_per_round=4", "batch_size=3", "local_steps=null", "local_epochs=2",
    "eta_l=0.02", "eta_l_decay=0.9", "aggregation=num_samples", f"rounds={2 * K}",
]
# the same size for the data sets an algorithm may impose instead of lstsq
TINY_DATA = {"lowrank": ["dataset.dim=4", "dataset.rank=2", "dataset.num_users=6", "dataset.samples_per_user=12",
                         "dataset.test_samples=10"]}


def vectors(down: int, up: int):
    return lambda d: (down * d, up * d)


# floats per participating client and round, (down, up), as a function of d (timing and step
# sizes the server set itself, `metadata_keys`, are not communication)
SENDS = {
    "fedavg": vectors(1, 1),  # x down, x_i - x up (McMahan et al.; fedsso.md Table 2: n_c); any server_opt
    "fedsgd": vectors(1, 1),  # x down, grad f_i(x) up (fedsso.md §3.2)
    "dsgd": vectors(1, 1),  # x down, one gradient up (losac.md §3.5)
    "fedprox": vectors(1, 1),  # as FedAvg (Li et al. 2020)
    "scaffold": vectors(2, 2),  # (x, c) down, (dy_i, dc_i) up (losac.md §3.3; fedsso.md Table 2: 2 n_c)
    "feddyn": vectors(1, 1),  # theta down, theta_i up (Acar et al. Alg. 1)
    "fedcm": vectors(2, 1),  # (x, Delta) down, dx_i up (losac.md §3.2)
    "mime_svrg": vectors(2, 2),  # (x, c) down, (grad f_i(x), y_i) up (losac.md §3.4)
    "feddane": vectors(2, 2),  # (x, g_bar) down, (grad f_i(x), w_i) up (fedsso.md §3.4: 2 n_c)
    "fedac": vectors(2, 2),  # (x, x_ag) each way (fedsso.md §3.7: 2 n_c)
    "fednl": lambda d: (d, d + d * d),  # x down; grad f_i(x) and the d x d Hessian difference S_i up (fedsso.md §3.5)
    "fedsso": vectors(1, 1),  # x_k down, x_i up (fedsso.md §2.1)
    "fedspeed": vectors(1, 1),  # x down, x_hat_i (or Delta_i, the same size) up (fedspeed.md §2.2, l. 124)
    "fedspeed_ing": vectors(2, 1),  # x^t and the anchor x~^t down (fedspeed.md §2.9, l. 11), x_hat_i up
    "fedsaga": vectors(1, 1),  # x down, dx up (losac.md §2.1)
    "losac": vectors(2, 2),  # (x, phi) down, (dx_i, dphi_i) up (losac.md §2.2.3)
    "fedadmm": vectors(1, 1),  # theta down, one message of d up (fedadmm.md §2, l. 78)
    "fedadmm_lowrank": vectors(1, 1),  # Z down, W_i = pi_i + rho X_i up (losac.md §3.6)
    "fedcomp": vectors(1, 1),  # z^{r+1} down, z_i up (composite.md §2.5, §7.1 item 7)
    "fedmid": vectors(1, 1),  # composite.md §7.1 item 7
    "fedda": lambda d: (d + 1, d),  # z and the scalar prox parameter a down (composite.md §7.1 item 7)
    "fastfedda": vectors(3, 2),  # G, S, w down, G_i, S_i up (composite.md §3.3)
}


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
def _federation(case: str, executor: str = "vmap") -> Federation:
    cfg = copy.deepcopy(_config(case))
    cfg.engine.executor = executor
    fed, _ = build_federation(cfg)
    if executor == "loop":  # the research loop: one client at a time, every step computed for every client
        fed.group_by_work = fed.clients.skip_done = False
    return fed


def _run(fed: Federation, state: RunState | None = None) -> RunState:
    return run(copy.deepcopy(fed), state)  # a fresh copy: nothing a run leaves behind reaches the next


@functools.cache
def _reference(case: str) -> RunState:
    """2K rounds straight, vmap over the whole cohort."""
    return _run(_federation(case))


def _assert_same(got: RunState, want: RunState, tol: float | None) -> None:
    """Server state and client tables equal (bit for bit when tol is None)."""

    def same(a, b, what):
        if tol is None:
            assert torch.equal(a, b), what
        else:
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")

    assert got.server.keys() == want.server.keys()
    for key, value in want.server.items():
        same(got.server[key], value, f"server {key}")
    assert got.tables.keys() == want.tables.keys()
    for name, table in want.tables.items():
        assert got.tables[name].rows.keys() == table.rows.keys(), name
        for i, row in table.rows.items():
            same(got.tables[name].rows[i], row, f"client {i}'s {name}")
    assert (got.floats_down, got.floats_up) == (want.floats_down, want.floats_up)


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
    _assert_same(_run(_federation(case, "loop")), _reference(case), tol=1e-10)


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
    fed = _federation(case)
    assert fed.client_chunk == fed.clients_per_round > 2  # the reference trains the cohort at once
    _assert_same(_run(dataclasses.replace(fed, client_chunk=2)), _reference(case), tol=1e-10)


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_from_a_checkpoint_equals_the_straight_run(case, tmp_path):
    fed = _federation(case)
    first = _run(dataclasses.replace(fed, rounds=K))
    save_checkpoint(tmp_path / "checkpoint.pt", first, None, "config hash")
    resumed = copy.deepcopy(fed)  # a new process: a fresh federation, the state from the file
    state = initial_state(resumed)
    load_checkpoint(tmp_path / "checkpoint.pt", state, resumed.device)
    assert state.round == K
    resumed = run(resumed, state)
    straight = _reference(case)
    _assert_same(resumed, straight, tol=None)
    def untimed(history):
        return [{k: v for k, v in metrics.items() if not k.endswith("_time")} for metrics in history]

    assert untimed(resumed.history) == untimed(straight.history)


@pytest.mark.parametrize("case", sorted(CASES))
def test_floats_per_round_are_what_the_paper_sends(case):
    fed, history = _federation(case), _reference(case).history
    name = fed.algorithm.name
    if name not in SENDS:
        pytest.fail(f"{name} declares no communication count: add to SENDS the floats per client and round "
                    "its paper sends (down, up), with the source")
    down, up = SENDS[name](fed.flat.dim)
    S = fed.clients_per_round
    assert len(history) == 2 * K
    for before, after in zip([{"floats_down": 0.0, "floats_up": 0.0}, *history], history):
        sent = (after["floats_down"] - before["floats_down"], after["floats_up"] - before["floats_up"])
        assert sent == (S * down, S * up), f"round {after['round']}: (down, up) = {sent}"


def _lane_configs(case: str) -> list:
    """The case at seeds 0, 1 and 2, the last with half the step size (its own mixing class)."""
    cfgs = []
    for seed, scale in ((0, 1.0), (1, 1.0), (2, 0.5)):
        cfg = copy.deepcopy(_config(case))
        cfg.seed = seed
        cfg.eta_l = float(cfg.eta_l) * scale
        cfgs.append(cfg)
    return cfgs


@pytest.mark.parametrize("case", sorted(CASES))
def test_lanes_trained_together_equal_each_run_alone(case):
    cfgs = _lane_configs(case)
    feds = [fed for fed, _ in build_lanes(cfgs)]
    assert len({id(fed.clients) for fed in feds}) == 1  # one copy of the data, one split
    states = [initial_state(fed) for fed in feds]
    failures = []
    run_lanes(feds, states, None, lambda k, st, exc: failures.append((k, exc)))
    assert not failures
    for cfg, got in zip(cfgs, states):
        alone = _run(build_federation(cfg)[0])
        _assert_same(got, alone, tol=1e-10)
        assert [m["round"] for m in got.history] == [m["round"] for m in alone.history]
        for a, b in zip(got.history, alone.history):
            for key in a.keys() - {"wall_time", "eval_time", "warmup_time"}:
                assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    assert not torch.equal(states[0].server[next(iter(states[0].server))], states[1].server[next(iter(states[1].server))])


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
TAKES_ALL = sorted(case for case in CASES if set(EXTRAS) <= set(load_all().get(_config(case).algorithm.name).local_extras))


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
