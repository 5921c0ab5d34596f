"""A per-process record of what plugin hooks did, for the parent to show which hook ran where."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["clear", "events", "record"]

_lock = threading.Lock()
_events: list[dict[str, Any]] = []


def record(hook: str, **data: Any) -> None:
    """Note that ``hook`` ran, with small picklable details (numbers, strings)."""
    with _lock:
        _events.append({"hook": hook, **data})


def events() -> list[dict[str, Any]]:
    """A copy of the events recorded so far in this process."""
    with _lock:
        return [dict(e) for e in _events]


def clear() -> None:
    with _lock:
        _events.clear()
