"""Precision contract, driven by the registry (every case of test_contract.py: each registered algorithm,
each variant file and the branches the defaults leave untouched): in a float64 run no floating tensor an
algorithm creates, keeps in its state or sends down or up is of lower precision.

A torch dispatch mode watches every operator run while one of the algorithm's hooks (init, broadcast,
client_update, aggregate, ...) executes, the engine's gradients inside client_update included, and
records each output of a lower floating dtype with the line of fedbench that made it. This catches the
silent kind of bug (a Python float times an integer tensor is float32; torch.tensor(0.0) is float32)
that a later `.to(x.dtype)` hides from any check of the final state: FedDA's elapsed prox parameter
`eta_c * steps` was rounded to float32 every round and stalled FedDA at ~1e-8 (issue 40).
"""

from __future__ import annotations

import copy
import traceback
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.algorithms.test_contract import CASES, _algorithm_of, _config, _contract, _with
from fedbench.algorithms import load_all
from fedbench.engine.loop import RunState, initial_state, run_lanes
from fedbench.runs.build import build_lanes

LOWER = {torch.float32, torch.float16, torch.bfloat16, torch.complex64}
for name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, name):
        LOWER.add(getattr(torch, name))
# every hook through which an algorithm creates tensors (base.Algorithm)
HOOKS = ("init", "broadcast", "prepare", "rebroadcast", "relay", "client_update", "aggregate", "model", "metrics")
# the hooks whose returned dicts are state or messages
RETURNS_STATE = ("init", "broadcast", "prepare", "rebroadcast", "relay", "client_update", "aggregate")
PACKAGE = str(Path(__file__).resolve().parents[2] / "fedbench")


def _where() -> str:
    """The innermost lines of fedbench on the stack (the engine's round loop left out)."""
    frames = [f for f in traceback.extract_stack() if f.filename.startswith(PACKAGE) and "engine/loop.py" not in f.filename]
    return " <- ".join(f"{Path(f.filename).relative_to(PACKAGE).as_posix()}:{f.lineno}" for f in reversed(frames[-3:]))


class LowPrecisionWatch(TorchDispatchMode):
    """Records (hook, operator, dtype, where) for every operator output of a LOWER dtype."""

    def __init__(self):
        super().__init__()
        self.hook = ""
        self.found: dict[tuple[str, str, str], str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dtype in LOWER:
                self.found.setdefault((self.hook, str(func), str(t.dtype)), _where())
        return out


def _lower_entries(hook: str, value) -> list[str]:
    """Entries of a returned state or message (dicts, or a tuple of them) of a LOWER dtype."""
    leaves, _ = tree_flatten(value)
    return [f"{hook} returned a {t.dtype} tensor of shape {tuple(t.shape)}" for t in leaves
            if isinstance(t, torch.Tensor) and t.dtype in LOWER]


def watched_lanes(cfgs: list) -> tuple[list[str], list[RunState]]:
    """Train the configs as lanes of one grid (one config: a run alone) with every hook of each lane's
    algorithm under the watch; (findings, the lanes' final states)."""
    feds = [fed for fed, _ in build_lanes([copy.deepcopy(cfg) for cfg in cfgs])]
    watch, returned = LowPrecisionWatch(), []

    def watched(hook, method):
        def call(*args, **kwargs):
            watch.hook = hook
            with watch:
                out = method(*args, **kwargs)
            if hook in RETURNS_STATE:
                returned.extend(_lower_entries(hook, out))
            return out

        return call

    for fed in feds:
        assert fed.x0.dtype == torch.float64, "the contract's configs are float64 runs"
        for hook in HOOKS:  # instance attributes: the engine calls fed.algorithm.<hook>
            setattr(fed.algorithm, hook, watched(hook, getattr(fed.algorithm, hook)))
    states = [initial_state(fed) for fed in feds]
    failures = []
    run_lanes(feds, states, None, lambda k, state, exc: failures.append((k, exc)))
    assert not failures
    made = [f"{hook} made {dtype} by {op} at {where}" for (hook, op, dtype), where in sorted(watch.found.items())]
    kept = [f"server state {k!r} is {v.dtype}" for state in states for k, v in state.server.items() if v.dtype in LOWER]
    kept += [f"client table {k!r} is {t.dtype}" for state in states for k, t in state.tables.items() if t.dtype in LOWER]
    return made + sorted(set(returned)) + sorted(set(kept)), states


def _check(case: str, cfgs: list) -> None:
    findings, states = watched_lanes(cfgs)
    assert all(state.round == len(state.history) > 0 for state in states)  # the watched runs went through their rounds
    assert not findings, f"{case}: lower precision in a float64 run:\n" + "\n".join(findings)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_float64_run_makes_keeps_and_sends_nothing_of_lower_precision(case):
    _check(case, [_config(case)])


@pytest.mark.parametrize("case", sorted(case for case in CASES if load_all().get(_algorithm_of(case)).lr_rows))
def test_lanes_of_two_step_sizes_make_nothing_of_lower_precision(case):
    """Algorithms that take per-client step sizes (lr_rows) see them as an [s, 1] tensor when lanes of
    several step sizes share a chunk: that path too (seeds 0 and 2 of the contract's lanes, eta_l and eta_l / 2)."""
    cfgs = _contract(case).lane_configs()
    _check(case, [cfgs[0], cfgs[2]])


# code paths that neither the defaults nor the contract's branches take: (case, overrides)
MORE_BRANCHES = {
    "fedadmm_chained": ("fedadmm", "algorithm.chained=true"),
    "fedprox_hetero_epochs": ("fedprox", "algorithm.hetero_epochs=true"),
    "fedcomp_server_schedule": ("fedcomp", "algorithm.local_prox_schedule=server"),
    "fedmid_no_server_prox": ("fedmid", "algorithm.server_prox=false"),
}


@pytest.mark.parametrize("branch", sorted(MORE_BRANCHES))
def test_more_branches_make_nothing_of_lower_precision(branch):
    case, *overrides = MORE_BRANCHES[branch]
    _check(branch, [_with(case, *overrides)])


def test_the_watch_sees_a_python_float_times_an_integer_tensor():
    """The watch itself: the pattern of FedDA's old bug is found, its float64 form is not."""
    watch = LowPrecisionWatch()
    steps = torch.tensor([3, 4])
    with watch:
        (0.1 * steps).to(torch.float64)
    assert [key[1:] for key in watch.found] == [("aten.mul.Tensor", "torch.float32")]
    watch = LowPrecisionWatch()
    with watch:
        steps.to(torch.float64) * 0.1
        torch.zeros(2, dtype=torch.float64) + 1.0
    assert not watch.found
