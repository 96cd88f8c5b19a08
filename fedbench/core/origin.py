"""Where a user's code is: the name and the file and line of a plugin's class or function, for the one line
that refuses what it did."""

from __future__ import annotations

import inspect
from typing import Any


def qualified_name(obj: Any, fallback: str = "?") -> str:
    """module.qualname of a class or function (`fallback` for the part an object lacks)."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', fallback)}"


def source_line(obj: Any) -> str | None:
    """file:line where `obj` is defined; None where Python cannot tell (a builtin, a class made at run time)."""
    try:
        return f"{inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]}"
    except (TypeError, OSError):
        return None
