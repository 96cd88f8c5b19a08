"""A disk client table belongs to one run and one checkpoint (issue 42, section 2): the checkpoint
records the table's identity (the run's token, the round its file holds, shape and sizes), and a
resume refuses any table that is not exactly that, in one line, before training."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from fedbench.core.errors import ConfigError
from fedbench.engine.checkpoint import load_checkpoint, save_checkpoint
from fedbench.engine.loop import initial_state
from tests.engine.test_scale import _fed, _rounds
from tests.faultkit import error_lines, fedbench

N = 40


@pytest.fixture(scope="module")
def fed():
    return _fed(N, "scaffold", "clients_per_round=8", "engine.client_state_device=disk", "local_steps=2",
                "local_epochs=null")


def interrupted(fed, run, copy_at: int | None = None):
    """A run checkpointed every round up to round 4 (its client_state/ copied aside after round `copy_at`)."""
    state = initial_state(fed, run)
    for r in range(1, 5):
        _rounds(fed, state, 1)
        save_checkpoint(run / "checkpoint.pt", state, None, "h")
        if r == copy_at:
            shutil.copytree(run / "client_state", run.parent / "older")
    return state


def damage(run, how: str) -> None:
    folder = run / "client_state"
    if how == "older_copy":
        shutil.rmtree(folder)
        shutil.copytree(run.parent / "older", folder)
    elif how == "truncated_bin":
        with open(folder / "c.bin", "r+b") as f:
            f.truncate(f.seek(0, 2) // 2)
    elif how == "damaged_json":
        (folder / "c.json").write_text('{"round": 4, "ahead": fal')
    elif how == "deep_json":  # was a RecursionError traceback
        (folder / "c.json").write_text("[" * 65_536)
    elif how == "json_not_a_table":
        (folder / "c.json").write_text("[1, 2]")
    elif how == "missing_touched":
        (folder / "c.touched").unlink()
    elif how == "missing_json":
        (folder / "c.json").unlink()
    elif how == "another_runs_table":
        meta = json.loads((folder / "c.json").read_text())
        meta["token"] = "0" * 32
        (folder / "c.json").write_text(json.dumps(meta))
    else:
        raise AssertionError(how)


CASES = {
    "older_copy": "its file holds round 2; the checkpoint of round 4 goes with the table of round 3 or 4",
    "truncated_bin": "c.bin holds",
    "damaged_json": "c.json is not JSON",
    "deep_json": "c.json is not JSON: maximum recursion depth exceeded",
    "json_not_a_table": "c.json lacks its round, ahead and shape",
    "missing_touched": "c.touched is missing",
    "missing_json": "c.json is missing",
    "another_runs_table": "c.json is another run's table",
}


@pytest.mark.parametrize("how", sorted(CASES))
def test_a_table_that_is_not_the_checkpoints_is_refused_before_training(fed, tmp_path, how):
    run = tmp_path / "run"
    interrupted(fed, run, copy_at=2)
    damage(run, how)
    resumed = initial_state(fed, run)
    with pytest.raises(ConfigError, match=f"{run / 'client_state'} is not the client state of this run's checkpoint") \
            as info:
        load_checkpoint(run / "checkpoint.pt", resumed, fed.device)
    assert CASES[how] in str(info.value) and "\n" not in str(info.value)


def test_only_the_table_written_with_the_checkpoint_or_just_before_it_resumes(fed, tmp_path):
    """Round 3's table with round 4's checkpoint is the run's own (the process died between the checkpoint and
    the table file's write: the checkpoint's rows make it whole) and resumes as the uninterrupted run; round
    2's is an older copy, refused."""
    whole = _rounds(fed, initial_state(fed, tmp_path / "whole"), 6)
    run = tmp_path / "run"
    interrupted(fed, run, copy_at=3)
    shutil.rmtree(run / "client_state")
    shutil.copytree(tmp_path / "older", run / "client_state")
    resumed = initial_state(fed, run)
    load_checkpoint(run / "checkpoint.pt", resumed, fed.device)
    _rounds(fed, resumed, 2)
    ids = list(range(N))
    cpu = torch.device("cpu")
    assert torch.equal(whole.tables["c"].gather(ids, cpu), resumed.tables["c"].gather(ids, cpu))
    assert all(torch.equal(whole.server[k], resumed.server[k]) for k in whole.server)

    other = tmp_path / "other"
    interrupted(fed, other / "run", copy_at=2)
    damage(other / "run", "older_copy")
    with pytest.raises(ConfigError, match="its file holds round 2"):
        load_checkpoint(other / "run" / "checkpoint.pt", initial_state(fed, other / "run"), fed.device)


@pytest.mark.slow
def test_resume_over_a_truncated_table_exits_2_in_one_line(tmp_path):
    """The CLI's way: a truncated c.bin was zero-filled and trained from (exit 0)."""
    run_dir, db = tmp_path / "run", tmp_path / "m.db"
    args = ["dataset=synthetic", "dataset.generator=per_user", "dataset.num_users=40", "partition=natural",
            "num_clients=40", "clients_per_round=8", "algorithm=scaffold", "engine.client_state_device=disk",
            "local_steps=2", "local_epochs=null", "engine.threads=1", "tracking.artifacts=false", "rounds=3",
            "tracking.checkpoint_every=1", f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={run_dir}"]
    out = fedbench("run", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    damage(run_dir, "truncated_bin")
    out = fedbench("resume", str(run_dir), cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    [line] = error_lines(out.stderr)
    assert "c.bin holds" in line and "is not the client state of this run's checkpoint" in line, line
