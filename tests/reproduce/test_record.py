"""Recording one entry at a time (`fedbench reproduce ENTRY --scale S --record`, issue 40 §8): a full-scale entry
takes hours, so recording one replaces only its own rows, its subsection of docs/results.md and its section of
docs/results.html; every other entry keeps its record and its own provenance (command, machine, date, commit,
compute), and the pages are rebuilt whole from the stored record."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from typer.testing import CliRunner

import fedbench.reproduce.catalog as catalog_module
import fedbench.reproduce.results as results_module
import fedbench.reproduce.run as run_module
from fedbench.cli.app import app as cli_app
from fedbench.reproduce.entry import Claim
from fedbench.tracking.page import Section
from tests.reproduce.test_reproduce import fake_rep


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A source checkout to record into, a catalog of two entries, and a reproduction that returns the outcome
    `outcomes[name]` (its claim's numbers name the run) without training."""
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.setattr(results_module, "CHECKOUT", root)
    monkeypatch.setattr(results_module, "RECORDS", root / "records")
    rep = fake_rep(tmp_path / "papers", monkeypatch)
    reps = {name: replace(rep, name=name) for name in ("fake/a", "fake/b")}
    monkeypatch.setattr(catalog_module, "REPRODUCTIONS", reps)
    outcomes = {}
    monkeypatch.setattr(run_module, "reproduce", lambda rep, scale, extra, outputs, seeds, jobs: outcomes[rep.name])
    return root, reps, outcomes


def outcome(name: str, run: str) -> run_module.Outcome:
    claims = [Claim(f"{name} holds", True, f"measured in {run}")]
    markdown = f"## {name} — Table T (scale ci)\n\nSeeds: 0\n\n- [x] {name} holds (measured in {run})"
    section = Section(f"{name}: Table T (scale ci)", ["Seeds: 0"], [("Paper vs measured", pd.DataFrame({"run": [run]}))],
                      [], [(c.text, c.holds, c.detail) for c in claims])
    return run_module.Outcome(pd.DataFrame(), claims, markdown, [], section)


def record(reps, outcomes, name: str, run: str, *extra: str) -> None:
    outcomes[name] = outcome(name, run)
    run_module.reproduce_and_record(reps[name], "ci", extra, echo=lambda *_: None)


def rows(name: str) -> pd.DataFrame:
    found = results_module.recorded("ci")
    return found[found["reproduction"] == name].reset_index(drop=True)


def test_recording_an_entry_keeps_every_other_entrys_record_sections_and_provenance(checkout, monkeypatch):
    root, reps, outcomes = checkout
    record(reps, outcomes, "fake/a", "run A1", "engine.threads=1")
    monkeypatch.setattr(results_module.time, "strftime", lambda fmt: "2030-01-02")  # B on another day
    record(reps, outcomes, "fake/b", "run B1", "engine.threads=2")
    a_first, b_first = rows("fake/a"), rows("fake/b")
    assert a_first["command"].tolist() == ["fedbench reproduce fake/a --scale ci --record engine.threads=1"]
    assert b_first["command"].tolist() == ["fedbench reproduce fake/b --scale ci --record engine.threads=2"]
    assert a_first["date"].tolist() != b_first["date"].tolist()  # each its own provenance
    doc = (root / "docs" / "results.md").read_text()
    page = (root / "docs" / "results.html").read_text()
    for text in ("fake/a holds (measured in run A1)", "fake/b holds (measured in run B1)"):
        assert doc.count(text) == 1
    assert "measured in run A1" in page and "measured in run B1" in page and page.count("<h2>Scale ci: overview</h2>") == 1
    assert "| fake/a | 1 / 1 |" in doc and "`fedbench reproduce fake/a --scale ci --record engine.threads=1` |" in doc
    assert "`fedbench reproduce fake/b --scale ci --record engine.threads=2` |" in doc

    record(reps, outcomes, "fake/a", "run A2", "engine.threads=1")  # A again: only A's record changes
    pd.testing.assert_frame_equal(rows("fake/b"), b_first)
    assert rows("fake/a")["detail"].tolist() == ["measured in run A2"]
    doc = (root / "docs" / "results.md").read_text()
    page = (root / "docs" / "results.html").read_text()
    assert "run A1" not in doc and "run A1" not in page
    assert doc.count("fake/a holds (measured in run A2)") == 1 and doc.count("fake/b holds (measured in run B1)") == 1
    assert "measured in run A2" in page and "measured in run B1" in page
    assert doc.index("## fake/a —") < doc.index("## fake/b —")  # catalog order, whatever the recording order
    assert (root / "records" / "ci" / "fake" / "b.html").exists() and (root / "records" / "ci" / "fake" / "b.md").exists()
    for path in (root / "docs" / "results.md", root / "docs" / "results.html"):  # the pages are the record's
        path.unlink()
    results_module.rebuild()
    assert (root / "docs" / "results.md").read_text() == doc
    assert "measured in run A2" in (root / "docs" / "results.html").read_text()


def test_entries_recorded_before_sections_were_stored_keep_theirs(checkout):
    """A record of the former layout (one command for the scale, no stored sections): recording another entry
    takes the former entry's sections from the pages it was recorded into, and its command from the scale's line."""
    root, reps, outcomes = checkout
    (root / "records").mkdir()
    pd.DataFrame([dict(reproduction="fake/a", claim="fake/a holds", holds=True, detail="old A", seconds=12.0,
                       machine="a 2-core CPU", date="2026-11-25", commit="abc1234")]).to_csv(root / "records" / "ci.csv",
                                                                                                index=False)
    (root / "docs" / "results.md").write_text(
        "# Reproduction results, scale ci\n\nGenerated by `fedbench reproduce all --scale ci --record engine.threads=1` "
        "on a 2-core CPU, 2026-11-25, commit abc1234.\n\n| reproduction | claims that hold | measured compute |\n"
        "|---|---|---|\n| fake/a | 1 / 1 | 12 s |\n\n## fake/a — Table T (scale ci)\n\n- [x] fake/a holds (old A)\n")
    old_section = ("<section>\n  <h2>fake/a: Table T (scale ci)</h2>\n  <p>the former page&#39;s section</p>\n"
                   "</section>")
    (root / "docs" / "results.html").write_text(f"<html><body><h1>old</h1>\n<section>\n  <h2>Overview</h2>\n</section>\n"
                                                f"{old_section}\n</body></html>")
    record(reps, outcomes, "fake/b", "run B1")
    doc = (root / "docs" / "results.md").read_text()
    page = (root / "docs" / "results.html").read_text()
    assert "- [x] fake/a holds (old A)" in doc and "fake/b holds (measured in run B1)" in doc
    assert old_section in page and "measured in run B1" in page
    assert rows("fake/a")["command"].tolist() == ["fedbench reproduce all --scale ci --record engine.threads=1"]
    assert "| fake/a | 1 / 1 | 12 s | a 2-core CPU | 2026-11-25 | abc1234 | `fedbench reproduce all" in doc


def test_rebuilding_the_pages_of_a_former_record_keeps_its_command(checkout):
    """scripts/rebuild_results_pages.py on a record of the former layout: the rebuilt pages no longer carry the
    scale's 'Generated by' line, so its command is kept in the record itself, and a second rebuild still shows it."""
    root, _, _ = checkout
    (root / "records").mkdir()
    pd.DataFrame([dict(reproduction="fake/a", claim="fake/a holds", holds=True, detail="old A", seconds=12.0,
                       machine="a 2-core CPU", date="2026-11-25", commit="abc1234")]).to_csv(root / "records" / "ci.csv",
                                                                                                index=False)
    (root / "docs" / "results.md").write_text(
        "# Reproduction results, scale ci\n\nGenerated by `fedbench reproduce all --scale ci --record` on a 2-core "
        "CPU.\n\n## fake/a — Table T (scale ci)\n\n- [x] fake/a holds (old A)\n")
    results_module.rebuild()
    results_module.rebuild()
    assert rows("fake/a")["command"].tolist() == ["fedbench reproduce all --scale ci --record"]
    assert "| abc1234 | `fedbench reproduce all --scale ci --record` |" in (root / "docs" / "results.md").read_text()


def test_record_is_refused_in_one_line_where_it_makes_no_sense(checkout, tmp_path, monkeypatch):
    from fedbench.core.errors import ConfigError

    root, reps, outcomes = checkout
    monkeypatch.setattr(results_module, "CHECKOUT", tmp_path / "not-a-checkout")
    trained = []
    monkeypatch.setattr(run_module, "reproduce", lambda *a, **k: trained.append(1))
    for args in (["fake/a", "--scale", "ci", "--record"], ["list", "--record"]):
        result = CliRunner().invoke(cli_app, ["reproduce", *args])
        error = result.exception
        assert isinstance(error, ConfigError) and error.exit_code == 2 and "\n" not in str(error), result.output
        assert "--record" in str(error)
    assert not trained  # refused before any training
    assert "not one (install fedbench with `pip install -e .` from a clone)" in str(
        CliRunner().invoke(cli_app, ["reproduce", "fake/a", "--record"]).exception)


def test_a_record_made_from_a_tree_that_differs_from_its_commit_says_so(checkout, monkeypatch):
    """The record's commit column names the tree it measured: a checkout with changes no commit holds (the record's
    own files aside) is '<sha>-dirty' (a GPU run recorded 7afc6d4 for a tree two commits ahead of it)."""
    import fedbench.tracking.recorder as recorder_module

    root, reps, outcomes = checkout
    monkeypatch.setattr(recorder_module, "git_commit", lambda: "abc1234def5678")
    asked = []
    monkeypatch.setattr(recorder_module, "tree_differs", lambda *outside: asked.append(outside) or True)
    record(reps, outcomes, "fake/a", "run A1")
    assert rows("fake/a")["commit"].tolist() == ["abc1234-dirty"]
    assert asked == [results_module.RECORD_FILES]
    monkeypatch.setattr(recorder_module, "tree_differs", lambda *outside: False)
    record(reps, outcomes, "fake/b", "run B1")
    assert rows("fake/b")["commit"].tolist() == ["abc1234"]


def test_tree_differs_counts_tracked_changes_outside_the_record_s_own_files(tmp_path):
    import subprocess

    from fedbench.tracking.recorder import tree_differs

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "docs").mkdir()
    (tmp_path / "code.py").write_text("a = 1\n")
    (tmp_path / "docs" / "results.md").write_text("old\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "c")
    assert not tree_differs("docs/results.md", root=tmp_path)
    (tmp_path / "docs" / "results.md").write_text("new record\n")
    (tmp_path / "untracked.txt").write_text("x")  # not part of any commit's tree
    assert not tree_differs("docs/results.md", root=tmp_path)
    assert tree_differs(root=tmp_path)  # the record's file counts when not set aside
    (tmp_path / "code.py").write_text("a = 2\n")
    assert tree_differs("docs/results.md", root=tmp_path)
    assert not tree_differs(root=tmp_path / "nowhere")
