"""``check_flag``: a keyword documented as on/off takes ``True`` or ``False``, nothing else.

A flag read by truth value turns on for any non-empty text: ``prefix_output="no"`` prefixed
every line, ``optional="false"`` made a hook optional, ``lenient="0"`` made a selection
lenient, each the opposite of what was written, and nothing said.  ``0``/``1`` are refused
too: an int where a bool belongs is a value computed for something else.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import ConfigError

if TYPE_CHECKING:
    from typing import Any

__all__ = ["check_flag"]


def check_flag(
    name: str, value: Any, *, call: str, none: str = "", error: type[Exception] = ConfigError
) -> bool | None:
    """``value`` when it is a bool (or None, when ``none`` says what None means), else
    ``error`` naming ``call``'s argument ``name`` and what to pass."""
    if isinstance(value, bool) or (value is None and none):
        return value
    or_none = f", or None ({none})" if none else ""
    hint = ""
    if isinstance(value, str | bytes):
        hint = " Text is never read as on/off here: any non-empty string is true in Python."
    message = (
        f"{call}({name}={value!r}): must be True or False{or_none}, not a "
        f"{type(value).__name__}.{hint}"
    )
    if error is ConfigError:
        raise ConfigError(message, setting=name)
    raise error(message)
