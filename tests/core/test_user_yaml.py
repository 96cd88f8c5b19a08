"""A YAML file from someone else's folder (a --config-dir or FEDBENCH_CONF group file, a run folder's .hydra/ record
that `fedbench resume` reads) is read with bounded work (core.user_yaml): an alias bomb of a few hundred bytes, a
nesting 100,000 levels deep, an alias inside the node it names, each one line naming the file, before any work.
Before, the bomb ran for minutes and gigabytes (OmegaConf expands every alias), the deep nesting was a traceback."""

from __future__ import annotations

import contextlib
import shutil
import signal

import pytest

from fedbench.core.errors import ConfigError
from tests.bad_inputs import CONF, diagnose


def alias_bomb(levels: int = 9, top_list: bool = False) -> str:
    """"Billion laughs": each level names the previous one 9 times; 9 levels are 9**9 values in 430 bytes."""
    item = "- " if top_list else ""
    lines = [f'{item}{"" if top_list else "a0: "}&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f'{item}{"" if top_list else f"a{i}: "}&a{i} [' + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


DEEP = "x: " + "[" * 100_000 + "]" * 100_000 + "\n"


@contextlib.contextmanager
def within(seconds: int):
    """Fail (not hang) where the reading is not bounded: the unbounded reading took minutes."""
    def late(*_):
        raise TimeoutError(f"still reading after {seconds} s")

    old = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)  # again every 0.5 s: a library may swallow one
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("name,text,needle", [
    ("overrides.yaml", alias_bomb(top_list=True), "expand to more than 100,000"),
    ("fedbench.yaml", alias_bomb(), "expand to more than 100,000"),
    ("overrides.yaml", "- " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than 64 levels deep"),
    ("fedbench.yaml", "a: &a [1, *a]\n", "the alias *a is used inside the node it names"),
], ids=["alias_bomb_list", "alias_bomb_dict", "deep", "self_alias"])
def test_a_run_record_that_expands_without_bound_is_one_line(tmp_path, name, text, needle):
    from fedbench.runs.recorded import read_yaml

    (tmp_path / name).write_text(text)
    with within(20), pytest.raises(ConfigError, match="is not the run's YAML record") as error:
        read_yaml(tmp_path / name)
    assert needle in str(error.value) and str(tmp_path / name) in str(error.value)


@pytest.mark.parametrize("text,needle", [
    ("name: fedavg\n" + alias_bomb(), "line 7, column 5: its values expand to more than 100,000"),
    ("name: fedavg\n" + DEEP, "values nested more than 64 levels deep"),
], ids=["alias_bomb", "deep"])
def test_a_config_folder_file_that_expands_without_bound_is_one_line(tmp_path, text, needle):
    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "mine.yaml").write_text(text)
    with within(20):
        message = diagnose(f"--config-dir {tmp_path} algorithm=mine")
    assert message.startswith(f"malformed YAML in {tmp_path}/algorithm/mine.yaml, line ") and needle in message


def test_an_alias_bomb_in_fedbench_conf_is_one_line_before_the_help_and_the_run(tmp_path, monkeypatch):
    from fedbench.cli.run import top_level_keys_help
    from fedbench.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    with open(conf / "config.yaml", "a") as f:
        f.write(alias_bomb())
    monkeypatch.setattr(compose, "CONF_DIR", conf)
    with within(20):
        assert top_level_keys_help() == ""  # every command's --help text reads config.yaml
        message = diagnose("rounds=1", conf=None)
    assert message.startswith(f"malformed YAML in {conf}/config.yaml") and "expand to more than 100,000" in message


def test_the_key_suggestion_skips_a_deep_file(tmp_path):
    """`run mu=0.1` reads every group file for the key (config.suggest): a deep one was a RecursionError traceback."""
    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "deep.yaml").write_text(DEEP)
    message = diagnose(f"--config-dir {tmp_path} mu=0.1")
    assert message.startswith("Unknown top-level key 'mu'")


def test_aliases_within_the_bounds_read_as_before():
    from fedbench.core.user_yaml import load_yaml

    assert load_yaml("x: &x {a: 1}\ny: [*x, *x]\n<<: *x\n") == {"x": {"a": 1}, "y": [{"a": 1}, {"a": 1}], "a": 1}
