"""Fault injection: bad data files, missing data offline, unwritable folders, an unreachable
tracking server, a full disk, bad checkpoints, divergence. Each ends with one clear error and no
corrupt state: no half-written checkpoint, no MLflow run left RUNNING."""

from __future__ import annotations

import errno
import gzip
import math
import socket
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.core.errors import ConfigError, DataUnavailableError, DivergenceError, FedbenchError
from tests.conftest import CONF, make_cfg, require_data
from tests.faultkit import SMALL, runs

STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MNIST_SMALL = ["dataset=mnist", "partition=iid", "num_clients=2", "clients_per_round=1", *SMALL[2:]]


def idx_bytes(array: np.ndarray) -> bytes:
    return struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_mnist(folder: Path, n_train: int = 20, n_test: int = 10) -> dict[str, Path]:
    """A tiny, valid MNIST in IDX format (uncompressed: no published checksum applies)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        STEMS[0]: rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        STEMS[1]: (np.arange(n_train) % 10).astype(np.uint8),
        STEMS[2]: rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        STEMS[3]: (np.arange(n_test) % 10).astype(np.uint8),
    }
    paths = {}
    for stem, a in arrays.items():
        paths[stem] = folder / stem
        paths[stem].write_bytes(idx_bytes(a))
    return paths


def run_job_in(tmp_path: Path, *overrides: str, run_dir: Path | None = None):
    from fedbench.runs.single import run_job

    cfg = make_cfg(f"tracking.uri=sqlite:///{tmp_path}/m.db", *overrides)
    return run_job(cfg, run_dir or tmp_path / "run", quiet=True)


def assert_no_run(tmp_path: Path) -> None:
    if (tmp_path / "m.db").exists():
        assert runs(tmp_path / "m.db")[1] == []


def test_valid_tiny_mnist_loads(tmp_path):
    """Control for the corruption cases below: the same files, intact, train."""
    write_mnist(tmp_path / "d" / "mnist")
    summary = run_job_in(tmp_path, *MNIST_SMALL, f"data.root={tmp_path}/d", "rounds=1")
    assert summary["rounds"] == 1


def _bad_magic(paths):
    paths[STEMS[0]].write_bytes(b"\x08\x03" + paths[STEMS[0]].read_bytes()[2:])


def _truncated(paths):
    paths[STEMS[2]].write_bytes(paths[STEMS[2]].read_bytes()[:-100])


def _lengths_disagree(paths):
    paths[STEMS[1]].write_bytes(idx_bytes(np.zeros(7, dtype=np.uint8)))


def _gz_not_original(paths):
    path = paths[STEMS[3]]
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()


def _gz_truncated(paths):
    path = paths[STEMS[0]]
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes())[:-50])
    path.unlink()


def _missing_file(paths):
    paths[STEMS[1]].unlink()


@pytest.mark.parametrize("corrupt,needle", [
    (_bad_magic, "is not an IDX file: bad magic number"),
    (_truncated, "is not an IDX file: the header says (10, 28, 28) (7,840 bytes of data), the file holds 7,740 bytes (truncated)"),
    (_lengths_disagree, "is not an IDX file of mnist labels: 7 labels but 20 images in train-images-idx3-ubyte"),
    (_gz_not_original, "t10k-labels-idx1-ubyte.gz is corrupt or not the original file: md5"),
    (_gz_truncated, "published f68b3c2dcbeaaa9fbdd348bbdeb94873 (torchvision MNIST)"),
    (_missing_file, "mnist not found: place train-images-idx3-ubyte[.gz]"),
])
def test_bad_data_files_stop_before_any_run(tmp_path, corrupt, needle):
    corrupt(write_mnist(tmp_path / "d" / "mnist"))
    with pytest.raises(DataUnavailableError, match=None) as info:
        run_job_in(tmp_path, *MNIST_SMALL, f"data.root={tmp_path}/d")
    assert needle in str(info.value) and info.value.exit_code == 2
    assert_no_run(tmp_path)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_published_checksums_accept_the_debian_fashion_mnist():
    from fedbench.data.checksums import dpkg_md5, file_md5, verify

    files = sorted(Path("/usr/share/datasets/fashion-mnist").glob("*.gz"))
    require_data(bool(files) and dpkg_md5(files[0]) is not None, "Debian's dataset-fashion-mnist is not installed")
    verify(files, "FashionMNIST")  # re-compressed by Debian: its own md5sums apply, not torchvision's
    assert dpkg_md5(files[0]) == file_md5(files[0])


def test_missing_data_root_offline(tmp_path):
    with pytest.raises(DataUnavailableError) as info:
        run_job_in(tmp_path, *MNIST_SMALL, f"data.root={tmp_path}/absent", "data.download=false")
    assert f"mnist not found: place" in str(info.value) and "data.download=true" in str(info.value)
    assert_no_run(tmp_path)


def test_unwritable_output_folder_is_a_config_error(tmp_path):
    from fedbench.config.preflight import preflight

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=f"cannot create the output folder {blocker}/run: {blocker} is a file"):
        preflight(Path(CONF), [f"hydra.run.dir={blocker}/run"])
    with pytest.raises(ConfigError, match="set hydra.sweep.dir"):
        preflight(Path(CONF), [f"hydra.sweep.dir={blocker}/sweep", "--multirun"])
    with pytest.raises(FedbenchError, match="cannot write to the run directory"):  # a job's own folder
        run_job_in(tmp_path, *SMALL, "rounds=1", run_dir=blocker / "run")
    assert_no_run(tmp_path)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_tracking_server_fails_fast_before_training(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(FedbenchError, match="cannot reach the MLflow tracking server http://127.0.0.1"):
        run_job_in(tmp_path, *SMALL, f"tracking.uri=http://127.0.0.1:{closed_port()}")
    assert time.monotonic() - t0 < 30  # MLflow's own retries would take minutes
    assert not (tmp_path / "run").exists()


def test_unusable_local_store(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(FedbenchError, match="cannot use the MLflow tracking store sqlite:///"):
        run_job_in(tmp_path, *SMALL, f"tracking.uri=sqlite:///{tmp_path}/a-file/m.db")


def fill_disk_at_second_checkpoint(monkeypatch) -> list:
    """The disk fills during the second checkpoint's write (after 200 bytes of it); returns the checkpoint writes
    opened so far."""
    import os as os_module

    from fedbench.engine import checkpoint

    real_fdopen, calls = os_module.fdopen, []

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            if len(calls) > 1 and self.f.tell() + len(data) > 200:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)

    def fdopen(fd, *args, **kwargs):
        if checkpoint.TMP_PREFIX not in os_module.readlink(f"/proc/self/fd/{fd}"):  # not a checkpoint's
            return real_fdopen(fd, *args, **kwargs)
        calls.append(fd)
        return FullDisk(real_fdopen(fd, *args, **kwargs))

    monkeypatch.setattr(checkpoint.os, "fdopen", fdopen)
    return calls


def test_full_disk_keeps_the_last_checkpoint_and_fails_the_run(tmp_path, monkeypatch):
    """The disk fills during the second checkpoint's write: however torch reports the failed write
    (an OSError or its own RuntimeError), one line names the folder, its free space, the checkpoint kept."""
    calls = fill_disk_at_second_checkpoint(monkeypatch)
    run_dir = tmp_path / "run"
    with pytest.raises(FedbenchError) as info:
        run_job_in(tmp_path, *SMALL, "rounds=6", "tracking.checkpoint_every=2")
    message = str(info.value)
    assert message.startswith(f"no space left on the disk of {run_dir} (") and " free): " in message, message
    assert ("the run stopped at round 4; the checkpoint of round 2 is kept; free some space and continue with: "
            f"fedbench resume {run_dir}") in message and "\n" not in message
    assert info.value.exit_code == 1
    monkeypatch.undo()
    assert len(calls) == 2
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["round"] == 2  # the whole one
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoint.pt"]  # no temporary file left
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == "FAILED" and run.data.tags["failure_round"] == "4"
    assert "No space left on device" in run.data.tags["failure_reason"]


def test_a_full_disk_at_the_final_checkpoint_keeps_the_finished_record(tmp_path, monkeypatch, capsys):
    """The record is complete before the final checkpoint is written: a disk that fills then costs the run its final
    state, not its results (a reproduction's grid lost 4 finished lanes so, their client tables filling a 64 GB disk).
    The run ends FINISHED with every round, a warning and a tag say why it has no final checkpoint, and the periodic
    one stays whole."""
    calls = fill_disk_at_second_checkpoint(monkeypatch)
    summary = run_job_in(tmp_path, *SMALL, "rounds=4", "tracking.checkpoint_every=2")
    monkeypatch.undo()
    assert len(calls) == 2 and summary["rounds"] == 4
    run_dir = tmp_path / "run"
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["round"] == 2
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint.pt"]  # no temporary file left
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == "FINISHED"
    note = run.data.tags["final_checkpoint"]
    assert note.startswith(f"the final checkpoint (round 4) was not written: no space left on the disk of {run_dir} ("), note
    assert note.endswith("; the checkpoint of round 2 is kept"), note
    from mlflow.tracking import MlflowClient

    history = MlflowClient(f"sqlite:///{tmp_path}/m.db").get_metric_history(run.info.run_id, "test_accuracy")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warning == [f"fedbench: warning: {note}; the run's record is complete"]


def test_checkpoint_every_0_writes_no_checkpoint_and_a_stop_still_does(tmp_path):
    """tracking.checkpoint_every=0 is "never": no periodic and no final checkpoint (the final one of a grid's lanes held
    their client tables: gigabytes each); a run asked to stop still checkpoints its round, so it can continue."""
    summary = run_job_in(tmp_path, *SMALL, "rounds=3", "tracking.checkpoint_every=0")
    assert summary["rounds"] == 3 and not (tmp_path / "run" / "checkpoint.pt").exists()
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == "FINISHED" and "final_checkpoint" not in run.data.tags
    summary = run_job_in(tmp_path, *SMALL, "rounds=3", "seed=1", "tracking.checkpoint_every=5", run_dir=tmp_path / "five")
    assert torch.load(tmp_path / "five" / "checkpoint.pt", weights_only=True)["round"] == 3  # the final one, as before


def test_unreadable_or_foreign_checkpoint_refuses_to_resume(tmp_path):
    run_job_in(tmp_path, *SMALL, "rounds=2", "seed=1")
    ckpt = tmp_path / "run" / "checkpoint.pt"
    with pytest.raises(FedbenchError, match="was written by a different config; refusing to resume"):
        run_job_in(tmp_path, *SMALL, "rounds=2", "seed=2", "resume=true")
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    with pytest.raises(FedbenchError, match="is not a readable checkpoint"):
        run_job_in(tmp_path, *SMALL, "rounds=2", "seed=1", "resume=true")
    assert [r.info.status for r in runs(tmp_path / "m.db")[1]] == ["FINISHED"]


def first_non_finite_round(*overrides: str) -> int:
    from fedbench.runs.build import build_federation
    from fedbench.engine.evaluation import evaluate
    from fedbench.engine.loop import initial_state, run_round

    fed, _ = build_federation(make_cfg(*overrides))
    state = initial_state(fed)
    while state.round < fed.rounds:
        run_round(fed, state)
        state.round += 1
        x = fed.algorithm.model(state.server)
        loss = evaluate(fed.flat, x, fed.dataset.x_test, fed.dataset.y_test, fed.dataset.task)["loss"]
        if not (torch.isfinite(x).all() and math.isfinite(loss)):
            return state.round
    return fed.rounds + 1


def test_divergence_fails_the_run_at_the_first_non_finite_round(tmp_path):
    # least squares with a step far above 2/L: the iterates grow geometrically until they overflow
    overrides = [*SMALL, "dataset=lstsq", "partition=natural", "model=linear", "num_clients=8", "rounds=50",
                 "eta_l=10", "tracking.checkpoint_every=0"]
    with pytest.raises(DivergenceError) as info:
        run_job_in(tmp_path, *overrides)
    assert info.value.exit_code == 3
    first = first_non_finite_round(*overrides)
    assert first < 50 and info.value.round == first
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_round"] == str(first)
    assert run.data.tags["failure_reason"].startswith("non-finite")


def test_a_finished_run_whose_checkpoint_is_older_than_its_record_is_not_resumed(tmp_path, monkeypatch, capsys):
    """A FINISHED record is never resumed, whatever round its checkpoint holds. Two ways to a checkpoint older than the
    record: a run stopped with tracking.checkpoint_every=0 (the stop's checkpoint) and continued to its end (no final
    checkpoint), and a run whose final checkpoint did not fit. Resumed again, each trained its last rounds once more."""
    import signal

    from fedbench.runs.single import Job, run_job

    real_on_round = Job.on_round

    def stopped_at_round_2(self, st, metrics):  # a stop asked during round 2 (what SIGTERM's handler does): the run
        if st.round == 2 and not self.cfg.get("resume"):  # checkpoints the round and stops
            self.stop.requested, self.stop.signum = True, signal.SIGTERM
        return real_on_round(self, st, metrics)

    monkeypatch.setattr(Job, "on_round", stopped_at_round_2)
    never = [*SMALL, "rounds=4", "tracking.checkpoint_every=0"]
    with pytest.raises(KeyboardInterrupt):
        run_job_in(tmp_path, *never)
    run_dir = tmp_path / "run"
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["round"] == 2
    assert run_job_in(tmp_path, *never, "resume=true")["rounds"] == 4  # continued to its end: no final checkpoint
    monkeypatch.undo()
    calls = fill_disk_at_second_checkpoint(monkeypatch)
    run_job_in(tmp_path, *SMALL, "rounds=4", "tracking.checkpoint_every=2", run_dir=tmp_path / "full")
    monkeypatch.undo()
    assert len(calls) == 2
    client, finished = runs(tmp_path / "m.db")
    assert [r.info.status for r in finished] == ["FINISHED", "FINISHED"]
    before = {r.info.run_id: client.get_metric_history(r.info.run_id, "test_accuracy") for r in finished}
    capsys.readouterr()
    trained = []
    monkeypatch.setattr(Job, "on_round", lambda self, st, metrics: trained.append(st.round))
    for overrides, folder in ((never, run_dir), ([*SMALL, "rounds=4", "tracking.checkpoint_every=2"], tmp_path / "full")):
        assert torch.load(folder / "checkpoint.pt", weights_only=True)["round"] == 2
        summary = run_job(make_cfg(f"tracking.uri=sqlite:///{tmp_path}/m.db", *overrides, "resume=true"), folder)
        assert summary["rounds"] == 4
    assert trained == []
    said = [line for line in capsys.readouterr().err.splitlines() if "nothing to resume" in line]
    assert len(said) == 2 and all("already FINISHED (its checkpoint, of round 2, is older than its record)" in line
                                  for line in said), said
    assert {r.info.run_id: client.get_metric_history(r.info.run_id, "test_accuracy") for r in finished} == before
