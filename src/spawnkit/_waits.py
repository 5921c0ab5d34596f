"""One wait on pipes and process sentinels that honours any finite number of seconds.

``multiprocessing.connection.wait`` (and ``Connection.poll``, ``Process.join``) hands its
timeout to ``poll()`` in milliseconds as a C ``int``, so past 2**31 - 1 ms (24.8 days) it
raises ``OverflowError: timeout is too large`` (past 2**63 ns, ``timestamp too large``): a
launch given a bound of a month (``join_timeout=30 * 86400``, ``spawnkit launch --timeout
2592000``, a "forever" of ``sys.maxsize``), which every check let through as a number of
seconds, failed with that bare error as soon as its ranks had started.  Waiting in slices no
longer than a day, each well inside every platform's limit, keeps the bound the caller gave.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait as _mp_wait

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypeVar
else:
    from spawnkit._compat import TypeVar

__all__ = ["LONGEST_WAIT", "in_slices", "join_thread", "wait", "wait_event"]

T = TypeVar("T")

#: The longest single wait handed to the operating system, in seconds.
LONGEST_WAIT = 86400.0


def wait(objects: Sequence[Any], timeout: float | None) -> list[Any]:
    """``multiprocessing.connection.wait(objects, timeout)`` for any finite ``timeout``."""
    if timeout is None or timeout <= LONGEST_WAIT:
        return _mp_wait(objects, timeout)
    end = time.monotonic() + timeout
    while True:
        left = max(end - time.monotonic(), 0.0)
        ready = _mp_wait(objects, min(left, LONGEST_WAIT))
        if ready or left <= LONGEST_WAIT:
            return ready


def join_thread(thread: threading.Thread, timeout: float) -> None:
    """``thread.join(timeout)`` for any finite ``timeout`` (``Thread.join`` raises
    ``OverflowError`` past ``threading.TIMEOUT_MAX``: 292 years on Linux, 49.7 days on
    Windows)."""
    end = time.monotonic() + timeout
    while thread.is_alive():
        left = end - time.monotonic()
        if left <= 0:
            return
        thread.join(min(left, LONGEST_WAIT))


def wait_event(event: threading.Event, timeout: float) -> bool:
    """``event.wait(timeout)`` for any finite ``timeout`` (``Event.wait`` raises
    ``OverflowError`` past ``threading.TIMEOUT_MAX``: a Ray rank's ``wait_ready`` given a
    startup bound of ``sys.maxsize`` died with it in the actor)."""
    end = time.monotonic() + max(timeout, 0.0)
    while True:
        left = max(end - time.monotonic(), 0.0)
        if event.wait(min(left, LONGEST_WAIT)) or left <= LONGEST_WAIT:
            return event.is_set()


def in_slices(
    call: Callable[[float | None], T], timeout: float | None, expired: type[BaseException]
) -> T:
    """``call(timeout)`` for any finite ``timeout``: called again with what is left while it
    raises ``expired`` for a slice of at most ``LONGEST_WAIT`` (``ray.get`` takes its timeout
    in milliseconds as a C ``long``: ``ready_timeout=sys.maxsize`` was a bare ``OverflowError``
    from placing the group)."""
    if timeout is None or timeout <= LONGEST_WAIT:
        return call(timeout)
    end = time.monotonic() + timeout
    while True:
        left = max(end - time.monotonic(), 0.0)
        try:
            return call(min(left, LONGEST_WAIT))
        except expired:
            if left <= LONGEST_WAIT:
                raise
