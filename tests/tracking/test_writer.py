"""`fedbench run` records through a writer process of its own (tracking.writer): the record is the
one a run in one process writes, and a store or writer that fails ends the run with one line."""

from __future__ import annotations

import pickle
import socket
from pathlib import Path

import pytest

from tests.conftest import make_cfg
from tests.faultkit import SMALL, error_lines, fedbench, runs

ARTIFACTS = [a for a in SMALL if not a.startswith("tracking.artifacts")]  # the curves too


def _record(client, run) -> dict:
    """What must not depend on the process that wrote it: everything but the run's id, folder, times."""
    metrics = {k: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, k), key=lambda m: m.step)]
               for k in run.data.metrics if k not in ("wall_time", "eval_time", "warmup_time")}
    timed = {k: [m.step for m in client.get_metric_history(run.info.run_id, k)]
             for k in run.data.metrics if k in ("wall_time", "eval_time", "warmup_time")}
    return {"params": run.data.params, "status": run.info.status, "name": run.info.run_name,
            "tags": {k: v for k, v in run.data.tags.items() if k != "run_dir"}, "metrics": metrics, "timed": timed,
            "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id))}


def test_the_writer_records_what_one_process_records(tmp_path):
    from fedbench.runs.api import run as run_in_python

    overrides = [*ARTIFACTS, "rounds=4", "targets=[0.3,0.99]", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    out = fedbench("run", *overrides, f"hydra.run.dir={tmp_path}/cli", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run_in_python(overrides, run_dir=tmp_path / "api")  # from Python: MLflow in this process
    client, found = runs(tmp_path / "m.db")
    by_dir = {r.data.tags["run_dir"]: r for r in found}
    cli, api = by_dir[str(tmp_path / "cli")], by_dir[str(tmp_path / "api")]
    assert _record(client, cli) == _record(client, api)
    assert cli.info.run_id in out.stdout and {"config.yaml", "metrics.csv", "curves.png"} <= set(_record(client, cli)["artifacts"])
    for name in ("config.yaml", "curves.png"):  # byte for byte (metrics.csv holds the timings)
        paths = [client.download_artifacts(r.info.run_id, name, str(tmp_path / r.info.run_id)) for r in (cli, api)]
        assert Path(paths[0]).read_bytes() == Path(paths[1]).read_bytes(), name
    # the metrics keep the time stamps of their rounds, not of the writer's batches
    stamps = [m.timestamp for m in sorted(client.get_metric_history(cli.info.run_id, "floats_up"), key=lambda m: m.step)]
    assert stamps == sorted(stamps) and cli.info.start_time <= stamps[0] <= stamps[-1] <= cli.info.end_time


def test_an_unusable_store_is_one_line_through_the_writer(tmp_path):
    (tmp_path / "a-file").write_text("")
    out = fedbench("run", *SMALL, f"tracking.uri=sqlite:///{tmp_path}/a-file/m.db", f"hydra.run.dir={tmp_path}/r",
                   cwd=tmp_path)
    assert out.returncode == 1
    [line] = error_lines(out.stderr)
    assert line.startswith(f"error: cannot use the MLflow tracking store sqlite:///{tmp_path}/a-file/m.db")
    assert "Traceback" not in out.stderr and not (tmp_path / "r" / "checkpoint.pt").exists()


def test_an_unreachable_server_is_one_line_through_the_writer(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = fedbench("run", *SMALL, f"tracking.uri=http://127.0.0.1:{port}", f"hydra.run.dir={tmp_path}/r", cwd=tmp_path)
    assert out.returncode == 1
    [line] = error_lines(out.stderr)
    assert line.startswith(f"error: cannot reach the MLflow tracking server http://127.0.0.1:{port}")


def test_a_writer_that_dies_mid_run_ends_it_with_one_line_and_resume_completes_the_record(tmp_path, monkeypatch):
    from fedbench.runs.single import run_job
    from fedbench.tracking import writer
    from fedbench.tracking.store import StoreError

    cfg = make_cfg(f"tracking.uri=sqlite:///{tmp_path}/m.db", *SMALL, "rounds=5", "tracking.checkpoint_every=1")
    real = writer.Writer.call

    def call(self, method, *args):
        if method == "flush" and any(metrics["round"] == 3 for metrics, _ in args[0]):
            self.proc.kill()  # rounds 1 and 2 are in the record and checkpointed
        return real(self, method, *args)

    monkeypatch.setattr(writer.Writer, "call", call)
    writer.prestart()
    with pytest.raises(StoreError) as info:
        run_job(cfg, tmp_path / "run", quiet=True)
    message = str(info.value)
    assert "\n" not in message and "the MLflow writer process stopped" in message
    assert "the run stopped at round 3" in message and "stays RUNNING" in message and "fedbench resume" in message
    monkeypatch.undo()
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == "RUNNING"
    run_job(make_cfg(f"tracking.uri=sqlite:///{tmp_path}/m.db", *SMALL, "rounds=5", "tracking.checkpoint_every=1",
                     "resume=true"), tmp_path / "run", quiet=True)
    client, [run] = runs(tmp_path / "m.db")
    assert run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "floats_up")) == [1, 2, 3, 4, 5]


def test_a_writer_no_run_takes_is_stopped(tmp_path):
    from fedbench.tracking import writer

    writer.prestart()
    proc = writer._prestarted.proc
    writer.discard()
    assert proc.poll() is not None and writer.take() is None


def test_errors_come_back_as_raised():
    from fedbench.core.errors import ConfigError
    from fedbench.tracking.store import StoreError
    from fedbench.tracking.writer import _answer, _rebuilt

    for exc in (StoreError("the MLflow store failed: disk full"), ConfigError("bad")):
        back = _rebuilt(*_answer(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and back.exit_code == exc.exit_code

    class Unpicklable(Exception):
        def __reduce__(self):
            raise pickle.PicklingError("no")

    back = _rebuilt(*_answer(Unpicklable("lost")))
    assert isinstance(back, StoreError) and "Unpicklable: lost" in str(back)


def count_batches(monkeypatch) -> list[dict]:
    """The recorder's store writes from now on (tracking.metric_rows.write_batch: one transaction each), as
    {"metrics": [...], "tags": [...]}."""
    from fedbench.tracking import recorder as recording

    calls, write_batch = [], recording.write_batch

    def counted(client, run_id, metrics, tags=()):
        calls.append({"metrics": list(metrics), "tags": list(tags)})
        return write_batch(client, run_id, metrics, tags)

    monkeypatch.setattr(recording, "write_batch", counted)
    return calls


def test_a_run_s_end_writes_its_targets_in_one_store_call(tmp_path, monkeypatch):
    """A store call costs ~25 ms however much it holds: a grid's runs each ending with a call per target tag and
    per target metric spent seconds on them. The record holds every target's tag, and the reached ones' metrics."""
    from fedbench.tracking.recorder import Recorder

    recorder = Recorder(make_cfg("rounds=3", "targets=[0.3,0.5,0.9]", f"tracking.uri=sqlite:///{tmp_path}/m.db"))
    recorder.check_reachable()
    run_id = recorder.start({})
    history = [{"round": r, "test_accuracy": a} for r, a in ((1, 0.2), (2, 0.4), (3, 0.6))]
    for row in history:
        recorder.log_round(row)
    recorder.flush()
    calls = count_batches(monkeypatch)
    recorder.finish(history, artifacts=False)
    assert len(calls) == 1
    run = recorder.client.get_run(run_id)
    assert {k: v for k, v in run.data.tags.items() if k.startswith("rounds_to")} == {
        "rounds_to_0.3": "2", "rounds_to_0.5": "3", "rounds_to_0.9": ">3"}
    assert {k: v for k, v in run.data.metrics.items() if k.startswith("rounds_to")} == {"rounds_to_0.3": 2, "rounds_to_0.5": 3}


@pytest.mark.slow  # >= 10 s (issue 43: `pytest -m "not slow"` is the quick loop)
def test_a_run_s_curves_are_drawn_while_its_end_waits_on_the_store(tmp_path, monkeypatch):
    """Drawing curves.png is CPU work and a store commit is disk work: a grid's runs end faster with both at
    once. The store's target write waits here until the drawing has started (at most 5 s)."""
    import threading

    from fedbench.tracking import recorder as recording

    drawing = threading.Event()
    plot_curves = recording.plot_curves

    def draw(*args, **kwargs):
        drawing.set()
        return plot_curves(*args, **kwargs)

    monkeypatch.setattr(recording, "plot_curves", draw)
    recorder = recording.Recorder(make_cfg("rounds=2", "targets=[0.3]", f"tracking.uri=sqlite:///{tmp_path}/m.db"))
    recorder.check_reachable()
    run_id = recorder.start({})
    history = [{"round": 1, "test_accuracy": 0.2, "test_loss": 2.0}, {"round": 2, "test_accuracy": 0.4, "test_loss": 1.0}]
    overlapped, write_batch = [], recording.write_batch
    monkeypatch.setattr(recording, "write_batch", lambda *args: overlapped.append(drawing.wait(5)) or write_batch(*args))
    summary = recorder.finish(history)
    assert overlapped == [True]
    assert summary["artifacts"] == ["config.yaml", "metrics.csv", "curves.png"]
    assert {a.path for a in recorder.client.list_artifacts(run_id)} == {"config.yaml", "metrics.csv", "curves.png"}


def test_a_run_s_last_rounds_and_targets_are_one_store_call_before_its_checkpoint_and_its_end_reads_nothing_back(tmp_path, monkeypatch):
    """Job.save writes the run's buffered rounds with its rounds-to-target in one store call (record_end), then
    checkpoints: the checkpoint never claims rounds or targets the record lacks. A run this process created
    reads nothing back at its end (its artifact folder is its creation's). Resumed after that write and ended
    again, the run logs no target metric twice."""
    from fedbench.tracking.recorder import Recorder

    cfg = make_cfg("rounds=3", "targets=[0.3,0.5,0.9]", f"tracking.uri=sqlite:///{tmp_path}/m.db")
    recorder = Recorder(cfg, flush_seconds=float("inf"))
    recorder.check_reachable()
    run_id = recorder.start({})
    history = [{"round": r, "test_accuracy": a, "floats_up": 10.0 * r} for r, a in ((1, 0.2), (2, 0.4), (3, 0.6))]
    for row in history:
        recorder.log_round(row)
    calls, reads = count_batches(monkeypatch), []
    get_run = recorder.client.get_run
    recorder.client.get_run = lambda *args, **kwargs: reads.append(args) or get_run(*args, **kwargs)
    recorder.record_end(history)
    assert len(calls) == 1 and len(calls[0]["metrics"]) == 3 * 2 + 2 and len(calls[0]["tags"]) == 3
    summary = recorder.finish(history, artifacts=False)
    assert len(calls) == 1 and reads == []
    assert summary["rounds_to_target"] == {0.3: 2, 0.5: 3, 0.9: None} and summary["artifact_uri"].endswith("/artifacts")
    run = get_run(run_id)
    assert run.info.status == "FINISHED" and summary["artifact_uri"] == run.info.artifact_uri
    assert [m.step for m in recorder.client.get_metric_history(run_id, "test_accuracy")] == [1, 2, 3]
    again = Recorder(cfg, flush_seconds=float("inf"))  # killed after record_end, before its checkpoint: resumed
    again.check_reachable()
    again.start({}, run_id=run_id, logged_through=2)
    again.log_round(history[-1])  # round 3, recomputed: in the record already
    again.finish(history, artifacts=False)
    for key in ("rounds_to_0.3", "rounds_to_0.5", "test_accuracy"):
        assert len(again.client.get_metric_history(run_id, key)) == (3 if key == "test_accuracy" else 1), key
    assert again.summary_of(get_run(run_id))["rounds_to_target"] == {0.3: 2, 0.5: 3, 0.9: None}


def test_a_run_s_end_in_one_call_keeps_within_mlflow_s_limit_of_1000_metrics_and_tags_a_call(tmp_path, monkeypatch):
    """record_end adds the rounds-to-target (metrics and tags) to the last rounds' call: MLflow refuses a call of
    more than 1000 metrics and tags together (a tracking server answers it with an error; the SQL store takes
    it), so a call that would pass it is split, whole rounds each."""
    from fedbench.tracking.recorder import Recorder

    targets = [round(0.05 * i, 2) for i in range(1, 11)]
    cfg = make_cfg("rounds=99", f"targets=[{','.join(map(str, targets))}]", f"tracking.uri=sqlite:///{tmp_path}/m.db")
    recorder = Recorder(cfg, flush_seconds=float("inf"))
    recorder.check_reachable()
    run_id = recorder.start({})
    history = [{"round": r, "test_accuracy": 0.6, **{f"m{i}": float(r + i) for i in range(9)}} for r in range(1, 100)]
    for row in history:
        recorder.log_round(row)
    calls = count_batches(monkeypatch)
    recorder.record_end(history)  # 99 rounds x 10 metrics, 10 target metrics and 10 target tags
    assert all(len(c["metrics"]) + len(c["tags"]) <= 1000 for c in calls) and len(calls) == 2
    client = recorder.client
    assert len(client.get_metric_history(run_id, "m8")) == 99
    assert len([k for k in client.get_run(run_id).data.tags if k.startswith("rounds_to")]) == 10


def test_a_sweep_job_s_curves_are_drawn_while_its_record_s_end_is_written(tmp_path, monkeypatch):
    """A job of the basic launcher records in its own process: its curves go to the drawing thread before its
    last rounds and rounds-to-target are written (record_end), which waits here until the drawing has started
    (at most 5 s); the run ends FINISHED with its artifacts."""
    import threading

    from fedbench.runs.single import run_job
    from fedbench.tracking import recorder as recording

    drawing, overlapped = threading.Event(), []
    plot_curves, record_end = recording.plot_curves, recording.Recorder.record_end

    def draw(*args, **kwargs):
        drawing.set()
        return plot_curves(*args, **kwargs)

    def end(self, *args, **kwargs):
        overlapped.append(drawing.wait(5))
        return record_end(self, *args, **kwargs)

    monkeypatch.setattr(recording, "plot_curves", draw)
    monkeypatch.setattr(recording.Recorder, "record_end", end)
    cfg = make_cfg(*ARTIFACTS, "targets=[0.05]", f"tracking.uri=sqlite:///{tmp_path}/m.db")
    summary = run_job(cfg, tmp_path / "run", quiet=True, sweep=True)
    assert overlapped == [True]
    assert summary["status"] == "FINISHED" and summary["artifacts"] == ["config.yaml", "metrics.csv", "curves.png"]


def test_a_run_s_artifacts_are_never_written_through_a_link_planted_in_its_artifact_folder(tmp_path, monkeypatch):
    """A resumed run writes metrics.csv and curves.png again into its artifact folder, whose path every run
    prints: a link planted there at a file's name had the file copied onto the link's target (a user's file).
    The run's end names the link in one line, writes nothing, and completes once the link is gone."""
    from urllib.parse import urlparse

    from fedbench.tracking.recorder import Recorder
    from fedbench.tracking.store import StoreError

    monkeypatch.chdir(tmp_path)  # the artifact root: outputs/mlartifacts here
    recorder = Recorder(make_cfg("rounds=2", f"tracking.uri=sqlite:///{tmp_path}/m.db"))
    recorder.check_reachable()
    run_id = recorder.start({})
    folder = Path(urlparse(recorder.artifact_uri).path)
    victims = {name: tmp_path / f"victim-{name}" for name in ("metrics.csv", "curves.png")}
    for name, victim in victims.items():
        victim.write_text("the user's file\n")
        (folder / name).symlink_to(victim)
    history = [{"round": 1, "test_accuracy": 0.2, "test_loss": 2.0}, {"round": 2, "test_accuracy": 0.4, "test_loss": 1.0}]
    with pytest.raises(StoreError, match=f"{folder / 'metrics.csv'} is a link .*never through a link"):
        recorder.finish(history)
    assert all(victim.read_text() == "the user's file\n" for victim in victims.values())
    for name in victims:
        (folder / name).unlink()
    recorder.finish(history)
    assert (folder / "metrics.csv").read_text().startswith("round,") and (folder / "curves.png").stat().st_size > 1000
    assert {a.path for a in recorder.client.list_artifacts(run_id)} == {"config.yaml", "metrics.csv", "curves.png"}
