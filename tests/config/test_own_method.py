"""docs/own_method.md runs as written: its files are written and its commands run, in order, in an empty
folder outside the checkout (issue 41: a method written as a plugin, checked by the public contract kit)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.faultkit import ROOT, env

DOC = ROOT / "docs" / "own_method.md"
BLOCK = re.compile(r"^```(\w+)(?: title=\"([^\"]+)\")?\n(.*?)^```$", re.S | re.M)


def steps(text: str) -> list[tuple[str, str]]:
    """('file', path + body) and ('command', line) in the page's order."""
    out = []
    for lang, title, body in BLOCK.findall(text):
        if title:
            out.append(("file", title, body))
        elif lang == "bash":
            out.extend(("command", line, "") for line in body.splitlines() if line.strip())
    return out


def test_the_page_has_the_files_and_commands_the_run_needs():
    found = steps(DOC.read_text())
    files = {title for kind, title, _ in found if kind == "file"}
    assert {"myfl.py", "my_conf/algorithm/fednova.yaml", "test_fednova.py"} <= files
    assert any(c.startswith("python -m pytest") for kind, c, _ in found if kind == "command")


@pytest.mark.slow  # four fresh processes: runs, a grid of four, the report and the user's own pytest
def test_the_how_to_runs_as_written(tmp_path):
    folder = tmp_path / "my_fednova"  # outside the checkout: nothing of fedbench's tree is in it
    folder.mkdir()
    assert ROOT not in folder.parents
    for kind, what, body in steps(DOC.read_text()):
        if kind == "file":
            (folder / what).parent.mkdir(parents=True, exist_ok=True)
            (folder / what).write_text(body)
            continue
        args = shlex.split(what)
        if args[0] == "fedbench":
            args = [sys.executable, "-m", "fedbench.cli", *args[1:]]
        elif args[0] == "python":
            args = [sys.executable, *args[1:]]
        done = subprocess.run(args, cwd=folder, env=env(), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{what}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if args[-2:] == ["--baseline", "fedavg"]:
            assert any(line.startswith("| fednova ") for line in done.stdout.splitlines()), done.stdout
        if "pytest" in args:
            assert re.search(r"\b2 passed\b", done.stdout), done.stdout
