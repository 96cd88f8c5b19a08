"""A command's output file (report, figure, table, a reproduction's summary) in a folder others share: refused in
one line where a link, FIFO, folder or hard-linked file stands, never followed; written whole or not at all
(core.output_files). The commands' own messages are rows of docs/bad_inputs.md (tests/bad_inputs.py)."""

from __future__ import annotations

import os
import stat

import pytest

from fedbench.core import output_files
from fedbench.core.errors import ConfigError
from fedbench.core.output_files import check_output_file, write_output


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text("the user's own file\n")
    return path


def kinds(tmp_path, victim):
    """Each thing other than a regular file of ours that may stand where a command writes."""
    made = {}
    made["a symlink (to"] = tmp_path / "link.md"
    made["a symlink (to"].symlink_to(victim)
    made["a FIFO"] = tmp_path / "fifo.md"
    os.mkfifo(made["a FIFO"])
    made["a file with 2 hard links"] = tmp_path / "hard.md"
    os.link(victim, made["a file with 2 hard links"])
    made["a folder"] = tmp_path / "folder.md"
    made["a folder"].mkdir()
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "nowhere")
    made["a symlink (to " + str(tmp_path / "nowhere")] = dangling
    return made


def test_each_thing_but_a_regular_file_of_ours_is_refused_and_left_as_it_was(tmp_path, victim):
    for what, path in kinds(tmp_path, victim).items():
        with pytest.raises(ConfigError) as refused:
            write_output(path, "report", "--output")
        message = str(refused.value)
        assert message.startswith(f"--output {path} is {what}") and "neither follows nor replaces" in message, message
        with pytest.raises(ConfigError):
            check_output_file(path, "--output", create_folders=True)  # the same, before any work
    assert victim.read_text() == "the user's own file\n" and not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim.txt", "link.md", "fifo.md", "hard.md", "folder.md", "dangling.md"])  # no temporary left behind


def test_a_regular_file_of_ours_is_replaced_whole(tmp_path):
    path = tmp_path / "sub" / "report.md"
    write_output(path, "first\n")
    write_output(path, b"second\n")
    assert path.read_bytes() == b"second\n" and [p.name for p in path.parent.iterdir()] == ["report.md"]


def test_a_link_planted_after_the_check_is_replaced_not_followed(tmp_path, victim, monkeypatch):
    """Between the check and the write another process puts a link at the path: the rename replaces the link."""
    path = tmp_path / "report.html"
    path.symlink_to(victim)
    monkeypatch.setattr(output_files, "check_destination", lambda *a, **k: None)  # the race: checked before the link
    write_output(path, "<html></html>")
    assert victim.read_text() == "the user's own file\n"
    assert not path.is_symlink() and path.read_text() == "<html></html>"


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_half_file(tmp_path, monkeypatch):
    path = tmp_path / "table.csv"
    write_output(path, "a,b\n1,2\n")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(output_files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_output(path, "a,b\n3,4\n")
    assert path.read_text() == "a,b\n1,2\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_a_new_file_has_the_mode_a_plain_open_gives_it(tmp_path):
    old = os.umask(0o027)
    try:
        made = write_output(tmp_path / "page.html", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o640


def test_a_figure_goes_through_the_same_door(tmp_path, victim):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedbench.tracking.plots import save_figure

    (tmp_path / "curves.pdf").symlink_to(victim)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    with pytest.raises(ConfigError, match="curves.pdf is a symlink"):
        save_figure(fig, tmp_path / "curves")
    assert victim.read_text() == "the user's own file\n" and fig.number not in plt.get_fignums()  # closed all the same
    (tmp_path / "curves.pdf").unlink()
    fig, ax = plt.subplots()
    paths = save_figure(fig, tmp_path / "curves")
    assert [p.read_bytes()[:4] for p in paths] == [b"\x89PNG", b"%PDF"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_folder_that_takes_no_new_file_is_refused_before_any_work():
    """/proc (and /sys, a read-only mount) answers access(W_OK) with yes for root, then refuses the file: the check
    creates and removes a file of its own there, as the write will."""
    with pytest.raises(ConfigError, match=r"^--output /proc/version: cannot write to /proc: .*; choose another path$"):
        check_output_file("/proc/version", "--output")


def test_a_write_the_disk_refuses_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    import errno

    from fedbench.core.errors import FedbenchError

    path = tmp_path / "report.md"
    write_output(path, "old\n")
    real = output_files.os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output_files.os, "fdopen", Full)
    with pytest.raises(FedbenchError) as failed:
        write_output(path, "new\n", "--output")
    assert str(failed.value).startswith(f"cannot write {path}: no space left on the disk of {tmp_path} (")
    assert "\n" not in str(failed.value) and not isinstance(failed.value, ConfigError)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["report.md"]
