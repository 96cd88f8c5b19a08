"""hydra/launcher=batched: a grid trained as lanes gives every job the record it gets alone (basic
launcher), groups only what shares data, split and model, isolates a diverging job, and skips
finished jobs on a relaunch."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.conftest import make_cfg, require_module
from tests.faultkit import fedbench, runs

# two algorithms x two step sizes x two seeds, unequal clients (Dirichlet), evaluation every round
GRID = ["algorithm=fedavg,fedprox", "eta_l=0.05,0.2", "seed=0,1"]
SETTING = ["num_clients=6", "clients_per_round=3", "rounds=3", "batch_size=16", "partition.alpha=0.3",
           "engine.threads=1", "targets=[0.3]", "tracking.checkpoint_every=2"]
# where a job ran, and how: the only tags in which a job's batched record may differ from its record alone
PLACEMENT_TAGS = {"run_dir", "sweep_dir", "sweep_dirs", "recorded_digest", "batched_lanes"}
TIMES = {"wall_time", "eval_time"}  # measured: their values differ from run to run


def _histories(db):
    client, all_runs = runs(db)
    out = {}
    for r in all_runs:
        key = (r.data.params["algorithm.name"], r.data.params["eta_l"], r.data.params["seed"])
        out[key] = (r, {m: [(x.step, x.value) for x in client.get_metric_history(r.info.run_id, m)] for m in r.data.metrics},
                    sorted(a.path for a in client.list_artifacts(r.info.run_id)))
    return out


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batched")
    done = {}
    for launcher in ("basic", "batched"):
        db = tmp / f"{launcher}.db"
        args = ["-m", f"hydra/launcher={launcher}", *GRID, *SETTING, f"tracking.uri=sqlite:///{db}",
                f"hydra.sweep.dir={tmp}/{launcher}"]
        res = fedbench("run", *args, cwd=tmp, timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
        done[launcher] = (db, res, args)
    return tmp, done


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_every_job_of_the_batched_grid_is_the_run_it_is_alone(grids):
    tmp, done = grids
    basic, batched = _histories(done["basic"][0]), _histories(done["batched"][0])
    assert len(batched) == 8 and batched.keys() == basic.keys()
    assert "8 job(s) in 1 group(s)" in done["batched"][1].stdout
    folders = set()
    for key, (run, metrics, artifacts) in batched.items():
        alone_run, alone, alone_artifacts = basic[key]
        assert run.info.status == "FINISHED" and run.data.tags["batched_lanes"] == "8"
        assert run.info.end_time is not None and run.info.end_time >= run.info.start_time
        params = {k: v for k, v in run.data.params.items() if k != "tracking.uri"}
        assert params == {k: v for k, v in alone_run.data.params.items() if k != "tracking.uri"}
        tags, alone_tags = ({k: v for k, v in t.items() if k not in PLACEMENT_TAGS} for t in (run.data.tags, alone_run.data.tags))
        for t in (tags, alone_tags):  # each launcher's grid writes a store of its own
            t["overrides"] = " ".join(o for o in t["overrides"].split() if not o.startswith("tracking.uri="))
        assert tags == alone_tags and tags["rounds_to_0.3"] == alone_tags["rounds_to_0.3"]
        # every metric at every round (rounds-to-target at step 0), as the job records it alone
        metrics.pop("warmup_time", None), alone.pop("warmup_time", None)  # the process's one-off warm-up: whichever run paid it
        assert metrics.keys() == alone.keys() and {"test_accuracy", "floats_up", "rounds_to_0.3"} <= metrics.keys()
        for name, values in metrics.items():
            assert [step for step, _ in values] == [step for step, _ in alone[name]], (key, name)
            if name not in TIMES:
                assert [v for _, v in values] == pytest.approx([v for _, v in alone[name]], rel=1e-5, abs=1e-6), (key, name)
        latest, alone_latest = ({k: v for k, v in r.data.metrics.items() if k not in TIMES | {"warmup_time"}}
                                for r in (run, alone_run))  # each metric's last value: what reports read
        assert latest == pytest.approx(alone_latest, rel=1e-5, abs=1e-6), key
        assert artifacts == alone_artifacts == ["config.yaml", "curves.png", "metrics.csv"]
        folders.add(run.data.tags["run_dir"])
        assert (tmp / "batched" / run.data.tags["sweep_job"] / "checkpoint.pt").is_file()
    assert len(folders) == 8


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_relaunch_skips_every_finished_job(grids):
    tmp, done = grids
    db, _, args = done["batched"]
    again = fedbench("run", *args[:-1], f"hydra.sweep.dir={tmp}/again", cwd=tmp, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("skipped, this configuration FINISHED") == 8
    assert len(runs(db)[1]) == 8


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_diverging_job_fails_alone(tmp_path):
    db = tmp_path / "m.db"
    res = fedbench("run", "-m", "hydra/launcher=batched", "eta_l=0.01,10", "seed=0,1", "dataset=lstsq",
                   "partition=natural", "model=linear", "num_clients=8", "clients_per_round=2", "local_steps=2",
                   "local_epochs=null", "rounds=30", "tracking.artifacts=false", f"tracking.uri=sqlite:///{db}",
                   f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path, timeout=900)
    assert res.returncode == 1, res.stderr[-3000:]
    finished = {(r.data.params["eta_l"], r.data.params["seed"]): r for r in runs(db)[1]}
    assert {k: r.info.status for k, r in finished.items()} == {
        ("0.01", "0"): "FINISHED", ("0.01", "1"): "FINISHED", ("10", "0"): "FAILED", ("10", "1"): "FAILED"}
    assert finished[("10", "0")].data.tags["failure_reason"].startswith("non-finite")
    assert "2 job(s) failed" in res.stderr
    client = runs(db)[0]
    assert len(client.get_metric_history(finished[("0.01", "1")].info.run_id, "test_loss")) == 30


def _group_sizes(overrides_per_job):
    from fedbench.runs.batched import GroupJob, split_groups

    jobs = [GroupJob(make_cfg(*o), None) for o in overrides_per_job]
    return [len(g) for g in split_groups(jobs, 0)]


@pytest.mark.parametrize("apart", [["dataset=synthetic"], ["model=mlp_2nn"], ["partition=iid"], ["partition.alpha=0.07"],
                                   ["partition.seed=1"], ["num_clients=30"], ["engine.dtype=float64"],
                                   ["loss_scale=sum"], ["data.binary_classes=[0,1]"]])
def test_jobs_that_do_not_share_data_split_or_model_are_never_grouped(apart):
    assert _group_sizes([[], apart]) == [1, 1]


def test_seeds_step_sizes_hyperparameters_and_algorithms_share_a_group():
    assert _group_sizes([[], ["seed=3"], ["eta_l=0.3", "eta_g=0.5", "eta_l_decay=0.99"], ["algorithm=fedprox"],
                         ["algorithm=fedprox", "algorithm.mu=0.5"], ["rounds=7", "clients_per_round=5"]]) == [6]


def test_only_lanes_that_differ_in_the_seed_or_the_step_size_share_chunks():
    from fedbench.engine.loop import mixing_key
    from fedbench.runs.build import build_lanes

    base = make_cfg("algorithm=fedprox", "num_clients=6", "clients_per_round=3")
    variants = {"seed": ("seed", 5), "eta_l": ("eta_l", 0.3), "mu": ("algorithm.mu", 0.5), "batch": ("batch_size", 7)}
    cfgs = [base]
    for key, value in variants.values():
        cfg = copy.deepcopy(base)
        parent, _, leaf = key.rpartition(".")
        (cfg[parent] if parent else cfg)[leaf] = value
        cfgs.append(cfg)
    keys = [mixing_key(fed) for fed, _ in build_lanes(cfgs)]
    assert keys[0] == keys[1] == keys[2]  # seeds mix, and step sizes where the client update takes them per client
    assert len({keys[0], *keys[3:]}) == 3  # another mu or batch size trains in chunks of its own
    fedsso = [make_cfg("algorithm=fedsso", "num_clients=6", "clients_per_round=3", f"eta_l={lr}") for lr in (0.1, 0.2)]
    assert len({mixing_key(fed) for fed, _ in build_lanes(fedsso)}) == 2  # no lr_rows: a step size apart


def test_lanes_of_different_algorithms_two_phase_ones_included_each_get_their_own_run():
    import torch

    from fedbench.engine.loop import initial_state, run, run_lanes
    from fedbench.runs.build import build_federation, build_lanes

    cfgs = [make_cfg(f"algorithm={name}", "num_clients=6", "clients_per_round=3", "rounds=3", "engine.dtype=float64",
                     f"seed={seed}") for seed, name in enumerate(["fedavg", "mime_svrg", "feddane", "scaffold", "mime_svrg"])]
    feds = [fed for fed, _ in build_lanes(cfgs)]
    states = [initial_state(fed) for fed in feds]
    run_lanes(feds, states, None, lambda k, st, exc: pytest.fail(f"lane {k}: {exc}"))
    for cfg, got in zip(cfgs, states):
        fed, _ = build_federation(cfg)
        alone = run(fed, initial_state(fed))
        for key, value in alone.server.items():
            torch.testing.assert_close(got.server[key], value, rtol=1e-10, atol=1e-10)
        assert (got.floats_down, got.floats_up) == (alone.floats_down, alone.floats_up)


def test_a_lane_whose_algorithm_raises_fails_alone_and_the_others_train_as_alone():
    """A grid's lane whose method raises (a researcher's own method with a bug) failed every lane of its group, the
    built-in ones too (runs.batched promises that a failed job never stops the others); now it fails alone, in
    client_update, prepare or aggregate alike, and the other lanes train what they train alone. One run still gets
    the exception itself."""
    import torch

    from fedbench.engine.loop import initial_state, run, run_lanes
    from fedbench.runs.build import build_federation, build_lanes

    names = ["fedavg", "fedprox", "mime_svrg", "feddane", "scaffold"]
    cfgs = [make_cfg(f"algorithm={name}", "num_clients=6", "clients_per_round=3", "rounds=3", "engine.dtype=float64",
                     f"seed={seed}") for seed, name in enumerate(names)]
    feds = [fed for fed, _ in build_lanes(cfgs)]
    bugs = {1: ("client_update", 1), 2: ("prepare", 0), 3: ("aggregate", 2)}  # lane: (method, the round it raises at)

    def buggy(k, method, at):
        original = getattr(feds[k].algorithm, method)

        def raising(*args):
            if states[k].round == at:
                raise RuntimeError(f"bug in lane {k}'s {method}")
            return original(*args)
        return raising

    states = [initial_state(fed) for fed in feds]
    for k, (method, at) in bugs.items():
        setattr(feds[k].algorithm, method, buggy(k, method, at))
    failures = []
    run_lanes(feds, states, None, lambda k, st, exc: failures.append((k, str(exc), st.round)))
    assert failures == [(2, "bug in lane 2's prepare", 0), (1, "bug in lane 1's client_update", 1),
                        (3, "bug in lane 3's aggregate", 2)]
    for k in (0, 4):  # FedAvg and SCAFFOLD trained their 3 rounds as they do alone
        fed, _ = build_federation(cfgs[k])
        alone = run(fed, initial_state(fed))
        assert states[k].round == 3
        for key, value in alone.server.items():
            torch.testing.assert_close(states[k].server[key], value, rtol=1e-10, atol=1e-10)
    fed, _ = build_federation(cfgs[1])
    state = initial_state(fed)
    fed.algorithm.client_update = lambda *args: (_ for _ in ()).throw(RuntimeError("alone"))
    with pytest.raises(RuntimeError, match="alone"):
        run(fed, state)


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_optuna_trials_are_asked_n_jobs_at_a_time_and_each_batch_is_one_group(tmp_path):
    require_module("hydra_plugins.hydra_optuna_sweeper", "the Optuna sweeper is the `tune` extra")
    db = tmp_path / "m.db"
    res = fedbench("run", "-m", "hydra/sweeper=optuna", "hydra/launcher=batched", "hydra.sweeper.direction=maximize",
                   "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", "eta_l=interval(0.01,0.5)", *SETTING,
                   f"tracking.uri=sqlite:///{db}", f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("2 job(s) in 1 group(s)") == 2
    finished = runs(db)[1]
    assert len(finished) == 4 and {r.info.status for r in finished} == {"FINISHED"}
    best = max(r.data.metrics["test_accuracy"] for r in finished)
    assert f"Best value: {best}" in res.stdout + res.stderr


def test_the_launcher_takes_the_config_the_sweeper_composed_to_check_it():
    from omegaconf import OmegaConf

    from fedbench.runs.launch import compose_once

    class Loader:
        calls = 0

        def load_sweep_config(self, master_config, sweep_overrides):
            Loader.calls += 1
            return OmegaConf.create({"hydra": {"runtime": {"choices": {"seed": "-"}}}, "job": list(sweep_overrides),
                                     "n": Loader.calls})

    loader, master = Loader(), object()
    compose_once(loader)
    compose_once(loader)  # a second setup does not wrap twice
    batch = [["seed=0"], ["seed=1"]]
    checked = [loader.load_sweep_config(master, job) for job in batch]  # the sweeper's validate_batch_is_legal
    launched = [loader.load_sweep_config(master, job) for job in batch]  # the launcher
    assert Loader.calls == 2 and [c is l for c, l in zip(checked, launched)] == [True, True]
    again = loader.load_sweep_config(master, ["seed=1"])  # nothing kept any more: a copy of its composition
    assert again == launched[1] and again is not launched[1]


def test_the_automatic_cap_counts_every_clients_table_rows(monkeypatch):
    """SCAFFOLD's c_i for 1,000 clients of a 1.66M-parameter CNN is 6.6 GB a lane: lanes that fit by their
    chunk rows alone must train in turns once their tables would not fit."""
    from fedbench.runs import batched

    monkeypatch.setattr(batched, "available_bytes", lambda device: 64 * 2**30)
    cfg, cpu = make_cfg("num_clients=1000", "clients_per_round=10"), torch.device("cpu")
    dim = 1_663_370
    alone = batched.auto_max_batch(cfg, dim, cpu)
    assert alone == 32 * 2**30 // batched.lane_bytes(cfg, dim) > 20
    assert batched.auto_max_batch(cfg, dim, cpu, table_floats=dim) == 32 * 2**30 // (batched.lane_bytes(cfg, dim) + 4 * 1000 * dim) == 4
    # tables kept on the host while the lanes compute on an accelerator: each memory caps on its own
    assert batched.auto_max_batch(cfg, dim, torch.device("meta"), table_floats=dim, table_device=cpu) == 32 * 2**30 // (4 * 1000 * dim) == 5


def test_lanes_that_train_in_turns_are_recorded_and_free_their_client_tables_before_the_next_turn(tmp_path, monkeypatch):
    """Memory caps the lanes per turn; a finished turn's lanes must not keep their per-client tables (SCAFFOLD's
    c_i: 6.6 GB a lane for CNN 1 at 1,000 clients) while the next turn trains."""
    from fedbench.runs import batched, single

    monkeypatch.setattr(batched, "auto_max_batch", lambda *args, **kwargs: 1)
    finished, turns = [], []
    finish = single.Job.finish

    def counted_finish(self, *args, **kwargs):
        finished.append(self)
        assert sum(len(t.rows) for t in self.state.tables.values()) > 0  # SCAFFOLD's c_i of the clients it saw
        return finish(self, *args, **kwargs)

    run_lanes = batched.run_lanes

    def turn(feds, states, *args):
        turns.append((len(finished), [sum(len(t.rows) for t in s.tables.values()) for s in states]))
        return run_lanes(feds, states, *args)

    monkeypatch.setattr(single.Job, "finish", counted_finish)
    monkeypatch.setattr(batched, "run_lanes", turn)
    jobs = [batched.GroupJob(make_cfg("algorithm=scaffold", f"eta_l={lr}", "num_clients=6", "clients_per_round=3", "rounds=2",
                                      "tracking.artifacts=false", f"tracking.uri=sqlite:///{tmp_path}/m.db"), tmp_path / str(i))
            for i, lr in enumerate((0.05, 0.1, 0.2))]
    results = batched.run_group(jobs, quiet=True)
    assert all(isinstance(r, dict) for r in results), results
    assert [done for done, _ in turns] == [0, 1, 2]  # each turn's lane recorded before the next turn starts
    assert [turn_rows for _, turn_rows in turns] == [[0], [0], [0]]
    assert all(not job.state.tables[name].rows for job in finished for name in job.state.tables)  # freed once recorded


def test_a_group_writes_its_metrics_to_the_store_as_often_as_one_run(tmp_path, monkeypatch):
    """A store call costs the same for one round's metrics as for thirty: lanes that each wrote every
    5 s made the store calls of a 24-job grid cost more than its training."""
    from fedbench.runs import batched
    from fedbench.tracking import recorder

    clock, writes = [0.0], []

    def tick():  # one second per reading: each round of each lane
        clock[0] += 1.0
        return clock[0]

    flush = recorder.Recorder.flush.__wrapped__

    def counted(self, *args, **kwargs):
        writes.append(clock[0])
        return flush(self, *args, **kwargs)

    monkeypatch.setattr(recorder.time, "monotonic", tick)
    monkeypatch.setattr(recorder.Recorder, "flush", counted)
    jobs = [batched.GroupJob(make_cfg(f"eta_l={lr}", "num_clients=6", "clients_per_round=3", "rounds=12",
                                      "tracking.artifacts=false", f"tracking.uri=sqlite:///{tmp_path}/m.db"), tmp_path / str(i))
            for i, lr in enumerate((0.05, 0.1, 0.2))]
    results = batched.run_group(jobs, quiet=True)
    assert all(isinstance(r, dict) for r in results), results
    client, done = runs(tmp_path / "m.db")
    assert all(len(client.get_metric_history(r.info.run_id, "test_loss")) == 12 for r in done)  # every round recorded
    during = writes[: -2 * len(jobs)]  # before each lane's final two (its last checkpoint, its end)
    # as one run reading the clock once a round: a write at most every 5 readings
    assert len(during) <= during[-1] / 5, writes


def test_jobs_of_the_same_config_files_are_composed_once_and_each_is_what_hydra_composes(tmp_path):
    """Hydra composes a job in ~0.2 s: a 24-job grid spent more composing than training. The jobs' configs
    (the hydra node included: the task overrides, override_dirname) must be Hydra's own."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from fedbench.runs.launch import compose_once
    from tests.conftest import CONF

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    master = loader.load_configuration("config", ["hydra/launcher=batched", f"hydra.sweep.dir={tmp_path}"], RunMode.MULTIRUN)
    jobs = [[f"model={m}", f"eta_l={lr}", f"seed={s}"] for m in ("mclr", "mlp_2nn") for lr in (0.1, 0.3) for s in (0, 1)]
    jobs += [["model=mclr", "seed=3"], ["+extra=1", "seed=0"], ["model=mclr", "no_such_key=1"]]
    expected = []
    for job in jobs:
        try:
            expected.append(OmegaConf.to_container(loader.load_sweep_config(master, job)))
        except Exception as exc:
            expected.append(type(exc))
    composed = []
    hydra_compose = loader.load_sweep_config
    loader.load_sweep_config = lambda master_config, overrides: composed.append(overrides) or hydra_compose(master_config, overrides)
    compose_once(loader)
    for job, want in zip(jobs, expected):
        try:
            got = OmegaConf.to_container(loader.load_sweep_config(master, job))
        except Exception as exc:
            got = type(exc)
        assert got == want, job
    # the first job; then one composition per set of files (mclr, mlp_2nn); the +key job and the bad key's
    # (the copy refused it: Hydra's own error) composed by Hydra
    assert len(composed) == 1 + 2 + 1 + 1, composed


def test_a_group_s_lanes_are_drawn_while_their_ends_are_written_and_a_lane_whose_end_fails_fails_alone(tmp_path, monkeypatch):
    """A group's lanes end together: every lane's curves go to the drawing thread before the first lane's last
    rounds and rounds-to-target are written, so the figures are drawn while the store commits. A lane whose run
    cannot take its end (deleted in the store while it trained) fails with one line naming the store; the
    others end FINISHED with every round, their rounds-to-target and their artifacts; no drawing folder is left."""
    import tempfile

    from fedbench.runs import batched
    from fedbench.tracking import recorder as recording
    from fedbench.tracking.store import StoreError

    events, run_lanes = [], batched.run_lanes
    drawing_init, record_end = recording.Drawing.__init__, recording.Recorder.record_end

    def then_delete(feds, states, *args, **kwargs):
        run_lanes(feds, states, *args, **kwargs)
        client, started = runs(tmp_path / "m.db")
        client.delete_run(next(r.info.run_id for r in started if r.data.params["eta_l"] == "0.1"))

    def drawn(self, *args, **kwargs):
        events.append("draw")
        drawing_init(self, *args, **kwargs)

    def ended(self, *args, **kwargs):
        events.append("end")
        return record_end(self, *args, **kwargs)

    monkeypatch.setattr(batched, "run_lanes", then_delete)
    monkeypatch.setattr(recording.Drawing, "__init__", drawn)
    monkeypatch.setattr(recording.Recorder, "record_end", ended)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    jobs = [batched.GroupJob(make_cfg(f"eta_l={lr}", "num_clients=6", "clients_per_round=3", "rounds=3", "targets=[0.05]",
                                      f"tracking.uri=sqlite:///{tmp_path}/m.db"), tmp_path / str(i))
            for i, lr in enumerate((0.05, 0.1, 0.2))]
    results = batched.run_group(jobs, quiet=True)
    assert events == ["draw"] * 3 + ["end"] * 3, events
    assert isinstance(results[1], StoreError) and "the MLflow store" in str(results[1]), results[1]
    client, done = runs(tmp_path / "m.db")
    ended_runs = {r.data.params["eta_l"]: r for r in done}
    assert set(ended_runs) == {"0.05", "0.2"}  # the deleted run is not searched
    for k, run in zip((0, 2), ended_runs.values()):
        assert results[k]["status"] == "FINISHED" and results[k]["artifacts"] == ["config.yaml", "metrics.csv", "curves.png"]
        assert run.info.status == "FINISHED" and run.data.tags["rounds_to_0.05"] == "1"
        assert run.data.metrics["rounds_to_0.05"] == 1
        assert [m.step for m in client.get_metric_history(run.info.run_id, "test_loss")] == [1, 2, 3]
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"config.yaml", "metrics.csv", "curves.png"}
    assert not list((tmp_path / "tmp").glob("fedbench-artifacts-*"))
