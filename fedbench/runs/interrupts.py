"""Signals that end a run: Ctrl-C (SIGINT) and SIGTERM (what SLURM, `timeout`, systemd and
Kubernetes send) take one path. Outside training either raises `Interrupted`, a KeyboardInterrupt
that remembers its signal; during training the first one ends the run after the current round,
with a checkpoint of it, and a second one stops at once. The process exits 128 + the signal's
number (130, 143), as a shell reports a process killed by it."""

from __future__ import annotations

import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt raised for `signum` (every `except KeyboardInterrupt` handles both signals)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal behind an interrupt: Python's own KeyboardInterrupt is SIGINT's."""
    return getattr(exc, "signum", signal.SIGINT)


def exit_code(exc: BaseException) -> int:
    return 128 + signal_of(exc)


def describe(signum: int) -> str:
    """'Ctrl-C' or 'SIGTERM': how a message names what stopped the run."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _raise(signum, frame):
    raise Interrupted(signum)


def install() -> None:
    """SIGTERM raises Interrupted like Ctrl-C does, from now on (the process's start-up included)."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
                signal.signal(signum, _raise)


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
        if self.requested:
            raise Interrupted(self.signum)
        self.requested, self.signum = True, signum
        if not self.quiet:
            again = "Ctrl-C" if signum == signal.SIGINT else "signal"
            print(f"\nfedbench: {describe(signum)}: saving a checkpoint after this round ({again} again to stop now)",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> GracefulInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
