"""User-facing errors. Each maps to one clear line on the command line and an exit code."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FedbenchError(Exception):
    """Base class of errors that are the user's to fix; the CLI prints the message alone."""

    exit_code = 1


class ConfigError(FedbenchError):
    """A bad configuration value, found before any work starts (exit code 2)."""

    exit_code = 2


class DataUnavailableError(FedbenchError):
    """A data set that is not on disk and cannot be downloaded (exit code 2)."""

    exit_code = 2


class DivergenceError(FedbenchError):
    """Non-finite loss or parameters during training (exit code 3)."""

    exit_code = 3

    def __init__(self, round_: int, reason: str):
        super().__init__(f"run diverged at round {round_}: {reason}")
        self.round = round_
        self.reason = reason


def unknown_choice(kind: str, value: object, choices: Iterable[str]) -> ConfigError:
    """'Unknown algorithm 'scafold'. Available: ... Did you mean 'scaffold'?'"""
    choices = sorted(choices)
    msg = f"Unknown {kind} {value!r}. Available: {', '.join(choices)}."
    close = difflib.get_close_matches(str(value), choices, n=1)
    if close:
        msg += f" Did you mean {close[0]!r}?"
    return ConfigError(msg)


def check(condition: bool, message: str) -> None:
    """Raise a ConfigError with `message` unless `condition` holds."""
    if not condition:
        raise ConfigError(message)
