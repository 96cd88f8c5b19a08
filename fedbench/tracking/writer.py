"""The MLflow record of a `fedbench run`, written by a process of its own.

Importing MLflow and its SQLite store (SQLAlchemy, alembic) costs a default run about as much as
importing torch, and its curves add pandas and matplotlib. `fedbench run` therefore starts a
writer process (`prestart`) before it imports torch: the writer imports MLflow while the run
imports torch, composes its config and loads its data; it opens the store and imports matplotlib
while the run warms up (engine.loop.warm_up), and idles while the timed rounds run. It records with
the same `Recorder` as a run in one process, so the record (params, tags, per-round metrics and
their time stamps, artifacts, status) is the same.

The run's process holds a `RemoteRecorder`, with `Recorder`'s interface. Every call waits for the
writer's answer, in order, so a store that fails (a full disk, a server gone) stops the run at the
same round with the same one-line error; only `check_reachable` returns at once (after probing a
server), its answer awaited by the next call, before the first round. A writer that dies is a
one-line StoreError too. The writer ignores Ctrl-C (the run ends it, marking the run KILLED through
the writer) and exits when the run's process closes its pipe, or dies.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fedbench.tracking.store import StoreError, one_line, probe_server, resolve_tracking_uri

_prestarted: Writer | None = None


def prestart() -> None:
    """Start the writer now, for the run this process is about to train (`take` hands it over)."""
    global _prestarted
    if _prestarted is None:
        _prestarted = Writer()


def take() -> Writer | None:
    """The prestarted writer, once; None when there is none (a run from Python, a sweep)."""
    global _prestarted
    writer, _prestarted = _prestarted, None
    return writer


def discard() -> None:
    """Stop a prestarted writer no run took (a refused config, `--cfg job`)."""
    writer = take()
    if writer is not None:
        writer.close()


class Writer:
    """The writer process and its two pipes: pickled calls in, pickled answers out."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # this fedbench, whatever the child's sys.path
        code = f"import sys; sys.path.insert(0, {root!r}); from fedbench.tracking.writer import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.used = False  # a call was sent: from then on the writer may be writing to the store
        self.awaiting = 0  # answers sent for but not yet read

    def send(self, method: str, *args: Any) -> None:
        self.used = True
        try:
            pickle.dump((method, args), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except OSError:
            raise self._gone() from None
        self.awaiting += 1

    def receive(self) -> Any:
        try:
            status, value = pickle.load(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            raise self._gone() from None
        finally:
            self.awaiting -= 1
        if status == "ok":
            return value
        raise _rebuilt(*value)

    def call(self, method: str, *args: Any) -> Any:
        while self.awaiting:  # an answer sent for earlier (check_reachable's) comes first
            self.receive()
        self.send(method, *args)
        return self.receive()

    def _gone(self) -> StoreError:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return StoreError(f"the MLflow writer process stopped (exit code {code})")

    def close(self) -> None:
        """Let the writer finish what it was asked and exit; one never asked anything is stopped at once."""
        if not self.used:
            self.proc.kill()
        else:
            try:
                while self.awaiting:
                    self.receive()
            except Exception:
                pass
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def _rebuilt(payload: bytes | None, text: str) -> BaseException:
    """The writer's exception, as raised there when it unpickles (FedbenchError and its kin do)."""
    try:
        exc = pickle.loads(payload) if payload is not None else None
    except Exception:
        exc = None
    return exc if isinstance(exc, BaseException) else StoreError(f"the MLflow writer failed: {text}")


def _light(run) -> SimpleNamespace | None:
    """What a run's process reads of an MLflow run (its id, status and tags), without MLflow."""
    if run is None:
        return None
    return SimpleNamespace(info=SimpleNamespace(run_id=run.info.run_id, status=run.info.status),
                           data=SimpleNamespace(tags=dict(run.data.tags)))


class RemoteRecorder:
    """`Recorder`'s interface in the run's process, answered by the writer (module docstring)."""

    def __init__(self, writer: Writer, cfg: DictConfig, flush_seconds: float = 5.0):
        self.writer = writer
        self.cfg = cfg
        self.uri = resolve_tracking_uri(cfg.tracking.get("uri"))
        self.flush_seconds = flush_seconds
        self._pending: list[tuple[dict[str, float], int]] = []
        self._last_flush = time.monotonic()
        self.run_id: str | None = None

    def check_reachable(self) -> None:
        """Probe a server at once; open the store in the writer, its failure raised by the next call."""
        probe_server(self.uri)
        self.writer.send("open", os.getcwd(), OmegaConf.to_container(self.cfg, resolve=True))

    def find_previous(self, config_hash: str):
        return self.writer.call("find_previous", config_hash)

    def finished_run(self, run_id: str):
        return self.writer.call("finished_run", run_id)

    def summary_of(self, run) -> dict[str, Any]:
        return self.writer.call("summary_of", run.info.run_id)

    def start(self, tags: dict[str, str], run_id: str | None = None, logged_through: int = 0) -> str:
        self.run_id = self.writer.call("start", tags, run_id, logged_through)
        return self.run_id

    def log_round(self, metrics: dict[str, float], force: bool = False) -> None:
        self._pending.append((dict(metrics), int(time.time() * 1000)))
        if force or time.monotonic() - self._last_flush > self.flush_seconds:
            self.flush()

    def _handed_over(self) -> list[tuple[dict[str, float], int]]:
        pending, self._pending = self._pending, []  # the writer's Recorder buffers them from here on
        return pending

    def flush(self) -> None:
        self.writer.call("flush", self._handed_over())
        self._last_flush = time.monotonic()

    def record_end(self, history: list[dict[str, float]]) -> None:
        self.writer.call("record_end", self._handed_over(), history)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.writer.call("set_tags", tags)

    def finish(self, history: list[dict[str, float]], status: str = "FINISHED", artifacts: bool = True) -> dict[str, Any]:
        return self.writer.call("finish", self._handed_over(), history, status, artifacts)

    def fail(self, round_: int, reason: str, status: str = "FAILED", quiet: bool = False) -> bool:
        if self.run_id is None:
            return False
        try:
            return self.writer.call("fail", self._handed_over(), round_, reason, status, quiet)
        except Exception as exc:  # the writer itself is gone
            if not quiet:
                print(f"fedbench: could not mark MLflow run {self.run_id} {status}: {one_line(exc)}", file=sys.stderr)
            return False


class _Served:
    """The writer's side: one Recorder, the calls of RemoteRecorder."""

    def __init__(self) -> None:
        self.recorder = None
        self.after: list = []  # imports for later calls, done between two calls

    def open(self, cwd: str, container: dict) -> None:
        from fedbench.tracking.recorder import Recorder

        os.chdir(cwd)  # the run's folder for a relative store (Hydra's job.chdir)
        cfg = OmegaConf.create(container)
        self.recorder = Recorder(cfg, flush_seconds=float("inf"))  # flushed when the run says so
        self.recorder.check_reachable()
        if cfg.tracking.get("artifacts", True):  # for the curves of `finish`, while the run warms up (never
            self.after.append(_import_pyplot)  # beside its timed rounds: the writer idles while they run)

    def find_previous(self, config_hash: str):
        return _light(self.recorder.find_previous(config_hash))

    def finished_run(self, run_id: str):
        return _light(self.recorder.finished_run(run_id))

    def summary_of(self, run_id: str) -> dict[str, Any]:
        return self.recorder.summary_of(self.recorder.client.get_run(run_id))

    def start(self, tags: dict[str, str], run_id: str | None, logged_through: int) -> str:
        return self.recorder.start(tags, run_id=run_id, logged_through=logged_through)

    def _buffer(self, rounds: list[tuple[dict[str, float], int]]) -> None:
        for metrics, stamp in rounds:
            self.recorder.log_round(metrics, stamp=stamp)

    def flush(self, rounds) -> None:
        self._buffer(rounds)
        self.recorder.flush()

    def record_end(self, rounds, history) -> None:
        self._buffer(rounds)
        self.recorder.record_end(history)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.recorder.set_tags(tags)

    def finish(self, rounds, history, status: str, artifacts: bool) -> dict[str, Any]:
        self._buffer(rounds)
        return self.recorder.finish(history, status=status, artifacts=artifacts)

    def fail(self, rounds, round_: int, reason: str, status: str, quiet: bool) -> bool:
        self._buffer(rounds)
        return self.recorder.fail(round_, reason, status=status, quiet=quiet)


def _import_pyplot() -> None:
    """matplotlib, and a first small figure drawn to memory: its fonts and renderer are then ready for
    the run's curves (tracking.plots, the same figure however many come before it)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2), layout="constrained")
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("round")
    fig.suptitle("warm-up")
    fig.savefig(io.BytesIO(), format="png", dpi=30, bbox_inches="tight")
    plt.close(fig)


def _answer(exc: BaseException) -> tuple[bytes | None, str]:
    try:
        payload = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)
    except Exception:
        payload = None
    return payload, one_line(exc)


def serve() -> None:
    """The writer process: answer calls from stdin until it closes."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # the run's (a process group's Ctrl-C, systemd's SIGTERM to
        signal.signal(signum, signal.SIG_IGN)   # every process): it marks the run KILLED through us, then closes us
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr; stdout carries the answers
    calls = sys.stdin.buffer
    served = _Served()
    from fedbench.core.secrets import install

    install()
    try:  # the imports `open` needs, before it comes
        from fedbench.tracking.store import quiet_libraries

        quiet_libraries()  # imports MLflow
        if not os.environ.get("MLFLOW_TRACKING_URI", "sqlite").startswith(("http", "databricks")):
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (the local store's, likely)
    except Exception:
        pass  # `open` meets the same error and answers it
    while True:
        try:
            method, args = pickle.load(calls)
        except (EOFError, OSError, pickle.UnpicklingError):
            break
        try:
            answer = ("ok", getattr(served, method)(*args))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the run, which raises it
            answer = ("error", _answer(exc))
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
        while served.after:
            served.after.pop(0)()
    answers.close()
    sys.stderr.flush()
    os._exit(0)  # nothing left to write: skip the interpreter's teardown of MLflow's modules
