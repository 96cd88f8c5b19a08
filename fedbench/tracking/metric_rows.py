"""A run's metric rows written as MLflow's SQL store writes them, and read back as it reads them, at the
cost of the rows.

MLflow's `log_batch` on its SQL store builds one ORM object per metric row and flushes them through
SQLAlchemy's unit of work: ~65-80 us a row here, which made the record, not the training, the larger
cost of a long grid (7 metrics a round, hundreds of rounds, hundreds of runs). `write_batch` writes
the same rows in one transaction as one multi-row INSERT into the store's own `metrics` table, then
moves the `latest_metrics` rows forward by MLflow's own rule (the greatest (step, timestamp, value)):
what `log_batch` would leave in the store, bit for bit (tests/tracking/test_metric_rows.py compares
them through MlflowClient). Anything else (a tracking server, a table whose columns are not the ones
this writes, a duplicate row, a deleted run, an MLflow without these row classes) rolls back and takes
`log_batch`, whose checks and errors then apply as before.

`read_histories` reads a metric's rows of many runs in one query of the row values: MLflow's
`get_metric_history` reads one run a call and builds an ORM object and an entity per row, so a report
on 60 runs x 2,000 rounds spent 4 s there (scripts/bench_report.py measures both).
"""

from __future__ import annotations

import functools
from typing import Any

# the columns this module writes; a store whose tables differ (another MLflow schema) takes log_batch
METRIC_COLUMNS = {"key", "value", "timestamp", "run_uuid", "step", "is_nan"}
LATEST_COLUMNS = {"key", "value", "timestamp", "step", "is_nan", "run_uuid"}


@functools.cache
def _tables_known() -> bool:
    """Whether this MLflow's row classes have the columns this module writes (fixed for the process)."""
    try:
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
    except ImportError:
        return False
    return ({c.name for c in SqlMetric.__table__.columns} == METRIC_COLUMNS
            and {c.name for c in SqlLatestMetric.__table__.columns} == LATEST_COLUMNS)


def sql_store(client) -> Any | None:
    """MLflow's SQL store behind `client` when its tables are the ones this module writes, else None."""
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = client._tracking_client.store
    except (ImportError, AttributeError):
        return None
    if not isinstance(store, SqlAlchemyStore) or not hasattr(store, "ManagedSessionMaker") or not _tables_known():
        return None
    return store


def _recency(step, timestamp, value) -> tuple:
    """MLflow's order of a key's rows for its latest metric."""
    return step, timestamp, value


def write_batch(client, run_id: str, metrics: list, tags: list = ()) -> None:
    """Append `metrics` (mlflow.entities.Metric) to run `run_id` and set its `tags` (RunTag), in one
    transaction, as `client.log_batch(run_id, metrics=metrics, tags=tags)` would."""
    if not metrics and not tags:
        return
    store = sql_store(client)
    if store is not None and not any(getattr(m, "model_id", None) for m in metrics) \
            and not any(t.key.startswith("mlflow.") for t in tags):  # MLflow's own tags have side effects
        try:
            _insert(store, run_id, metrics, tags)
            return
        except Exception:  # noqa: BLE001 - rolled back: log_batch writes (or refuses) this batch as MLflow does
            pass
    client.log_batch(run_id, metrics=metrics, tags=tags)


def _insert(store, run_id: str, metrics: list, tags: list) -> None:
    from mlflow.entities import LifecycleStage
    from mlflow.store.tracking.dbmodels.models import (
        SqlLatestMetric,
        SqlMetric,
        SqlRun,
        SqlTag,
    )
    from mlflow.utils.validation import _validate_metric, _validate_tag
    from sqlalchemy import insert, select

    rows, seen, keys = [], set(), set()
    for m in metrics:
        if m.key not in keys:  # a name MLflow refuses is refused by log_batch, with its message
            _validate_metric(m.key, m.value, m.timestamp, m.step)
            keys.add(m.key)
        is_nan, value = store.sanitize_metric_value(float(m.value))
        identity = (m.key, value, is_nan, int(m.timestamp), int(m.step))  # the table's key: log_batch keeps one row
        if identity in seen:
            continue
        seen.add(identity)
        rows.append({"run_uuid": run_id, "key": m.key, "value": value, "timestamp": int(m.timestamp),
                     "step": int(m.step), "is_nan": is_nan})
    newest: dict[str, dict] = {}  # per key, the batch's latest row by MLflow's rule
    for row in rows:
        best = newest.get(row["key"])
        if best is None or _recency(row["step"], row["timestamp"], row["value"]) > _recency(
                best["step"], best["timestamp"], best["value"]):
            newest[row["key"]] = row
    try:
        transaction = store.ManagedSessionMaker(read_only=False)
    except TypeError:  # an MLflow before read-only sessions
        transaction = store.ManagedSessionMaker()
    with transaction as session:  # committed whole or not at all
        stage = session.execute(select(SqlRun.lifecycle_stage).where(SqlRun.run_uuid == run_id)).scalar_one()
        if stage != LifecycleStage.ACTIVE:
            raise ValueError(f"run {run_id} is {stage}")  # log_batch gives MLflow's own error
        if rows:
            session.execute(insert(SqlMetric), rows)
        held = {r.key: r for r in session.execute(select(SqlLatestMetric).where(
            SqlLatestMetric.run_uuid == run_id, SqlLatestMetric.key.in_(sorted(newest)))).scalars()}
        for key, row in newest.items():
            old = held.get(key)
            if old is None:
                session.add(SqlLatestMetric(**row))
            elif _recency(row["step"], row["timestamp"], row["value"]) > _recency(old.step, old.timestamp, old.value):
                old.value, old.step, old.timestamp, old.is_nan = row["value"], row["step"], row["timestamp"], row["is_nan"]
        if tags:
            final = {}  # a key given twice: its last value, as log_batch
            for t in tags:
                checked = _validate_tag(t.key, t.value)  # MLflow truncates a long value
                final[checked.key] = checked.value
            present = {r.key: r for r in session.execute(select(SqlTag).where(
                SqlTag.run_uuid == run_id, SqlTag.key.in_(sorted(final)))).scalars()}
            for key, value in final.items():
                if key in present:
                    present[key].value = value
                else:
                    session.add(SqlTag(run_uuid=run_id, key=key, value=value))


RUNS_PER_QUERY = 500  # run ids bound in one query (SQLite's old limit is 999 variables)


def read_histories(client, run_ids: list[str], key: str) -> dict[str, list[tuple[int, float]]]:
    """Each run's rows of metric `key` as (step, value), in the order and with the values that
    `client.get_metric_history(run_id, key)` gives (timestamp, step, value; NaN for a stored NaN). Any
    store but MLflow's SQL store, or a query that fails, is read run by run through the client."""
    store = sql_store(client)
    if store is not None:
        try:
            return _select_rows(store, list(run_ids), key)
        except Exception:  # noqa: BLE001 - the client reads it, and reports what fails, as MLflow does
            pass
    return {run_id: [(m.step, m.value) for m in client.get_metric_history(run_id, key)] for run_id in run_ids}


def _select_rows(store, run_ids: list[str], key: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.store.tracking.dbmodels.models import SqlMetric
    from sqlalchemy import select

    rows: dict[str, list[tuple[int, float]]] = {run_id: [] for run_id in run_ids}
    with store.ManagedSessionMaker() as session:
        for first in range(0, len(run_ids), RUNS_PER_QUERY):
            query = (select(SqlMetric.run_uuid, SqlMetric.step, SqlMetric.value, SqlMetric.is_nan)
                     .where(SqlMetric.key == key, SqlMetric.run_uuid.in_(run_ids[first:first + RUNS_PER_QUERY]))
                     .order_by(SqlMetric.run_uuid, SqlMetric.timestamp, SqlMetric.step, SqlMetric.value))
            for run_id, step, value, is_nan in session.execute(query):
                rows[run_id].append((step, float("nan") if is_nan else value))
    return rows
