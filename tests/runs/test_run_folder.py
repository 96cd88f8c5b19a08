"""The run folder's own files (issue 42, section 1): what a run writes there is opened as what it must
be (core.ownership.open_owned, check_entries), a refused run removes only what it created
(record_made), and the current folder is refused by its resolved path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faultkit import SMALL, error_lines, fedbench

MNIST_MISSING = ["dataset=mnist", "data.root=/nonexistent/fedbench-data"]


def hostile(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A run folder whose `kind` entry is hostile; returns (folder, the entry to be named)."""
    target = tmp_path / "target"
    target.write_text("the user's file\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if kind == "lock_symlink":
        (run_dir / ".fedbench.lock").symlink_to(target)
        return run_dir, run_dir / ".fedbench.lock"
    if kind == "lock_fifo":
        os.mkfifo(run_dir / ".fedbench.lock")
        return run_dir, run_dir / ".fedbench.lock"
    if kind == "lock_folder":
        (run_dir / ".fedbench.lock").mkdir()
        return run_dir, run_dir / ".fedbench.lock"
    if kind == "log_symlink":
        (run_dir / "hydra_app.log").symlink_to(target)
        return run_dir, run_dir / "hydra_app.log"
    if kind == "log_hardlink":
        os.link(target, run_dir / "hydra_app.log")
        return run_dir, run_dir / "hydra_app.log"
    if kind == "hydra_yaml_symlink":
        (run_dir / ".hydra").mkdir()
        (run_dir / ".hydra" / "hydra.yaml").symlink_to(target)
        return run_dir, run_dir / ".hydra" / "hydra.yaml"
    if kind == "hydra_folder_symlink":
        (tmp_path / "elsewhere").mkdir()
        (run_dir / ".hydra").symlink_to(tmp_path / "elsewhere")
        return run_dir, run_dir / ".hydra"
    raise AssertionError(kind)


KINDS = ["lock_symlink", "lock_fifo", "lock_folder", "log_symlink", "log_hardlink", "hydra_yaml_symlink",
         "hydra_folder_symlink"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_entry_of_the_run_folder_is_refused_before_anything_is_written(tmp_path, kind):
    """A symlink, FIFO, folder or hard link where the run writes its own file: exit 2, one line naming it,
    the file it points to unchanged, and nothing of the run's written (no .hydra/ record, no log)."""
    run_dir, entry = hostile(tmp_path, kind)
    listing = sorted(p.name for p in run_dir.iterdir())
    out = fedbench("run", *SMALL, "rounds=1", f"tracking.uri=sqlite:///{tmp_path}/m.db", f"hydra.run.dir={run_dir}",
                   cwd=tmp_path, timeout=120)  # a FIFO opened blocking hangs: the timeout fails the test
    assert out.returncode == 2, out.stderr[-3000:]
    [line] = error_lines(out.stderr)
    assert f"{entry} is a " in line, line
    assert (tmp_path / "target").read_text() == "the user's file\n"
    assert sorted(p.name for p in run_dir.iterdir()) == listing
    if kind == "hydra_folder_symlink":
        assert not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.slow
def test_resume_into_a_folder_with_a_symlinked_hydra_record_writes_nothing(tmp_path):
    """`fedbench resume` over a `.hydra/hydra.yaml` that links outside: refused in one line before Hydra
    rewrites it (Hydra overwrote the target even when the resume was refused afterwards)."""
    run_dir, entry = hostile(tmp_path, "hydra_yaml_symlink")
    (run_dir / ".hydra" / "overrides.yaml").write_text("- rounds=1\n")
    (run_dir / "checkpoint.pt").write_bytes(b"")
    out = fedbench("resume", str(run_dir), cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    [line] = error_lines(out.stderr)
    assert f"{entry} is a symlink (to {tmp_path / 'target'})" in line, line
    assert (tmp_path / "target").read_text() == "the user's file\n"


def test_a_dangling_symlink_as_the_run_folder_is_named(tmp_path):
    from fedbench.config.compose import checked_conf_dir
    from fedbench.config.preflight import preflight
    from fedbench.core.errors import FedbenchError

    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    for folder in (tmp_path / "link", tmp_path / "link" / "deeper"):
        with pytest.raises(FedbenchError, match=f"{tmp_path}/link is a symlink to {tmp_path}/nowhere, which does not "
                                                "exist") as info:
            preflight(checked_conf_dir(), [*SMALL, f"hydra.run.dir={folder}"])
        assert info.value.exit_code == 2


def test_the_lock_is_opened_without_following_links_or_blocking(tmp_path):
    """core.ownership.claim itself (the API's and a sweep job's way in, without preflight)."""
    from fedbench.core.ownership import NotOurs, claim, owner_of

    for kind in ("lock_symlink", "lock_fifo", "lock_folder"):
        (tmp_path / kind).mkdir()
        run_dir, entry = hostile(tmp_path / kind, kind)
        with pytest.raises(NotOurs, match=f"{entry} is a "):
            claim(run_dir)
        with pytest.raises(NotOurs, match=f"{entry} is a "):
            owner_of(run_dir)
        assert (tmp_path / kind / "target").read_text() == "the user's file\n"


@pytest.mark.parametrize("spelling", ["{cwd}", "{cwd}/", "./.", "outputs/..", "outputs/../."])
def test_the_current_folder_is_refused_however_it_is_spelled(tmp_path, monkeypatch, spelling):
    from fedbench.config.compose import checked_conf_dir
    from fedbench.config.preflight import preflight
    from fedbench.core.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    value = spelling.format(cwd=tmp_path)
    with pytest.raises(ConfigError, match="is the current folder"):
        preflight(checked_conf_dir(), [*SMALL, f"hydra.run.dir={value}"])
    with pytest.raises(ConfigError, match="is the current folder"):
        preflight(checked_conf_dir(), ["--multirun", *SMALL, "seed=0,1", f"hydra.sweep.dir={value}"])


def test_a_refused_run_removes_only_what_it_created_not_another_writers_files(tmp_path):
    """A shared folder: another writer adds files and folders while this process holds its claim (names
    a run would write among them); the clean-up removes this process's own entries only."""
    from fedbench.core.ownership import claim, discard_made, record_made

    shared = tmp_path / "shared"
    (shared / "old").mkdir(parents=True)
    claim(shared)
    (shared / ".hydra").mkdir()
    record_made(shared / ".hydra")
    (shared / ".hydra" / "config.yaml").write_text("mine\n")
    record_made(shared / ".hydra" / "config.yaml")
    (shared / "hydra_app.log").write_text("mine\n")
    record_made(shared / "hydra_app.log")
    # the other writer, meanwhile
    (shared / "theirs.txt").write_text("theirs\n")
    (shared / "their_folder").mkdir()
    (shared / "their_folder" / "x").write_text("theirs\n")
    (shared / ".hydra" / "notes.txt").write_text("theirs\n")
    (shared / "checkpoint.pt").write_bytes(b"theirs")
    discard_made(shared)
    assert sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*")) == [
        ".hydra", ".hydra/notes.txt", "checkpoint.pt", "old", "their_folder", "their_folder/x", "theirs.txt"]


def test_a_file_replaced_by_another_writer_is_not_removed(tmp_path):
    from fedbench.core.ownership import claim, discard_made, record_made

    shared = tmp_path / "shared"
    claim(shared)
    (shared / "hydra_app.log").write_text("mine\n")
    record_made(shared / "hydra_app.log")
    (shared / "theirs.tmp").write_text("theirs\n")
    os.replace(shared / "theirs.tmp", shared / "hydra_app.log")  # another inode in its place
    discard_made(shared)
    assert (shared / "hydra_app.log").read_text() == "theirs\n"


@pytest.mark.slow
def test_a_refused_run_removes_its_record_from_a_users_hydra_folder_and_nothing_else(tmp_path):
    """The end to end case: Hydra's files written into the user's own `.hydra/` and the log go again (the old
    clean-up kept all of `.hydra/` since the folder was there before); the user's files stay."""
    mine = tmp_path / "applogs"
    (mine / ".hydra").mkdir(parents=True)
    (mine / ".hydra" / "notes.txt").write_text("mine\n")
    (mine / "server.log").write_text("the user's log\n")
    out = fedbench("run", *SMALL, *MNIST_MISSING, f"hydra.run.dir={mine}", cwd=tmp_path)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == [".hydra", ".hydra/notes.txt",
                                                                               "server.log"]


def test_a_run_whose_store_cannot_be_reached_leaves_nothing_it_made(tmp_path):
    """Refused with exit 1 before its first round (no tracking server at the address): Hydra's `.hydra/` and log go
    again, and so do the folders the run created (outputs/runs/<date>/...); a folder that was there stays."""
    import socket

    with socket.socket() as s:  # a port with no server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "outputs").mkdir()
    out = fedbench("run", *SMALL, f"tracking.uri=http://127.0.0.1:{port}", cwd=tmp_path)
    assert out.returncode == 1 and "cannot reach the MLflow tracking server" in out.stderr, out.stderr[-2000:]
    assert len(error_lines(out.stderr)) == 1, out.stderr[-2000:]
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")] == ["outputs"]


def test_the_runs_log_is_never_written_through_a_link(tmp_path):
    """JobOutput appends to the job's log: a link put in its place (after the start-up checks) is refused in one
    line and its target is untouched; the run's own log is appended to."""
    from fedbench.core.ownership import NotOurs
    from fedbench.runs.single import JobOutput

    target = tmp_path / "users_file"
    target.write_text("the user's file\n")
    (tmp_path / "hydra_app.log").symlink_to(target)
    with pytest.raises(NotOurs, match="symlink"):
        JobOutput("", tmp_path / "hydra_app.log", quiet=True)("round 1")
    assert target.read_text() == "the user's file\n"
    output = JobOutput("", tmp_path / "own.log", quiet=True)
    output("round 1")
    output("round 2")
    assert [line.split("] ", 1)[1] for line in (tmp_path / "own.log").read_text().splitlines()] == ["round 1", "round 2"]


def test_a_jobs_hydra_files_are_written_from_its_config_itself_when_nothing_in_it_is_masked(tmp_path, monkeypatch):
    """runs.hydra_app masks every secret of .hydra/{config,hydra,overrides}.yaml; a config with none to mask
    (a grid's every job, as a rule) goes to Hydra's writer as it is, not as a config made again of its tree
    (~20 ms a job of a grid): the same bytes as through the masked copy, and a secret still masked."""
    import hydra.core.utils as hydra_utils
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fedbench.core.secrets import redact_tree
    from fedbench.runs.hydra_app import install_hydra_redaction
    from tests.conftest import CONF

    hydras_own, handed = hydra_utils._save_config, []

    def spy(cfg, filename, output_dir):
        handed.append(cfg)
        return hydras_own(cfg, filename, output_dir)

    monkeypatch.setattr(hydra_utils, "_save_config", spy)
    install_hydra_redaction()
    for secret in (False, True):
        overrides = ["eta_l=0.1", "+note='a: b # c'", "targets=[0.5,0.8]", "tracking.run_name='über'"]
        overrides += ["tracking.uri=postgresql://u:hunter2@db.example/mlflow"] if secret else []
        with initialize_config_dir(config_dir=CONF, version_base=None):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
        for name, node in (("config.yaml", cfg), ("hydra.yaml", cfg.hydra), ("overrides.yaml", cfg.hydra.overrides.task)):
            handed.clear()
            hydra_utils._save_config(node, name, tmp_path / str(secret))
            assert (handed[0] is node) is not secret, name
            masked = OmegaConf.to_yaml(OmegaConf.create(redact_tree(OmegaConf.to_container(node, enum_to_str=True))))
            written = (tmp_path / str(secret) / name).read_text(encoding="utf-8")
            assert written == masked and "hunter2" not in written, name


def test_a_users_folder_as_the_run_folder_keeps_files_named_as_fedbenchs_own(tmp_path):
    """Files named as fedbench's markers (FAILED, INTERRUPTED) and its checkpoint's temporary files
    (`.ckpt-*.tmp`) in a folder of the user's that is named as hydra.run.dir were deleted at the start; they
    are fedbench's only in a folder an earlier fedbench job recorded itself in (.hydra/fedbench.yaml), and a
    temporary file only under the name mkstemp gives it."""
    from fedbench.engine.checkpoint import remove_orphans

    mine = tmp_path / "mine"
    mine.mkdir()
    theirs = {"FAILED": "a", "INTERRUPTED": "b", ".ckpt-notes.tmp": "c", "notes.txt": "d"}
    for name, text in theirs.items():
        (mine / name).write_text(text)
    (mine / ".ckpt-d.tmp").mkdir()  # a folder of that name stopped every checkpoint
    out = fedbench("run", *SMALL, "rounds=2", "tracking.checkpoint_every=1", f"tracking.uri=sqlite:///{tmp_path}/m.db",
                   f"hydra.run.dir={mine}", cwd=tmp_path)
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr[-3000:]
    assert {name: (mine / name).read_text() for name in theirs} == theirs and (mine / ".ckpt-d.tmp").is_dir()
    assert (mine / "checkpoint.pt").is_file()
    orphan = mine / ".ckpt-a1b2c3d4.tmp"  # a write killed half-way
    orphan.write_bytes(b"PK")
    remove_orphans(mine)
    assert not orphan.exists() and (mine / ".ckpt-notes.tmp").exists()
