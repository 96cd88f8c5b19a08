"""What a run folder records of how its run was started (`.hydra/overrides.yaml`, `.hydra/fedbench.yaml`),
tied to the run's checkpoint: each checkpoint stores a digest of that record, and `fedbench resume`
composes the record only when the digest matches. The folder's files are the user's to edit, and a
line appended there (`+hydra.callbacks.x._target_=builtins.open`) would run code at the resume.

The digest is keyed (HMAC-SHA256) with this user's own key, a file only they can read (record_key): whoever
can write a run folder can write its checkpoint too, and an unkeyed digest was recomputed there to pass a
record that ran `torch.load` on a planted pickle. A folder another user or machine wrote (shared,
downloaded) is composed only with `fedbench resume --trust`, after its owner has read its record."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from fedbench.core.errors import ConfigError
from fedbench.engine.checkpoint import RECORD_DIGEST

PLACEMENT = ("resume", "hydra.run.dir")  # where and how a run continues: set by resume, not part of the record


def key_of(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


KEY_ENV = "FEDBENCH_RECORD_KEY"  # the key's file, if not $XDG_CONFIG_HOME/fedbench/record.key (~/.config/...)


def key_path() -> Path:
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "fedbench" / "record.key"


def record_key() -> bytes | None:
    """This user's key of the records' digests: 32 random bytes in a file of theirs that only they can read,
    made on first use (written aside and linked into place: processes that start together read one key).
    None where none can be made (a home that cannot be written: a system user's /nonexistent, a read-only
    container): runs then record no digest, and a resume composes their record only without Hydra settings or
    code, as an earlier version's."""
    path = key_path()
    if not os.path.lexists(path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            aside = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
            os.link(aside, path)
        except FileExistsError:  # another process made it first: its key is the key
            pass
        except OSError:
            return None
        finally:
            aside.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"cannot read this user's record key {path} ({exc.strerror}); it signs the run folders' "
                          f"records: a file of yours, mode 600 (set {KEY_ENV} to use another file)") from None
    with os.fdopen(fd, "rb") as f:
        st, key = os.fstat(f.fileno()), f.read(4096)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(key) < 32:
        raise ConfigError(f"{path} is not this user's record key (a file of theirs, mode 600, of 32 bytes or more): "
                          f"whoever else can read it can forge a run folder's record; remove it (a new one is made) "
                          f"or set {KEY_ENV}")
    return key


def _record_text(overrides: list[str], fedbench_conf: str | None, config_dirs: list[str]) -> bytes:
    kept = [str(o) for o in overrides if key_of(str(o)) not in PLACEMENT]
    return json.dumps({"overrides": kept, "fedbench_conf": fedbench_conf, "config_dirs": list(config_dirs)}).encode()


def digest(overrides: list[str], fedbench_conf: str | None, config_dirs: list[str]) -> str | None:
    """The keyed digest of what composes the run: its overrides (without the placement) and config folders;
    None without a key (record_key)."""
    key = record_key()
    if key is None:
        return None
    return hmac.new(key, _record_text(overrides, fedbench_conf, config_dirs), hashlib.sha256).hexdigest()


def unkeyed_digest(overrides: list[str], fedbench_conf: str | None, config_dirs: list[str]) -> str:
    """The digest of checkpoints written before the key (anyone can compute it)."""
    return hashlib.sha256(_record_text(overrides, fedbench_conf, config_dirs)).hexdigest()


def read_yaml(path: Path):
    """A YAML file of the run folder, opened as the run's own (core.ownership.open_owned: no link, no FIFO)."""
    from omegaconf import OmegaConf

    from fedbench.core.ownership import open_owned
    from fedbench.config.compose import bound_yaml

    bound_yaml()  # composed within bounds: an alias bomb or a deep nesting there is one line, not minutes and gigabytes

    fd = open_owned(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        text = f.read(1 << 20).decode(errors="replace")
    try:
        return OmegaConf.to_container(OmegaConf.create(text))
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ConfigError(f"{path} is not the run's YAML record ({exc.__class__.__name__}: {first})") from None


def read_overrides(path: Path) -> list[str]:
    overrides = read_yaml(path)
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"{path} is not a list of overrides, as a run records it")
    return overrides


def verify(run_dir: Path, checkpoint: Path, overrides: list[str], fedbench_conf: str | None,
           config_dirs: list[str], trust: bool = False) -> None:
    """Refuse in one line a record that is not the one this user's fedbench wrote with the checkpoint (`trust`:
    the user has read it, compose it as it is). A checkpoint of an earlier version (no digest, or one without
    the key) continues only without hydra.* overrides and `_target_` entries, which would run code before any
    check."""
    from fedbench.engine.checkpoint import read_payload

    if trust:
        return
    saved = read_payload(checkpoint).get(RECORD_DIGEST)
    if saved is not None and saved == digest(overrides, fedbench_conf, config_dirs):
        return
    if saved is None or saved == unkeyed_digest(overrides, fedbench_conf, config_dirs):
        code = [o for o in overrides if key_of(o) not in PLACEMENT
                and (key_of(o).startswith(("hydra.", "hydra/")) or key_of(o).endswith("_target_"))]
        if code:
            raise ConfigError(f"{run_dir}/.hydra/overrides.yaml sets {code[0]!r}, and its checkpoint {checkpoint} "
                              "predates the keyed record: resume does not compose Hydra settings or code it cannot "
                              "tie to the run; remove that line, or read the record and use fedbench resume --trust")
        # an interpolation (${oc.env:...}) put this user's environment in a URI of the folder's choosing, and a config
        # folder named there composes its files' Hydra settings and `_target_` entries
        read = [o for o in overrides if key_of(o) not in PLACEMENT and "${" in o.split("=", 1)[-1]]
        folders = [d for d in (fedbench_conf, *config_dirs) if d]
        if read or folders:
            what = (f"overrides.yaml sets {read[0]!r}, an interpolation" if read else
                    f"fedbench.yaml names the config folder {folders[0]}")
            raise ConfigError(f"{run_dir}/.hydra/{what}, and its checkpoint {checkpoint} predates the keyed record: "
                              "resume does not compose what it cannot tie to the run (it can read your environment "
                              "or run code); read the record and use fedbench resume --trust")
        return
    raise ConfigError(f"{run_dir}/.hydra/overrides.yaml (or fedbench.yaml) is not the record this user's fedbench wrote "
                      f"with its checkpoint {checkpoint}: it was changed since, or written by another user or machine "
                      "(a record can run code); restore it, start a new run with the settings you want, or, having "
                      "read the record, continue it with fedbench resume --trust")
