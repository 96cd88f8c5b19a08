"""Text read from someone else's file or store, as it may reach a terminal.

A run name, param or tag in a shared MLflow store, a config file's comment or name, a data file's name in an error
line: each is another person's text. Printed as it is, an escape sequence in it clears the user's screen, retitles
the window, recolours or rewrites what was printed before it (a carriage return moves back to the start of the
line), and a bidirectional override reorders what the user reads. `printable` shows each such character as its
escape (`\\x1b`, `\\r`, `\\u202e`), and leaves line breaks and tabs, and every other character, as they are."""

from __future__ import annotations

import re

# C0 controls but tab and line feed, DEL, C1 controls, and Unicode's bidirectional embeddings, overrides and isolates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    char = match.group()
    return {"\r": "\\r"}.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(text: str) -> str:
    """`text` with every character that acts on a terminal shown as its escape."""
    return _UNSAFE.sub(_escaped, text) if isinstance(text, str) else text
