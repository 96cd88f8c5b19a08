"""What every algorithm must keep, checked on a small problem where cohorts, minibatches, unequal local work
and the order of chunks all matter: equal runs whatever the executor or the client chunk, a resumed run bit for
bit equal to the straight one, lanes of a batched grid equal to each run alone, and the floats the engine counts
equal to what the class declares (Algorithm.sends / floats_per_client). tests/algorithms/test_contract.py
applies it to every built-in."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig

from fedbench.engine.checkpoint import load_checkpoint, save_checkpoint
from fedbench.engine.loop import Federation, RunState, initial_state, run, run_lanes
from fedbench.runs.build import build_federation, build_lanes

K = 2  # rounds before the checkpoint; the straight run has 2K
# 6 clients of 6 * 1.3**k samples (6 .. 22), d = 10, two local epochs of batches of 3 (4 .. 16 steps),
# 4 clients a round weighted by their sizes: least squares in float64, so equal means equal
PROBLEM = (
    "dataset=lstsq", "partition=natural", "model=linear", "engine.dtype=float64", "eval_every=0",
    "num_clients=6", "dataset.num_users=6", "dataset.dim=9", "dataset.samples_per_user=6",
    "dataset.size_growth=1.3", "clients_per_round=4", "batch_size=3", "local_steps=null", "local_epochs=2",
    "eta_l=0.02", "eta_l_decay=0.9", "aggregation=num_samples", f"rounds={2 * K}",
)
TIMES = ("wall_time", "eval_time", "warmup_time")


def compose_problem(overrides: Sequence[str], config_dir: str | Path | Sequence[str | Path] | None = None,
                    problem: Sequence[str] = PROBLEM) -> DictConfig:
    """The config of `overrides` (an algorithm and its settings) on `problem`, less the settings the algorithm
    imposes (`algorithm.imposes`); `config_dir` as for fedbench.run. Checked as `fedbench run` checks it."""
    from fedbench.config.compose import compose
    from fedbench.config.preflight import preflight, searchpath
    from fedbench.config.compose import conf_dir

    dirs = () if config_dir is None else (config_dir,) if isinstance(config_dir, (str, Path)) else tuple(config_dir)
    dirs = tuple(Path(d).absolute() for d in dirs)
    search = searchpath(dirs)
    imposed = set(compose([*overrides, *search]).algorithm.get("imposes") or ())
    job = [o for o in problem if o.split("=")[0].split(".")[0] not in imposed] + list(overrides)
    preflight(conf_dir(), [*job, *(a for d in dirs for a in ("--config-dir", str(d)))])
    return compose([*job, *search, "engine.executor=vmap"])


def assert_same_state(got: RunState, want: RunState, tol: float | None = None) -> None:
    """Server state, client tables and floats sent equal (bit for bit when tol is None)."""

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


class Contract:
    """The contract checks of one algorithm configuration: `Contract(["algorithm=fedavg"])`, or a composed
    config (`Contract.of(cfg)`). Each check raises AssertionError naming what differs."""

    def __init__(self, overrides: Sequence[str] = (), config_dir=None, problem: Sequence[str] = PROBLEM,
                 cfg: DictConfig | None = None):
        self.cfg = cfg if cfg is not None else compose_problem(overrides, config_dir, problem)

    @classmethod
    def of(cls, cfg: DictConfig) -> Contract:
        return cls(cfg=cfg)

    @functools.cache
    def federation(self, executor: str = "vmap") -> Federation:
        cfg = copy.deepcopy(self.cfg)
        cfg.engine.executor = executor
        fed, _ = build_federation(cfg)
        if executor == "loop":  # the research loop: one client at a time, every step computed for every client
            fed.group_by_work = fed.clients.skip_done = False
        return fed

    @staticmethod
    def run(fed: Federation, state: RunState | None = None) -> RunState:
        return run(copy.deepcopy(fed), state)  # a fresh copy: nothing a run leaves behind reaches the next

    @functools.cached_property
    def reference(self) -> RunState:
        """2K rounds straight, vmap over the whole cohort."""
        return self.run(self.federation())

    def check_state_moves(self) -> None:
        """The state keeps its keys, shapes and dtypes, and the model moves."""
        fed = self.federation()
        start, end = initial_state(fed), self.reference
        assert start.server.keys() == end.server.keys()
        for key, value in start.server.items():
            assert (value.shape, value.dtype) == (end.server[key].shape, end.server[key].dtype), f"server {key}"
        assert torch.isfinite(fed.algorithm.model(end.server)).all(), "the model is not finite"
        assert not torch.equal(fed.algorithm.model(start.server), fed.algorithm.model(end.server)), "the model did not move"

    def check_executors(self, tol: float = 1e-10) -> None:
        """The per-client loop trains as the batched (vmap) executor does."""
        assert_same_state(self.run(self.federation("loop")), self.reference, tol)

    def check_client_chunk(self, tol: float = 1e-10) -> None:
        """Training the cohort two clients at a time gives the run of training it at once."""
        fed = self.federation()
        assert fed.client_chunk == fed.clients_per_round > 2, "the reference must train the cohort at once"
        assert_same_state(self.run(dataclasses.replace(fed, client_chunk=2)), self.reference, tol)

    def check_resume(self, folder: str | Path) -> None:
        """K rounds, a checkpoint written and read back in a fresh federation, K more rounds: bit for bit the
        straight run of 2K rounds, its metrics included."""
        fed = self.federation()
        path = Path(folder) / "contract_checkpoint.pt"
        save_checkpoint(path, self.run(dataclasses.replace(fed, rounds=K)), None, "config hash")
        resumed = copy.deepcopy(fed)
        state = initial_state(resumed)
        load_checkpoint(path, state, resumed.device)
        assert state.round == K
        resumed_state = run(resumed, state)
        assert_same_state(resumed_state, self.reference)

        def untimed(history):
            return [{k: v for k, v in m.items() if k not in TIMES} for m in history]

        assert untimed(resumed_state.history) == untimed(self.reference.history)

    def check_declared_counts(self) -> None:
        """The floats the engine counts each round are what the class declares, for every participating client."""
        fed, history = self.federation(), self.reference.history
        down, up = type(fed.algorithm).floats_per_client(fed.flat.dim)
        S = fed.clients_per_round
        for before, after in zip([{"floats_down": 0.0, "floats_up": 0.0}, *history], history):
            sent = (after["floats_down"] - before["floats_down"], after["floats_up"] - before["floats_up"])
            assert sent == (S * down, S * up), (f"round {after['round']}: (down, up) = {sent}, but "
                                                f"{type(fed.algorithm).__name__} declares {(S * down, S * up)}")

    def lane_configs(self) -> list[DictConfig]:
        """The configuration at seeds 0, 1 and 2, the last with half the step size."""
        cfgs = []
        for seed, scale in ((0, 1.0), (1, 1.0), (2, 0.5)):
            cfg = copy.deepcopy(self.cfg)
            cfg.seed = seed
            cfg.eta_l = float(cfg.eta_l) * scale
            cfgs.append(cfg)
        return cfgs

    def check_lanes(self, tol: float = 1e-10) -> None:
        """Runs trained together as lanes of one program (hydra/launcher=batched) equal each run alone."""
        cfgs = self.lane_configs()
        feds = [fed for fed, _ in build_lanes(cfgs)]
        assert len({id(fed.clients) for fed in feds}) == 1  # one copy of the data, one split
        states = [initial_state(fed) for fed in feds]
        failures = []
        run_lanes(feds, states, None, lambda k, st, exc: failures.append((k, exc)))
        assert not failures, failures
        for got, cfg in zip(states, cfgs):
            alone = self.run(build_federation(cfg)[0])
            assert_same_state(got, alone, tol)
            assert [m["round"] for m in got.history] == [m["round"] for m in alone.history]
            for a, b in zip(got.history, alone.history):
                for key in a.keys() - set(TIMES):
                    assert abs(a[key] - b[key]) <= 1e-12 + 1e-9 * abs(b[key]), key
        first = next(iter(states[0].server))
        assert not torch.equal(states[0].server[first], states[1].server[first]), "lanes of two seeds ran the same"

    def check_all(self, folder: str | Path) -> None:
        """Every check; `folder` holds the resume check's checkpoint."""
        self.check_state_moves()
        self.check_declared_counts()
        self.check_executors()
        self.check_client_chunk()
        self.check_resume(folder)
        self.check_lanes()
