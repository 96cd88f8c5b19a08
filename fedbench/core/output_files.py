"""The files a command writes as its output (a report, a figure, a table, a reproduction's summary), often in a
folder other people share (outputs/): each is checked before any work and written whole or not at all. What
stands at the path must be absent or a regular file of this user's with one link; a symlink, FIFO, folder or
hard-linked file there is refused in one line (the run folder's rule, core.ownership), never followed or
replaced. The write goes to a temporary file beside it, renamed over the path: a link planted meanwhile is
replaced, not followed, and an interrupted write leaves the old file (or none), never half a new one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fedbench.core.errors import ConfigError, FedbenchError, write_failure
from fedbench.core.ownership import describe_entry


def not_writable_here(path: Path, option: str | None, what: str) -> ConfigError:
    named = f"{option} {path}" if option else str(path)
    fix = f"remove it or choose another path ({option})" if option else "remove it"
    return ConfigError(f"{named} is {what}, where fedbench writes its output; fedbench neither follows nor replaces "
                       f"it: {fix}")


def check_destination(path: Path, option: str | None = None) -> None:
    """Refuse (ConfigError) a path where something other than a regular file of this user's stands."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    what = describe_entry(st, Path(path))
    if what is not None:
        raise not_writable_here(Path(path), option, what)


def check_output_file(path, option: str, create_folders: bool = False) -> None:
    """Fail before any work when `path` (a file a command will write) cannot be written. Without
    `create_folders` its folder must exist (a mistyped path is more likely than a wanted new tree); with
    it, the folders a command creates when it writes (`--output figs/loss`) must be creatable: the
    nearest existing one is a writable folder. What stands at the path must be a file it may replace."""
    try:  # a name longer than the file system takes (ENAMETOOLONG) ended the checks below in a traceback
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {exc.strerror or exc}; choose another path") from None
    folder = Path(path).absolute().parent
    if not create_folders and not folder.is_dir():
        raise ConfigError(f"{option} {path}: the folder {folder} does not exist; create it or choose another path")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{option} {path}: {existing} is a file, not a folder; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: the folder {existing} is not writable; choose another path")
    if Path(path).is_dir() and not Path(path).is_symlink():
        raise ConfigError(f"{option} {path} is a folder; give a file name")
    check_destination(Path(path), option)
    try:  # a file system that takes no new file (/proc, /sys, a read-only mount) even where access() says yes
        fd, probe = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".probe", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {write_failure(exc, existing)}; choose another path") from None


def check_figure_format(path, option: str) -> None:
    """A figure's file name ends in a format matplotlib writes (its suffix picks the format; none: PNG): `--out
    split.txt` ended in matplotlib's ValueError traceback after the split was made and its table printed."""
    suffix = Path(path).suffix.lstrip(".").lower()
    if not suffix:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    if suffix not in FigureCanvasBase.get_supported_filetypes():  # its list varies with Pillow's build (avif): not listed
        raise ConfigError(f"{option} {path}: matplotlib writes no .{suffix} figure; end the name in a format it writes, "
                          "e.g. .png, .pdf or .svg (none: a PNG)")


def write_output(path: Path, data: str | bytes, option: str | None = None, encoding: str = "utf-8") -> Path:
    """Write `data` at `path` (its folders created) as a new regular file renamed over whatever regular file of
    ours stood there; anything else at the path is refused (check_destination)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_destination(path, option)
    payload = data.encode(encoding) if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o666 & ~_umask())  # as a plain open() would have made it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk, a quota, a folder that takes no file: one line, the old file kept
            raise FedbenchError(f"cannot write {path}: {write_failure(exc, path.parent)}") from None
        raise
    return path


def as_written(fig):
    """`fig` with every text drawn as it is written: matplotlib reads `$...$` in a label as TeX math, and a
    legend made of a shared store's params (`algorithm.name=fed$\\frac{$`) ended `plot` and the HTML report in
    mathtext's ValueError traceback. fedbench's own labels hold no math."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_parse_math(False)
    return fig


def save_figure_files(fig, paths: list[Path], option: str | None = None, **savefig) -> list[Path]:
    """A matplotlib figure written as write_output writes, once per path (the format from its suffix), its texts
    as written (as_written); the figure is closed whatever happens."""
    import io

    import matplotlib.pyplot as plt

    try:
        as_written(fig)
        written = []
        for path in paths:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **savefig)
            written.append(write_output(path, buffer.getvalue(), option))
        return written
    finally:
        plt.close(fig)


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every thread meanwhile)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022
