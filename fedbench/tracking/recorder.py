"""The MLflow record of one run: params, tags, per-round metrics, rounds-to-target, artifacts."""

from __future__ import annotations

import contextlib
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from fedbench.core.errors import FedbenchError, is_disk_full, write_failure
from fedbench.core.secrets import password_hint, redact
from fedbench.tracking.metric_rows import write_batch
from fedbench.tracking.plots import plot_curves, setting_title
from fedbench.tracking.store import (StoreError, bound_http_retries, one_attempt, one_line, open_store, probe_server,
                                     resolve_tracking_uri, unusable_store)
from fedbench.tracking.targets import format_rounds, rounds_to_target, target_key


def flatten_config(cfg: DictConfig) -> dict[str, str]:
    container = OmegaConf.to_container(cfg, resolve=True)
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = redact(str(value))[:6000]

    walk("", {k: v for k, v in container.items() if k != "hydra"})
    return out


# overrides the base of a run's name says already, and those that only place a run
NAMED = ("algorithm", "dataset", "partition", "seed", "tracking.", "hydra.", "engine.", "data.", "resume", "experiment",
         "scale")


def readable_run_name(cfg: DictConfig, overrides: str = "") -> str:
    """`fedavg-fmnist-dir0.1-s0`: algorithm, data set, partition (with its skew parameter), seed; then the
    run's other overrides (`eta_l=0.1 rounds=50`), so that the jobs of a grid have names of their own."""
    base = _base_name(cfg)
    extra = [o for o in overrides.split() if "=" in o and not o.lstrip("+~").startswith(NAMED)]
    return " ".join([base, *extra])[:250]


def _base_name(cfg: DictConfig) -> str:
    partition = str(cfg.partition.name)
    short = {"dirichlet": "dir", "dirichlet_balanced": "dirbal", "quantity_skew": "qskew", "label_k": "labels",
             "shards": "shards", "c_noniid": "c"}.get(partition, partition)
    skew = next((cfg.partition[k] for k in ("alpha", "c", "k", "shards_per_client", "beta") if k in cfg.partition), None)
    part = f"{short}{skew:g}" if isinstance(skew, (int, float)) and not isinstance(skew, bool) else short
    return f"{cfg.algorithm.name}-{cfg.dataset.name}-{part}-s{cfg.seed}"


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name in a container
        return "unknown"


def _public(tags: dict[str, str]) -> dict[str, str]:
    """Tags as recorded: no password of a store URI in any (core.secrets)."""
    return {k: redact(str(v)) for k, v in tags.items()}


def tags_of(run) -> dict[str, str]:
    return dict(run.data.tags)


def package_version() -> str:
    """The installed fedbench's version (its distribution's metadata); the package's own where it is not
    installed (a checkout on PYTHONPATH)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fedbench-bench")
    except PackageNotFoundError:
        import fedbench

        return fedbench.__version__


CHECKOUT = Path(__file__).resolve().parents[2]  # the source checkout fedbench runs from, where it is one


def _git(root: Path, *args: str) -> str | None:
    """git's output in the checkout `root`; None where `root` is no checkout (an installed wheel, whose folder may
    lie inside another repository: only the checkout's own .git counts) or git fails."""
    if not (root / ".git").exists():
        return None
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=root).stdout.strip()
    except Exception:
        return None


def git_commit() -> str:
    """The commit of the source checkout fedbench runs from; 'unknown' for an installed wheel."""
    return _git(CHECKOUT, "rev-parse", "HEAD") or "unknown"


def tree_differs(*outside: str, root: Path = CHECKOUT) -> bool:
    """Whether tracked files of the source checkout (`root`) differ from its commit (paths under `outside` not
    counted: a record's own files, written by the command that asks): a record that names the commit then names
    a tree no commit holds. False where there is no checkout (git_commit's 'unknown')."""
    return bool(_git(root, "status", "--porcelain", "--untracked-files=no", "--", ".",
                     *(f":(exclude){p}" for p in outside)))


VERSION_KEY = "fedbench_version"  # a tag and a param of every run


def store_call(method):
    """A Recorder method whose store failure (full disk under SQLite, a dead server) becomes one
    StoreError line instead of a traceback of sqlalchemy or HTTP internals."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except FedbenchError:
            raise
        except Exception as exc:
            self.store_failed = True
            if is_disk_full(exc) and self.uri.startswith("sqlite:///"):
                folder = Path(self.uri.removeprefix("sqlite:///")).parent
                raise StoreError(f"the MLflow store {self.uri} failed: {write_failure(exc, folder)} ({one_line(exc)})") from exc
            raise StoreError(f"the MLflow store {self.uri} failed: {one_line(exc)}") from exc

    return wrapper


class Drawing:
    """A run's metrics.csv and curves.png written into a temporary folder of its own by
    this process's drawing thread (a daemon: an interrupted process never waits for it), which draws
    what it is handed one drawing after another (a batched group's lanes end together: one thread, not
    one each, whose starts wait on the interpreter lock the others hold); `result()` waits and gives
    their paths, or raises what it raised; `close()` waits and removes the folder."""

    _queue: queue.SimpleQueue | None = None
    _pid = 0  # the process the thread runs in (a forked child inherits the queue, not the thread)
    _lock = threading.Lock()

    def __init__(self, history: list[dict[str, float]], title: str):
        self.folder = Path(tempfile.mkdtemp(prefix="fedbench-artifacts-"))
        self.paths: list[Path] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._drawer().put((self, history, title))

    @classmethod
    def _drawer(cls) -> queue.SimpleQueue:
        with cls._lock:
            if cls._queue is None or cls._pid != os.getpid():
                cls._queue, cls._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=cls._work, args=(cls._queue,), daemon=True, name="fedbench-drawing").start()
            return cls._queue

    @staticmethod
    def _work(todo: queue.SimpleQueue) -> None:
        while True:
            drawing, history, title = todo.get()
            try:
                drawing._draw(history, title)
            finally:
                drawing.done.set()

    def _draw(self, history, title: str) -> None:
        try:
            frame = pd.DataFrame(history)
            frame = frame[["round", *(c for c in frame if c != "round")]] if "round" in frame else frame  # a table's key first
            frame.to_csv(self.folder / "metrics.csv", index=False)
            self.paths.append(self.folder / "metrics.csv")
            png = plot_curves(frame, self.folder / "curves.png", title)
            if png is not None:
                self.paths.append(png)
        except BaseException as exc:  # noqa: BLE001 - raised again by result()
            self.error = exc

    def result(self) -> list[Path]:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.paths

    def close(self) -> None:
        self.done.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def check_no_links(artifact_uri: str, names: list[str]) -> None:
    """A local artifact folder holds no link where a run writes: its path is printed by every run, and a link
    planted at a file's name (or as the folder) led the run's artifacts onto another file."""
    from urllib.parse import unquote, urlparse

    if not artifact_uri.startswith("file:"):
        return
    folder = Path(unquote(urlparse(artifact_uri).path))
    for path in (folder.parent, folder, *(folder / name for name in names)):
        if path.is_symlink():
            raise StoreError(f"{path} is a link (to {os.readlink(path)}): a run writes its artifacts into files of its "
                             "own, never through a link; remove the link and resume the run")


class Recorder:
    """Buffers per-round metrics and writes them in batches (one MLflow call per flush)."""

    def __init__(self, cfg: DictConfig, flush_seconds: float = 5.0):
        self.cfg = cfg
        self.uri = resolve_tracking_uri(cfg.tracking.get("uri"))
        self.client = None
        self.flush_seconds = flush_seconds
        self._pending: list = []
        self._last_flush = time.monotonic()
        self.run_id: str | None = None
        self._skip_through = 0
        self.resumed = False  # continues a run of the store: its end may hold some of its record already
        self.artifact_uri: str | None = None  # fixed when the run is created
        self.targets: dict[float, int | None] | None = None  # rounds-to-target, once in the record (record_end)
        self.store_failed = False  # a store call failed: later ones are tried once (store.one_attempt)
        bound_http_retries(self.uri)

    def check_reachable(self) -> None:
        """Fail before training when the store cannot be reached (in seconds, not after retries)."""
        probe_server(self.uri)
        try:
            self.client, self.experiment_id = open_store(self.uri, self.cfg.tracking.experiment)
        except FedbenchError:
            raise
        except Exception as exc:
            raise unusable_store(self.uri, exc, password_hint(self.uri)) from None

    def find_previous(self, config_hash: str):
        """The newest run of this experiment with the same config hash, FINISHED ones first; or None."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.config_hash = '{config_hash}'",
            order_by=["attributes.start_time DESC"], max_results=50,
        )
        finished = [r for r in runs if r.info.status == "FINISHED"]
        return (finished or runs or [None])[0]

    def finished_run(self, run_id: str):
        """The run if it is in the store and FINISHED, else None."""
        try:
            run = self.client.get_run(run_id)
        except Exception:
            return None
        return run if run.info.status == "FINISHED" else None

    def summary_of(self, run) -> dict[str, Any]:
        """The summary of a finished run, read back from MLflow (for a skipped sweep job)."""
        metrics, rounds = run.data.metrics, int(self.cfg.rounds)
        accs = self.client.get_metric_history(run.info.run_id, "test_accuracy")
        return {
            "run_id": run.info.run_id, "status": run.info.status, "skipped": True,
            "final_accuracy": metrics.get("test_accuracy"),
            "best_accuracy": max((m.value for m in accs), default=None),
            "final_loss": metrics.get("test_loss"),
            "rounds": rounds, "wall_time": metrics.get("wall_time", 0.0),
            "eval_time": metrics.get("eval_time", 0.0), "tracking_uri": self.uri,
            "rounds_to_target": {
                float(t): (int(metrics[target_key(float(t))]) if target_key(float(t)) in metrics else None)
                for t in self.cfg.get("targets") or []
            },
        }

    def check_live(self, run_id: str) -> None:
        """A run (or its experiment) deleted in the store, whose folder remains: say so, and how to restore it
        (MLflow's delete is soft until `mlflow gc`), before any training (exit 2)."""
        from fedbench.core.errors import ConfigError

        try:
            run = self.client.get_run(run_id)
        except Exception:
            return  # not in this store at all: start() says which store to use
        restore = f"MLFLOW_TRACKING_URI={shlex.quote(self.uri)} mlflow"
        experiment = self.client.get_experiment(run.info.experiment_id)
        if experiment.lifecycle_stage == "deleted":  # its runs were deleted with it, and come back with it
            raise ConfigError(f"the MLflow experiment {experiment.name!r} of run {run_id}, which this checkpoint "
                              f"continues, was deleted in {self.uri}; restore it with: {restore} experiments restore "
                              f"--experiment-id {experiment.experiment_id}, then resume again")
        if run.info.lifecycle_stage == "deleted":
            raise ConfigError(f"MLflow run {run_id}, which this checkpoint continues, was deleted in {self.uri}; "
                              f"restore it with: {restore} runs restore --run-id {run_id}, then resume again")

    @store_call
    def start(self, tags: dict[str, str], run_id: str | None = None, logged_through: int = 0) -> str:
        from mlflow.entities import Param

        if run_id is not None:  # resuming: skip the rounds already in the record
            self.run_id, self.resumed = run_id, True
            self.check_live(run_id)
            try:
                self.client.update_run(run_id, status="RUNNING")
                logged = self.client.get_metric_history(run_id, "floats_up")
            except Exception:
                raise FedbenchError(
                    f"the checkpoint belongs to MLflow run {run_id}, which is not in {self.uri}; "
                    "set tracking.uri to the store the run was recorded in") from None
            for key in ("failure_round", "failure_reason"):  # the earlier failure is over
                if key in tags_of(self.client.get_run(run_id)):
                    self.client.delete_tag(run_id, key)
            # Rounds are flushed before each checkpoint, so the record holds at least the
            # checkpoint's rounds; rounds logged after it are recomputed identically but not re-logged.
            self._skip_through = max([logged_through, *(m.step for m in logged)])
            return run_id
        from mlflow.utils import mlflow_tags

        commit, version = git_commit(), package_version()  # one `git rev-parse` for both tags
        source = {mlflow_tags.MLFLOW_SOURCE_NAME: "fedbench run", mlflow_tags.MLFLOW_SOURCE_TYPE: "LOCAL",
                  mlflow_tags.MLFLOW_USER: _user(), VERSION_KEY: version}
        if commit != "unknown":  # a checkout; an installed wheel has its version only
            source[mlflow_tags.MLFLOW_GIT_COMMIT] = source["git_commit"] = commit
        name = redact(self.cfg.tracking.get("run_name") or readable_run_name(self.cfg, tags.get("overrides", "")))
        run = self.client.create_run(self.experiment_id, run_name=name, tags=_public({**source, **tags}))
        self.run_id, self.artifact_uri = run.info.run_id, run.info.artifact_uri
        params = [Param(k, v) for k, v in {**flatten_config(self.cfg), VERSION_KEY: version}.items()]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i : i + 100])
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(redact(OmegaConf.to_yaml(self.cfg, resolve=True)))
            self.client.log_artifact(self.run_id, str(path))
        return self.run_id

    def log_round(self, metrics: dict[str, float], force: bool = False, stamp: int | None = None) -> None:
        """Buffer one round's metrics, stamped now (or at `stamp`, milliseconds since the epoch)."""
        from mlflow.entities import Metric

        step = int(metrics["round"])
        if step <= self._skip_through:
            return
        stamp = int(time.time() * 1000) if stamp is None else stamp
        self._pending.append([Metric(k, float(v), stamp, step) for k, v in metrics.items() if k != "round"])
        if force or time.monotonic() - self._last_flush > self.flush_seconds:
            self.flush()

    @store_call
    def flush(self, metrics: list | None = None, tags: dict[str, str] | None = None) -> None:
        """Write the buffered rounds, whole rounds per batch (a batch is one transaction, so a crash
        never leaves half a round in the record), with `metrics` (as one more round) and `tags` in the
        last batch: one transaction for all where MLflow's limit of 1000 metrics a call allows."""
        from mlflow.entities import RunTag

        units = [*self._pending, *([metrics] if metrics else [])]
        batches: list[list] = [[]]
        for unit in units:
            if batches[-1] and len(batches[-1]) + len(unit) > 1000:
                batches.append([])
            batches[-1] += unit
        tagged = [RunTag(k, v) for k, v in _public(tags or {}).items()]
        if tagged and len(batches[-1]) + len(tagged) > 1000:  # MLflow's limit counts metrics and tags together
            batches.append([])
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            if batch or (last and tagged):
                write_batch(self.client, self.run_id, batch, tagged if last else [])
        self._pending = []
        self._last_flush = time.monotonic()

    @store_call
    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in _public(tags).items()])

    def end_rows(self, history: list[dict[str, float]]) -> tuple[list, dict[str, str]]:
        """Rounds-to-target of a run that trained `history`: the metrics to log and the tags; the values
        are kept in `targets` for the summary.
        Idempotent: a run killed after its end's first writes and resumed comes here again. Tags are
        overwritten in place; a metric would be appended, so one already logged is kept (only a resumed
        run can hold one: a run this process created has logged none)."""
        from mlflow.entities import Metric

        rounds = int(self.cfg.rounds)
        logged = self.client.get_run(self.run_id).data.metrics if self.resumed else {}
        targets, tags, metrics = {}, {}, []
        for t in self.cfg.get("targets") or []:
            reached = rounds_to_target(history, float(t))
            targets[float(t)] = reached
            key = target_key(float(t))
            tags[key] = format_rounds(reached, rounds)
            if reached is not None and key not in logged:
                metrics.append(Metric(key, reached, int(time.time() * 1000), 0))
        self.targets = targets
        return metrics, tags

    @store_call
    def record_end(self, history: list[dict[str, float]]) -> None:
        """The buffered rounds and the rounds-to-target of a run that trained `history`, in one store call
        where they fit (before its final checkpoint: the checkpoint never claims rounds the record lacks)."""
        self.flush(*self.end_rows(history))

    @store_call
    def finish(self, history: list[dict[str, float]], status: str = "FINISHED", artifacts: bool = True,
               drawn: Drawing | None = None) -> dict[str, Any]:
        """Log rounds-to-target (unless record_end did) and artifacts, end the run; returns the summary.
        The artifacts (metrics.csv, curves.png: CPU work) are drawn by the drawing thread (`drawn`, handed
        to it earlier, or here) while this one waits on the store's commits (disk)."""
        if drawn is None and artifacts and history:
            drawn = Drawing(history, setting_title(self.cfg))
        try:
            return self._finish(history, status, drawn)
        finally:
            if drawn is not None:
                drawn.close()

    def _finish(self, history: list[dict[str, float]], status: str, drawn: Drawing | None) -> dict[str, Any]:
        if self.targets is None:
            self.record_end(history)
        else:
            self.flush()
        summary: dict[str, Any] = {"run_id": self.run_id, "status": status, "rounds_to_target": self.targets}
        artifact_names = ["config.yaml"]
        if self.artifact_uri is None:  # a resumed run: its creation's
            self.artifact_uri = self.client.get_run(self.run_id).info.artifact_uri
        if drawn is not None:
            paths = drawn.result()
            check_no_links(self.artifact_uri, [path.name for path in paths])
            for path in paths:  # a file a call: MLflow stages each and renames it over its path (its
                self.client.log_artifact(self.run_id, str(path))  # log_artifacts copied through a planted link)
            artifact_names += [path.name for path in paths]
        summary["artifacts"] = artifact_names
        summary["artifact_uri"] = self.artifact_uri
        self.client.set_terminated(self.run_id, status=status)
        return summary

    def fail(self, round_: int, reason: str, status: str = "FAILED", quiet: bool = False) -> bool:
        """End the run as FAILED or KILLED with its reason; best effort, since the store itself may
        be what failed (the original error is the one to report). Returns whether it was marked."""
        if self.run_id is None:
            return False
        with one_attempt() if self.store_failed else contextlib.nullcontext():
            return self._mark(round_, reason, status, quiet)

    def _mark(self, round_: int, reason: str, status: str, quiet: bool) -> bool:
        try:
            self.flush()
        except Exception:
            self._pending = []
        try:
            self.set_tags({"failure_round": str(round_), "failure_reason": reason[:5000]})
            self.client.set_terminated(self.run_id, status=status)
            return True
        except Exception as exc:
            if not quiet:
                print(f"fedbench: could not mark MLflow run {self.run_id} {status}: {one_line(exc)}", file=sys.stderr)
            return False
