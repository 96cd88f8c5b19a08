"""The `fedbench` command. Every sub-command lives in a module of this package with an
`attach(root)` that adds it to the root command; heavy imports wait until a command runs, so
`fedbench --help` and `fedbench list` start without torch."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import Annotated, NoReturn

import click
import typer
from typer.core import TyperGroup

from fedbench import __version__
from fedbench.cli import attack, data, listing, plot, report, reproduce, run
from fedbench.core.errors import ConfigError, FedbenchError, report_error


class OneLineUsage(TyperGroup):
    """Click's usage errors (an option's bad value, an unknown option or command) as fedbench's one line: Typer
    prints them under the command's usage, in a box of several lines. A sub-command's arguments are parsed
    inside the root's invoke, the root's own in its make_context."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.suggest_commands = False  # Click's NoSuchCommand names the close match itself: Typer's said it twice

    def make_context(self, *args, **kwargs):
        with one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with one_line_usage():
            return super().invoke(ctx)


@contextlib.contextmanager
def one_line_usage():
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:  # `fedbench data`: the help it shows
        raise
    except click.UsageError as exc:
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        raise ConfigError(f"{exc.format_message()}{where}") from None


app = typer.Typer(
    cls=OneLineUsage,
    name="fedbench",
    help="Federated-optimization benchmark: batched-client engine, paper algorithms, MLflow record.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fedbench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """fedbench: run federated-optimization experiments from Hydra configs."""
    from fedbench.runs.interrupts import forget_signals

    forget_signals()


for _module in (run, listing, data, reproduce, attack, report, plot):  # the order of `fedbench --help`
    _module.attach(app)


def entrypoint() -> None:
    from fedbench.core.secrets import install as withhold_passwords
    from fedbench.runs import interrupts

    withhold_passwords()  # no password of a store URI reaches the terminal or a log
    interrupts.install()  # SIGTERM ends a run as Ctrl-C does (checkpoint, KILLED, resume command); done on import too
    try:
        app()
    except FedbenchError as exc:
        report_error(exc)
        code = exc.exit_code
    except Exception as exc:
        from fedbench.config.compose import malformed_yaml

        if (interrupt := interrupts.received()) is not None:  # an error the signal caused
            exit_now(report_interrupt(interrupt))
        error = malformed_yaml(exc)  # a config file read outside composition (`run --help`, `list`)
        if error is None:
            raise
        report_error(error)
        code = error.exit_code
    except KeyboardInterrupt as exc:
        code = report_interrupt(exc)
    except SystemExit as exc:
        code = exc.code
        reported = exc.__suppress_context__  # `raise SystemExit(...) from None`: a run's own report (hydra_app)
        if code not in (0, None) and not reported:  # Typer's exit 130 for any signal, Hydra's 1 for an error it caused
            interrupt = interrupts.interrupt_in(exc.__context__) or interrupts.received()
            if interrupt is not None:
                code = report_interrupt(interrupt)
    else:
        code = 0
    exit_now(code)


def report_interrupt(exc: KeyboardInterrupt) -> int:
    """An interrupt that no run reported (start-up, `fedbench reproduce` between its runs): one line; its exit code."""
    from fedbench.runs import interrupts

    print(f"error: interrupted ({interrupts.describe(interrupts.signal_of(exc))}) {interrupts.left_behind()}",
          file=sys.stderr)
    return interrupts.exit_code(exc)


def exit_now(code: int | str | None) -> NoReturn:
    """Exit as `sys.exit(code)` would, without the interpreter's teardown of every module: after a
    run, the modules of torch, torch._dynamo and sympy take 0.5-1 s to free, memory the operating
    system takes back at once. The atexit handlers still run (logging's flush among them) and the
    standard streams are flushed; with a non-daemon thread still running, the ordinary exit waits for it."""
    status = 0 if code is None else code if isinstance(code, int) else 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
    if threading.current_thread() is threading.main_thread():  # the command's work is over: a signal now (a late
        def at_once(signum, frame):                             # Ctrl-C while loky's threads end) ends the exit at
            for stream in (sys.stdout, sys.stderr):             # once with the command's status, not a traceback
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os._exit(status)

        from fedbench.runs.interrupts import SIGNALS

        for signum in SIGNALS:
            signal.signal(signum, at_once)
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`fedbench list | head`)
            status = status or 120  # what Python's own exit reports
    os._exit(status)


if __name__ == "__main__":
    entrypoint()
