"""The Python API: docs/api.md's cells run as a notebook would run them, in an empty folder."""

from __future__ import annotations

import re

import pytest

from tests.faultkit import ROOT


def cells() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), flags=re.S)


@pytest.mark.slow
def test_the_api_page_runs_as_a_notebook(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    assert len(cells()) >= 4
    for code in cells():
        exec(compile(code, "docs/api.md", "exec"), namespace)  # noqa: S102 (our own documentation)
    out = capsys.readouterr().out
    assert "Did you mean 'fedavg'?" in out
    assert (tmp_path / "outputs" / "mlflow.db").is_file()


def test_run_returns_the_history_the_record_holds(tmp_path):
    import fedbench
    from tests.faultkit import SMALL, runs

    result = fedbench.run([*SMALL, "rounds=3", f"tracking.uri=sqlite:///{tmp_path}/m.db"], run_dir=tmp_path / "r")
    client, [run] = runs(tmp_path / "m.db")
    assert run.info.run_id == result.run_id and run.info.status == "FINISHED"
    recorded = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "test_accuracy"), key=lambda m: m.step)]
    assert result.history["test_accuracy"].tolist() == pytest.approx(recorded)
    with pytest.raises(fedbench.core.errors.ConfigError, match="use fedbench.sweep for a grid"):
        fedbench.run(["seed=0,1"])


def test_a_run_shows_progress_where_someone_watches_and_is_silent_elsewhere(tmp_path, monkeypatch, capsys):
    """Issue 33: fedbench.run was silent for a minute in a notebook. By default a bar (tqdm.auto) and the
    run's lines where stderr is a terminal or a Jupyter kernel; nothing into a pipe; progress=False: never."""
    import fedbench
    from fedbench.runs import single
    from tests.faultkit import SMALL

    args = [*SMALL, "rounds=2", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    fedbench.run(args, run_dir=tmp_path / "a")
    assert capsys.readouterr().err == ""  # captured: not a terminal
    monkeypatch.setattr(single, "interactive", lambda: True)
    fedbench.run([*args, "seed=1"], run_dir=tmp_path / "b")
    err = capsys.readouterr().err
    assert "2/2" in err and "fedbench: fedavg on digits" in err
    fedbench.run([*args, "seed=2"], run_dir=tmp_path / "c", progress=False)
    assert capsys.readouterr().err == ""
