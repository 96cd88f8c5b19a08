"""Another person's text reaches the user's terminal as no terminal acts on it (core.terminal): a run's param in a
shared MLflow store, a config folder's file name, whatever an error line quotes. Before, `fedbench report` printed
a param's `ESC[2J ESC[H` (clear the screen), `ESC]0;...BEL` (retitle the window) and carriage return as they were."""

from __future__ import annotations

import shutil

from typer.testing import CliRunner

from tests.bad_inputs import CONF

HOSTILE = "\x1b[2J\x1b[H\x1b]0;pwned\x07\rOWNED\u202e"


def unsafe(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\r\x07\u202e"]


def invoke(*args: str, **env):
    from fedbench.cli.app import app

    return CliRunner().invoke(app, list(args), env=env or None)


def test_a_stores_params_and_tags_reach_report_as_no_terminal_acts_on_them(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/shared.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("fedbench"), tags={"note": HOSTILE})
    for key, value in (("algorithm.name", "fedavg" + HOSTILE), ("seed", "0"), ("partition.alpha", "0.3" + HOSTILE)):
        client.log_param(run.info.run_id, key, value)
    client.log_metric(run.info.run_id, "test_accuracy", 0.6, step=1)
    client.set_terminated(run.info.run_id)
    for fmt in ("markdown", "csv", "latex"):
        out = invoke("report", "--uri", uri, "--format", fmt)
        assert out.exit_code == 0, out.output
        assert unsafe(out.output) == [] and "x1b[2J" in out.output and "x07" in out.output, (fmt, out.output)


def test_an_error_line_quotes_a_name_as_no_terminal_acts_on_it(capsys):
    from fedbench.core.errors import ConfigError, report_error

    report_error(ConfigError(f"data/leaf/{HOSTILE}.json is not a LEAF JSON file"))
    err = capsys.readouterr().err
    assert unsafe(err) == [] and err == "error: data/leaf/\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\rOWNED\\u202e.json is not a LEAF JSON file\n"


def test_list_shows_a_config_folders_names_as_no_terminal_acts_on_them(tmp_path, monkeypatch):
    from fedbench.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "algorithm" / "x\x1b[2Jy.yaml").write_text('name: "fedavg\\e]0;pwned\\a"\n')
    monkeypatch.setattr(compose, "CONF_DIR", conf)  # FEDBENCH_CONF, as the command read it when it started
    out = invoke("list")
    assert out.exit_code == 0, out.output
    assert "x\\x1b[2Jy" in out.output and "fedavg\\x1b]0;pwned\\x07" in out.output and unsafe(out.output) == []


def test_a_runs_lines_warnings_summary_and_log_quote_as_no_terminal_acts_on_them(tmp_path, capsys):
    """A run's own lines quote files and stores (a data folder's name, a store's reason): on the console and in
    the job's log, which a user reads with `cat`, as no terminal acts on them; a sweep's failure list likewise."""
    from fedbench.runs.single import JobOutput

    log = tmp_path / "job.log"
    say = JobOutput("job 1", log, quiet=False)
    say(f"reading {HOSTILE}")
    say.warn(f"the store said {HOSTILE}")
    say.summary(f"run folder {HOSTILE}\nnext line")
    out = capsys.readouterr()
    for text in (out.out, out.err, log.read_text()):
        assert unsafe(text) == [] and "\\x1b[2J" in text, text
    assert "run folder" in out.out and "next line" in out.out  # line breaks stay
