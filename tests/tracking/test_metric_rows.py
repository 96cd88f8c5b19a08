"""tracking.metric_rows writes what MLflow's log_batch writes: the same metric rows, the same latest metrics,
the same tags, the same refusals, on the same store; and it is the path taken on a SQL store. It reads back
what MLflow's get_metric_history reads, many runs a query."""

from __future__ import annotations

import contextlib
import math
import random

import pytest


@pytest.fixture()
def client(tmp_path):
    import logging

    from mlflow.tracking import MlflowClient

    logging.getLogger("alembic").setLevel(logging.WARNING)
    c = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    c.experiment = c.create_experiment("e")
    return c


def batches(seed: int) -> list[tuple[list, list]]:
    """Batches of metrics and tags that reach every rule: steps out of order, repeated (step, timestamp) with other
    values, a batch's repeated metric (rows of earlier batches are not repeated: see the next test), NaN and infinities, a tag set twice in one batch and overwritten later, a
    value longer than MLflow keeps."""
    from mlflow.entities import Metric, RunTag

    rng = random.Random(seed)
    values = [0.5, -1.0, 2.0, math.nan, math.inf, -math.inf, 1e-300, 3.0]
    out = []
    for b in range(6):
        metrics = [Metric(rng.choice("abcd"), rng.choice(values), 1000 + 10 * b + rng.randrange(3), rng.randrange(0, 5))
                   for _ in range(rng.randrange(1, 40))]
        metrics += metrics[:3]  # repeated in the batch
        tags = [RunTag(f"t{rng.randrange(3)}", f"v{b}-{i}") for i in range(rng.randrange(0, 3))]
        if b == 4:
            tags.append(RunTag("long", "x" * 9000))
        out.append((metrics, tags))
    return out


def record(client, run_id: str) -> dict:
    """Everything of a run's record that a batch writes, read back through MLflow."""
    run = client.get_run(run_id)
    history = {k: sorted((m.step, m.timestamp, repr(m.value)) for m in client.get_metric_history(run_id, k))
               for k in run.data.metrics}
    latest = {k: repr(v) for k, v in run.data.metrics.items()}
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")}
    return {"history": history, "latest": latest, "tags": tags}


@pytest.mark.parametrize("seed", range(4))
def test_the_rows_are_those_log_batch_writes(client, seed, monkeypatch):
    from fedbench.tracking import metric_rows

    ours, theirs = (client.create_run(client.experiment).info.run_id for _ in range(2))
    calls = []
    log_batch = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda *a, **k: calls.append(k) or log_batch(*a, **k))
    for metrics, tags in batches(seed):
        metric_rows.write_batch(client, ours, metrics, tags)
    assert calls == [], "the SQL store's batches must not take log_batch"
    for metrics, tags in batches(seed):
        log_batch(theirs, metrics=metrics, tags=tags)
    assert record(client, ours) == record(client, theirs)
    assert record(client, ours)["history"], "nothing was compared"


def test_a_metric_already_in_the_store_is_written_as_log_batch_writes_it(client):
    """A row the store holds (a resumed run logging a round again) violates the table's key: the transaction
    rolls back and log_batch, which skips such rows, writes the batch."""
    from mlflow.entities import Metric

    from fedbench.tracking import metric_rows

    ours, theirs = (client.create_run(client.experiment).info.run_id for _ in range(2))
    first = [Metric("a", 1.0, 5, 1), Metric("a", 2.0, 6, 2)]
    again = [Metric("a", 2.0, 6, 2), Metric("a", 3.0, 7, 3)]
    for batch in (first, again):
        metric_rows.write_batch(client, ours, batch)
        client.log_batch(theirs, metrics=batch)
    assert record(client, ours) == record(client, theirs)
    assert [m.step for m in client.get_metric_history(ours, "a")] == [1, 2, 3]


@pytest.mark.parametrize("case", ["deleted run", "unknown run", "bad name", "finished run"])
def test_what_log_batch_refuses_is_refused_with_its_error(client, case):
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    from fedbench.tracking import metric_rows

    run_id = client.create_run(client.experiment).info.run_id
    key = "a/../b" if case == "bad name" else "a"
    if case == "deleted run":
        client.delete_run(run_id)
    if case == "unknown run":
        run_id = "0" * 32
    if case == "finished run":  # MLflow takes metrics on an ended run: so must this
        client.set_terminated(run_id)
        metric_rows.write_batch(client, run_id, [Metric(key, 1.0, 1, 1)])
        assert client.get_run(run_id).data.metrics == {"a": 1.0}
        return
    with pytest.raises(MlflowException) as ours:
        metric_rows.write_batch(client, run_id, [Metric(key, 1.0, 1, 1)])
    with pytest.raises(MlflowException) as theirs:
        client.log_batch(run_id, metrics=[Metric(key, 1.0, 1, 1)])
    assert str(ours.value) == str(theirs.value)


def test_a_failing_transaction_leaves_nothing_and_the_error_is_log_batch_s(client, monkeypatch):
    """A full disk under the store: the bulk insert fails and rolls back; log_batch then meets the same disk and
    its error is the one raised (tracking.recorder turns it into one line)."""
    from mlflow.entities import Metric
    from sqlalchemy.exc import OperationalError

    from fedbench.tracking import metric_rows

    run_id = client.create_run(client.experiment).info.run_id

    def full(*args, **kwargs):
        raise OperationalError("INSERT INTO metrics ...", {}, Exception("database or disk is full"))

    store = metric_rows.sql_store(client)
    maker, reached = store.ManagedSessionMaker, []

    @contextlib.contextmanager
    def failing_after_the_insert(*args, **kwargs):  # the metric rows are in; the latest ones fail
        with maker(*args, **kwargs) as session:
            session.add = lambda row: reached.append(1) or full()
            yield session

    monkeypatch.setattr(store, "ManagedSessionMaker", failing_after_the_insert)
    monkeypatch.setattr(client, "log_batch", full)
    with pytest.raises(OperationalError, match="disk is full"):
        metric_rows.write_batch(client, run_id, [Metric("a", 1.0, 1, 1)])
    assert reached == [1]
    monkeypatch.undo()
    assert client.get_metric_history(run_id, "a") == [] and client.get_run(run_id).data.metrics == {}


def test_a_server_store_takes_log_batch(client, monkeypatch):
    from fedbench.tracking import metric_rows

    monkeypatch.setattr(type(client._tracking_client), "store", property(lambda self: object()))
    assert metric_rows.sql_store(client) is None


def test_histories_read_many_runs_a_query_are_what_mlflow_reads_run_by_run(client, monkeypatch):
    """Every run's rows of a key in MLflow's order (timestamp, step, value), repeated steps, NaN and infinities
    as MLflow gives them back, a run without the key, runs over several queries; no per-run read on a SQL store,
    and the client's per-run read where the query fails or the store has no SQL rows."""
    from fedbench.tracking import metric_rows

    runs = [client.create_run(client.experiment).info.run_id for _ in range(5)]
    for i, run_id in enumerate(runs[:4]):  # the fifth logs nothing
        for metrics, tags in batches(10 + i):
            client.log_batch(run_id, metrics=metrics, tags=tags)
    theirs = {key: {r: [(m.step, repr(m.value)) for m in client.get_metric_history(r, key)] for r in runs}
              for key in ("a", "b", "c", "d", "never logged")}
    assert sum(map(len, theirs["a"].values())) > 20 and any("nan" in v for rows in theirs["a"].values() for _, v in rows)

    def shown(histories):
        return {r: [(step, repr(value)) for step, value in rows] for r, rows in histories.items()}

    monkeypatch.setattr(metric_rows, "RUNS_PER_QUERY", 2)  # three queries for five runs
    per_run = client.get_metric_history
    monkeypatch.setattr(client, "get_metric_history", lambda *a, **k: pytest.fail("read run by run"))
    for key, rows in theirs.items():
        assert shown(metric_rows.read_histories(client, runs, key)) == rows
    monkeypatch.setattr(client, "get_metric_history", per_run)
    monkeypatch.setattr(metric_rows, "_select_rows", lambda *a: 1 / 0)
    assert shown(metric_rows.read_histories(client, runs, "a")) == theirs["a"]
    monkeypatch.setattr(metric_rows, "sql_store", lambda client: None)
    assert shown(metric_rows.read_histories(client, runs, "b")) == theirs["b"]
