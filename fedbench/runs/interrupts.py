"""Signals that end a run: Ctrl-C (SIGINT) and SIGTERM (what SLURM, `timeout`, systemd and
Kubernetes send) take one path. Outside training either raises `Interrupted`, a KeyboardInterrupt
that remembers its signal; during training the first one ends the run after the current round,
with a checkpoint of it, and a second one stops at once. The process exits 128 + the signal's
number (130, 143), as a shell reports a process killed by it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)
STARTED: list[str] = []  # the run folders whose record this process started: what an interrupt leaves behind


def take_signals(handler) -> dict[int, object]:
    """Install `handler` for SIGNALS (the main thread only: Python's rule); the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in SIGNALS}


def give_back_signals(previous: dict[int, object]) -> dict[int, object]:
    """Put back the handlers `take_signals` replaced; an empty record to keep."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    return {}


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt raised for `signum` (every `except KeyboardInterrupt` handles both signals)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = signum


def interrupt_in(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The interrupt behind `exc`: Typer turns one into SystemExit(130) (click's Exit), losing its signal."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def signal_of(exc: BaseException) -> int:
    """The signal behind an interrupt: Python's own KeyboardInterrupt is SIGINT's."""
    return getattr(exc, "signum", signal.SIGINT)


def exit_code(exc: BaseException) -> int:
    return 128 + signal_of(exc)


def describe(signum: int) -> str:
    """'Ctrl-C' or 'SIGTERM': how a message names what stopped the run."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def report_where_stopped(signum: int, which: str, how: str, lines: list[str]) -> None:
    """The one error line of an interrupted grid, then where each of its runs stopped, a line each."""
    print(f"error: interrupted ({describe(signum)}); where each {which} stopped ({how}):\n  " + "\n  ".join(lines),
          file=sys.stderr, flush=True)


RECEIVED: list[int] = []  # the signals this process got: an error they caused is theirs


def received() -> Interrupted | None:
    """The interrupt behind an error that followed a signal (one raised inside a lazy import leaves the
    module half-made: an AttributeError, not the interrupt, is what surfaces)."""
    return Interrupted(RECEIVED[0]) if RECEIVED else None


def forget_signals() -> None:
    """A command's, a call's or a worker's job's signals are its own: not those an earlier one of this process took."""
    RECEIVED.clear()


def raise_received() -> None:
    """End the job now if a signal came whose interrupt never surfaced: torch's C start-up imports numpy and swallows
    every exception of that import, an Interrupted included (the run then trained to its end and exited 0)."""
    if (interrupt := received()) is not None:
        raise interrupt


@contextlib.contextmanager
def held_signals():
    """SIGINT and SIGTERM wait until the block ends, then take their course: a write to the record that must not stop
    half-made (MLflow's run created, its id not yet the run's: the run could not mark it KILLED, it stayed RUNNING)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame):
        if held:  # a second one: a store that does not answer must not hold the run
            RECEIVED.append(signum)
            raise Interrupted(signum)
        held.append(signum)
        print(f"\nfedbench: {describe(signum)}: stopping once the run's record is written ({describe(signum)} again to "
              "stop now)", file=sys.stderr, flush=True)

    previous = take_signals(hold)
    try:
        yield
    finally:
        give_back_signals(previous)
        for signum in held:
            signal.raise_signal(signum)  # to the handler the block held it from


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def importing(frame) -> bool:
    """Whether `frame` runs inside an import that fedbench's work started (a lazy import of torch, of MLflow). An
    exception raised there leaves the module half-made, and inside torch's C start-up (which imports numpy and
    registers Python callbacks) it is swallowed, so the run trains on, or it ends the process with SIGABRT (pybind11:
    "terminate called after throwing an instance of error_already_set"). An import further out than fedbench's own
    work (a user's module that runs an experiment as it is imported) is not one: its signal is not held."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        # this module's frames are the handler and its watcher's start, what the main thread runs as it holds one
        if code.co_name != "<module>" and code.co_filename.startswith(_PACKAGE) and code.co_filename != __file__:
            return False
        frame = frame.f_back
    return False


_HELD: set[int] = set()  # signals that came during an import, delivered again when it ends


def _after_import(signum: int) -> None:
    """Deliver `signum` to the main thread again once it has left every import (a thread watches its frames)."""
    import _thread
    import time

    main = threading.main_thread().ident

    def watch():
        while importing(sys._current_frames().get(main)):
            time.sleep(0.01)
        _HELD.discard(signum)
        _thread.interrupt_main(signum)  # runs whatever handler the main thread has for it by then

    _HELD.add(signum)
    threading.Thread(target=watch, name="fedbench-signal-after-import", daemon=True).start()


def _raise(signum, frame):
    if importing(frame):  # raised after the import instead, whole
        if signum not in _HELD:
            _after_import(signum)
        return
    RECEIVED.append(signum)
    raise Interrupted(signum)


def _exit_at_start(signum, frame):
    """During the CLI's imports: nothing started yet, and no `try` that could report an exception."""
    import os

    print(f"error: interrupted ({describe(signum)}) before a run started; nothing was checkpointed",
          file=sys.stderr, flush=True)
    os._exit(128 + signum)


def install(importing: bool = False) -> None:
    """SIGTERM raises Interrupted like Ctrl-C does, from now on; while the CLI is `importing`, either
    signal ends the process at once with its one line."""
    if threading.current_thread() is threading.main_thread():
        handlers = (signal.default_int_handler, signal.SIG_DFL, _raise, _exit_at_start)
        for signum in SIGNALS:
            if signal.getsignal(signum) in handlers:
                signal.signal(signum, _exit_at_start if importing else _raise)


class GracefulInterrupt:
    """The first SIGINT or SIGTERM ends the run after the current round, with a checkpoint of it;
    a second one stops at once (the last periodic checkpoint stays). A round interrupted half-way
    would leave client state half-updated, so checkpoints are only taken between rounds."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.requested = False
        self.signum = signal.SIGINT
        self._previous: dict[int, object] = {}

    def interrupt(self) -> Interrupted:
        """The exception that ends the run now that a stop was requested."""
        return Interrupted(self.signum)

    def _handler(self, signum, frame):
        RECEIVED.append(signum)
        if self.requested:
            raise Interrupted(self.signum)
        self.requested, self.signum = True, signum
        if not self.quiet:
            again = "Ctrl-C" if signum == signal.SIGINT else "signal"
            print(f"\nfedbench: {describe(signum)}: saving a checkpoint after this round ({again} again to stop now)",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> GracefulInterrupt:
        self._previous = take_signals(self._handler)
        return self

    def __exit__(self, *exc) -> None:
        self._previous = give_back_signals(self._previous)


def left_behind() -> str:
    """For an interrupt that no run reported: what this process started, honestly."""
    if not STARTED:
        return "before a run started; nothing was checkpointed"
    return (f"after {len(STARTED)} run(s) started; each continues from its last checkpoint with "
            f"fedbench resume <its folder> (the last: {STARTED[-1]})")


# A sweep whose jobs run in worker processes (hydra/launcher=joblib): the signal reaches the parent (and,
# from a terminal's Ctrl-C, the workers too); the parent forwards it to each worker, which checkpoints its
# run after the current round and leaves a marker saying where it stopped (runs.hydra_app).
STOP_ENV = "FEDBENCH_SWEEP_STOP"  # "<parent pid>:<stop file>", inherited by the sweep's worker processes
STOP_NAME = ".fedbench-stop"  # in the sweep folder, once a stop was asked: queued jobs do not start


def joblib_workers() -> list[int]:
    """The pids of joblib's (loky's) worker processes of this process, if any."""
    module = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(module, "_executor", None)
    return [int(pid) for pid in (getattr(executor, "_processes", None) or {})]


def takes_signal(pid: int, signum: int) -> bool:
    """Whether process `pid` handles or ignores `signum` (/proc's SigCgt and SigIgn masks). A joblib worker still
    starting has SIGTERM at its default and dies of it: the parent then got a TerminatedWorkerError, Hydra's traceback
    and exit 1 instead of its report (SIGTERM 4.5-5.7 s into a joblib sweep); it finds the stop file when its job
    starts instead. Where /proc cannot tell: yes."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    masks = dict(line.split(":", 1) for line in status.splitlines() if line.startswith(("SigCgt:", "SigIgn:")))
    if len(masks) < 2:
        return True
    return bool((int(masks["SigCgt"], 16) | int(masks["SigIgn"], 16)) >> (signum - 1) & 1)


class SweepStop:
    """In the parent of a joblib sweep: the first SIGINT or SIGTERM leaves the stop file, is forwarded to
    every worker, and the parent waits for the jobs to checkpoint and report; a second one is forwarded
    too (the workers stop at once, their last periodic checkpoint kept) and ends the parent."""

    def __init__(self, sweep_dir: Path, workers=joblib_workers, remote: bool = False):
        self.stop_file = Path(sweep_dir).absolute() / STOP_NAME
        self.workers = workers
        self.remote = remote  # the jobs are Ray tasks, maybe on other nodes: they read the stop file (StopWatch)
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SweepStop:
        self.stop_file.unlink(missing_ok=True)  # a relaunched sweep's jobs start
        os.environ[STOP_ENV] = f"{os.getpid()}:{self.stop_file}"
        self._previous = take_signals(self._handler)
        return self

    def __exit__(self, *exc) -> None:
        self._previous = give_back_signals(self._previous)
        os.environ.pop(STOP_ENV, None)
        if self.signum is not None:
            self.stop_file.unlink(missing_ok=True)

    def forward(self, signum: int) -> int:
        """Send `signum` to every worker that takes it; returns how many workers there were. The stop file is written
        first: a worker that arms itself after this looked at it finds the file when its job starts."""
        pids = self.workers()
        for pid in pids:
            try:
                if takes_signal(pid, signum):
                    os.kill(pid, signum)
            except OSError:  # ended meanwhile
                pass
        return len(pids)

    def ask(self, signum: int) -> None:
        """One line per signal in the stop file: a Ray task's StopWatch takes each as that signal."""
        with self.stop_file.open("a") as f:
            f.write(f"{signum}\n")

    def _handler(self, signum, frame):
        if self.signum is not None:
            self.ask(signum)
            self.forward(signum)
            raise Interrupted(self.signum)
        if not self.remote and not self.workers():  # none (yet), or the jobs run in this process (n_jobs=1)
            RECEIVED.append(signum)
            raise Interrupted(signum)
        self.signum = signum
        self.ask(signum)
        self.forward(signum)
        print(f"\nfedbench: {describe(signum)}: each running job saves a checkpoint after its current round and no "
              "other starts; waiting for them (signal again to stop now)", file=sys.stderr, flush=True)


def sweep_stop_file() -> Path | None:
    """In a worker process of a joblib sweep: the sweep's stop file (None in any other process)."""
    value = os.environ.get(STOP_ENV, "")
    pid, _, path = value.partition(":")
    if not path or not pid.isdigit() or int(pid) == os.getpid():
        return None
    return Path(path)


def arm_worker(armed: bool) -> None:
    """A worker takes a signal as an interrupt while it runs a job (armed) and ignores it between jobs,
    where it would end the worker process and, with it, the pool the other jobs run in. A worker started
    with the signals blocked (shielded_starts) gets the ones that came meanwhile here, armed."""
    if armed:
        forget_signals()
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _raise if armed else signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


@contextlib.contextmanager
def shielded_starts():
    """Worker processes started inside (from this thread) take no signal until arm_worker unblocks them: SIGNALS
    are blocked in this thread, and a child inherits the mask over fork and exec. A signal that reaches the
    parent meanwhile waits until the block ends, it is not lost."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _shielded(start):
    """`start` (a function that forks and execs a worker) inside shielded_starts."""
    import functools

    @functools.wraps(start)
    def started(*args, **kwargs):
        with shielded_starts():
            return start(*args, **kwargs)

    started.shielded = True
    return started


def shield_joblib_workers() -> None:
    """A terminal's Ctrl-C goes to every process of its foreground group: a joblib (loky) worker still starting
    (importing torch to unpickle its job) or waiting for one died of the KeyboardInterrupt, and the parent printed
    joblib's BrokenProcessPool or TerminatedWorkerError through Hydra and exited 1. Loky's workers are started
    here with the signals blocked until their job arms them; the parent forwards its signal to the workers
    that take it (SweepStop), and a worker still starting finds the stop file when its job starts.
    A loky without this start function (another version) keeps its own start, as before."""
    try:
        from joblib.externals.loky.backend import fork_exec as loky_start
    except ImportError:
        return
    start = getattr(loky_start, "fork_exec", None)
    if callable(start) and not getattr(start, "shielded", False):
        loky_start.fork_exec = _shielded(start)


# A sweep whose jobs are Ray tasks (hydra/launcher=ray_cluster, the batched launcher's Ray path): the parent cannot
# signal a process on another node, so it writes each signal into the stop file on the shared sweep folder
# (SweepStop with remote=True) and a thread of the task turns it into that signal here.
def in_ray_task() -> bool:
    """Whether this process runs a Ray task now (a Ray worker; the driver has no task)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    try:
        return ray.get_runtime_context().get_task_id() is not None
    except Exception:  # noqa: BLE001 - not inside Ray after all
        return False


class StopWatch:
    """In a Ray task of a sweep: each signal the parent wrote into `stop_file` runs this process's handler for it
    (_thread.interrupt_main, in the main thread where the task trains): the first checkpoints the run after its
    current round (GracefulInterrupt), a second stops at once. Outside training either raises Interrupted, as in
    a joblib worker (arm_worker); the task's own handlers (Ray's) are back when it ends."""

    def __init__(self, stop_file: Path, poll: float = 0.2):
        self.stop_file = Path(stop_file)
        self.poll = poll
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopWatch:
        forget_signals()
        self._previous = take_signals(_raise)
        self._thread = threading.Thread(target=self._watch, name="fedbench-stop-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._previous = give_back_signals(self._previous)

    def _watch(self) -> None:
        known = {int(s) for s in SIGNALS}
        seen = 0
        while not self._done.wait(self.poll):
            try:
                asked = self.stop_file.read_text().split()
            except OSError:  # not (yet) asked
                continue
            for value in asked[seen:]:
                if value.isdigit() and int(value) in known:
                    import _thread

                    _thread.interrupt_main(int(value))
            seen = max(seen, len(asked))
