"""Bad configuration inputs: each stops with one message naming the value and the fix, before
any work (in-process through the CLI's preflight, plus a few real command lines for exit code 2)."""

from __future__ import annotations

import functools
import importlib.util

import pytest

from tests.bad_inputs import CASES, COMMAND_CASES, CONF, diagnose, diagnose_command, make_fixtures
from tests.faultkit import ROOT, error_lines, fedbench, runs


@functools.cache
def message(line: str) -> str:
    return diagnose(line)


@pytest.mark.parametrize("line,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_its_message(line, needle):
    assert needle in message(line)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-inputs")
    make_fixtures(tmp)
    return tmp


@pytest.fixture(scope="module")
def command_messages(fixtures):
    return {line: diagnose_command(line, fixtures) for line, _ in COMMAND_CASES}


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
@pytest.mark.parametrize("line,needle", COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES])
def test_bad_command_gives_its_message(command_messages, line, needle):
    assert needle in command_messages[line] and "\n" not in command_messages[line]


@pytest.mark.slow  # >= 10 s on a busy 2-core machine (issue 43: `pytest -m "not slow"` is the quick loop)
def test_table_is_large_and_the_doc_is_current(command_messages):
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "gen_bad_inputs_doc.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    expected = gen.render([(line, message(line)) for line, _ in CASES],
                          [(line, command_messages[line]) for line, _ in COMMAND_CASES])
    assert (ROOT / "docs" / "bad_inputs.md").read_text() == expected, "run python scripts/gen_bad_inputs_doc.py"


def test_a_good_config_passes():
    assert diagnose("rounds=1") == ""


@pytest.mark.slow
@pytest.mark.parametrize("line", ["eta_l=-0.1", "-m algorithm=fedavg,fedsdg", "seed=99999999999999999999",
                                  "rounds=${oops}", "-m eta_l=choice()", "experiment=null"])
def test_command_line_exits_2_with_one_error_line(tmp_path, line):
    db = tmp_path / "m.db"
    args = ["--multirun" if a == "-m" else a for a in line.split()]
    out = fedbench("run", *args, f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={tmp_path}/run",
                   f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert error_lines(out.stderr) == [f"error: {message(line)}"] and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
    assert not db.exists() or runs(db)[1] == []


@pytest.mark.slow
@pytest.mark.parametrize("args", [["report", "--format", "pdf"], ["reproduce", "X", "--jobs", "0"], ["run", "--foo"],
                                  ["run", "--cfg", "nope"]])
def test_a_usage_error_is_one_line(tmp_path, args):
    """Click's and Hydra's parsers printed the command's usage and a box (or usage lines) around their error."""
    out = fedbench(*args, cwd=tmp_path)
    assert out.returncode == 2 and len(error_lines(out.stderr)) == 1, out.stderr
    assert out.stderr.strip() == error_lines(out.stderr)[0] and args[-1] in out.stderr
