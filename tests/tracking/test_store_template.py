"""A new SQLite store is a copy of the empty store MLflow's migrations make, made once per machine
(fedbench.tracking.store_template): the same store as MLflow's, and MLflow's own where no template can be had."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from fedbench.tracking.store import client_for, ensure_experiment, open_store
from fedbench.tracking.store_template import is_template, seed_new_store, template_path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def contents(db) -> tuple[list, dict]:
    """A store's schema and rows, less what differs between two stores MLflow itself makes: the order of a
    table's constraints (it follows Python's string hashing) and the times rows were written."""
    con = sqlite3.connect(db)
    try:
        schema = sorted((kind, name, sorted((sql or "").replace(",", "\n").splitlines()))
                        for kind, name, sql in con.execute("SELECT type, name, sql FROM sqlite_master"))
        rows = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cursor = con.execute(f'SELECT * FROM "{table}"')
            kept = [i for i, d in enumerate(cursor.description) if "time" not in d[0]]
            rows[table] = sorted((tuple(r[i] for i in kept) for r in cursor), key=repr)
        return schema, rows
    finally:
        con.close()


def record_one_run(uri: str, opened=None) -> None:
    """One run with a param and a metric, into the store `opened` (client, experiment id), else open_store's."""
    client, experiment = opened or open_store(uri, "e")
    run = client.create_run(experiment, run_name="r")
    client.log_param(run.info.run_id, "p", 1)
    client.log_metric(run.info.run_id, "accuracy", 0.5, step=1)
    client.set_terminated(run.info.run_id)


def test_a_new_store_is_the_store_mlflow_makes(cache, tmp_path):
    ours, theirs = tmp_path / "ours" / "mlflow.db", tmp_path / "theirs" / "mlflow.db"
    theirs.parent.mkdir()
    record_one_run(f"sqlite:///{ours}")
    assert template_path().is_file()  # the store was copied from it
    client = client_for(f"sqlite:///{theirs}")  # MLflow's own migrations
    record_one_run(f"sqlite:///{theirs}", (client, ensure_experiment(client, "e", f"sqlite:///{theirs}")))
    schema, rows = contents(ours)
    their_schema, their_rows = contents(theirs)
    assert schema == their_schema
    run_ids = {r.info.run_id for uri in (ours, theirs) for r in client_for(f"sqlite:///{uri}").search_runs(["1"])}
    assert len(run_ids) == 2
    def mask(table):  # a run's id, and its artifact folder, named by it
        def masked(v):
            for run_id in run_ids:
                v = v.replace(run_id, "<run>") if isinstance(v, str) else v
            return v
        return [tuple(masked(v) for v in row) for row in table]
    assert {t: mask(r) for t, r in rows.items()} == {t: mask(r) for t, r in their_rows.items()}
    assert stat.S_IMODE(ours.stat().st_mode) == stat.S_IMODE(theirs.stat().st_mode)


def test_a_store_made_from_the_template_runs_no_migration(cache, tmp_path, monkeypatch):
    record_one_run(f"sqlite:///{tmp_path}/first.db")
    import mlflow.store.db.utils

    def migrations(engine):
        raise AssertionError("a store was migrated from nothing again")

    monkeypatch.setattr(mlflow.store.db.utils, "_initialize_tables", migrations)
    record_one_run(f"sqlite:///{tmp_path}/second.db")
    runs = client_for(f"sqlite:///{tmp_path}/second.db").search_runs(["1"])
    assert [(r.data.params, r.data.metrics) for r in runs] == [({"p": "1"}, {"accuracy": 0.5})]


@pytest.mark.parametrize("template", ["a view", "an experiment", "not sqlite", "a damaged page", "writable by others"])
def test_a_template_that_is_not_an_empty_store_is_made_again(cache, tmp_path, template):
    path = template_path()
    path.parent.mkdir(parents=True, mode=0o700)
    if template == "writable by others":
        record_one_run(f"sqlite:///{tmp_path}/first.db")  # a template as it is made
        path.chmod(0o666)  # another user could have written in it
        assert not is_template(path)
        path.chmod(0o600)
        assert is_template(path)
        path.chmod(0o666)
    elif template == "a damaged page":
        record_one_run(f"sqlite:///{tmp_path}/first.db")  # a template as it is made, then one of its pages damaged
        data = bytearray(path.read_bytes())
        data[-4096:] = b"Z" * 4096  # an index's page: the counts is_template reads still read
        path.write_bytes(bytes(data))
        assert not is_template(path)
    elif template == "not sqlite":
        path.write_bytes(b"not a database " * 100)
    else:
        record_one_run(f"sqlite:///{path}")  # a whole store, with an experiment and a run
        if template == "a view":
            con = sqlite3.connect(path)
            con.execute("DELETE FROM experiments")
            con.execute("CREATE VIEW v AS SELECT 1")
            con.commit()
            con.close()
    record_one_run(f"sqlite:///{tmp_path}/store.db")
    schema, rows = contents(tmp_path / "store.db")
    assert "view" not in {kind for kind, _, _ in schema}
    assert sorted(name for _, name, *_ in rows["experiments"]) == ["Default", "e"]
    assert len(rows["runs"]) == 1
    remade = contents(path)
    assert remade[1]["experiments"] == [] and "view" not in {kind for kind, _, _ in remade[0]}  # made again, empty
    assert is_template(path) and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_without_a_usable_cache_folder_mlflow_makes_the_store(tmp_path, monkeypatch):
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a file"))
    record_one_run(f"sqlite:///{tmp_path}/store.db")
    assert len(contents(tmp_path / "store.db")[1]["runs"]) == 1


def test_a_file_already_at_the_path_is_left_alone(cache, tmp_path):
    for existing in (b"", b"someone's file"):
        db = tmp_path / "store.db"
        db.write_bytes(existing)
        seed_new_store(db)
        assert db.read_bytes() == existing
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "nowhere.db")
    seed_new_store(link)
    assert link.is_symlink() and not (tmp_path / "nowhere.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.db", "store.db"]


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a folder to another user")
@pytest.mark.parametrize("made", [False, True])
def test_no_template_is_made_or_used_in_another_users_cache_folder(tmp_path, monkeypatch, made):
    """`sudo fedbench run` with the invoking user's HOME: nothing of root's is left in that user's folders."""
    home = tmp_path / "home"
    (home / "fedbench").mkdir(parents=True) if made else home.mkdir()
    for folder in (home, home / "fedbench") if made else (home,):
        os.chown(folder, 65534, 65534)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    record_one_run(f"sqlite:///{tmp_path}/store.db")
    assert len(contents(tmp_path / "store.db")[1]["runs"]) == 1
    assert [p.name for p in home.rglob("*")] == (["fedbench"] if made else [])


def test_a_relative_cache_folder_is_not_the_folder_the_command_runs_in(tmp_path, monkeypatch):
    from fedbench.tracking.store_template import cache_folder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert cache_folder() == tmp_path / "home" / ".cache" / "fedbench"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "fedbench"


def make_store(cache: str, db: str) -> int:
    """One process's new store, with the cache folder given (a spawned worker's environment)."""
    os.environ["XDG_CACHE_HOME"] = cache
    record_one_run(f"sqlite:///{db}")
    return len(contents(db)[1]["runs"])


@pytest.mark.slow  # four spawned processes
def test_processes_that_make_the_template_at_once_each_get_a_whole_store(tmp_path):
    """No template yet and four new stores at once: each process may make the template; every store is whole, the
    template is one, and nothing else is left in the cache folder."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cache = tmp_path / "cache"
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        counts = list(pool.map(make_store, [str(cache)] * 4, [str(tmp_path / f"store{i}.db") for i in range(4)]))
    assert counts == [1, 1, 1, 1]
    assert [p.name for p in (cache / "fedbench").iterdir()] == [template_path().name]
