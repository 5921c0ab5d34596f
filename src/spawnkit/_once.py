"""Run-once gates for per-process stages (platform init, plugin loading, hook application).

A boolean "loaded" flag hides a failure from later calls, is inherited by forked children and
lets no thread wait. ``Once`` instead: other threads block until the action ends; a re-entrant
call returns ``None`` instead of deadlocking; a failure raises again on every later call;
forked children start over.
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Generic, TypeVar
else:
    from spawnkit._compat import Generic, TypeVar

__all__ = ["Once", "OnceState"]

T = TypeVar("T")


class OnceState(enum.Enum):
    NOT_STARTED = "not started"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


_instances: weakref.WeakSet[Once[object]] = weakref.WeakSet()


class Once(Generic[T]):
    """A gate that runs one action once per process; ``again(first)`` builds later errors."""

    def __init__(
        self, name: str, again: Callable[[BaseException], BaseException] | None = None
    ) -> None:
        self.name = name
        self._again = again
        self._lock = threading.RLock()
        self._state = OnceState.NOT_STARTED
        self._result: T | None = None
        self._error: BaseException | None = None
        self._owner: int | None = None  # thread running the action
        _instances.add(self)  # type: ignore[arg-type]

    @property
    def state(self) -> OnceState:
        return self._state

    @property
    def error(self) -> BaseException | None:
        return self._error

    @property
    def result(self) -> T | None:
        return self._result

    def running_here(self) -> bool:
        """Whether the calling thread is inside the action right now (a nested call)."""
        return self._state is OnceState.RUNNING and self._owner == threading.get_ident()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s while another thread runs the action; False if it still is."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return False
        self._lock.release()
        return True

    def run(self, action: Callable[[], T]) -> T | None:
        with self._lock:
            if self._state is OnceState.DONE:
                return self._result
            if self._state is OnceState.RUNNING:
                return None  # re-entrant call from inside the action
            if self._state is OnceState.FAILED:
                assert self._error is not None
                if self._again is None:
                    raise self._error
                raise self._again(self._error) from self._error
            self._state = OnceState.RUNNING
            self._owner = threading.get_ident()
            try:
                result = action()
            except BaseException as exc:
                self._state = OnceState.FAILED
                self._error = exc
                raise
            finally:
                self._owner = None
            self._result = result
            self._state = OnceState.DONE
            return result

    def settle(self, result: T) -> None:
        """Done, with ``result``: a forked child taking on what its parent's action made (a
        warm worker, its server's platform), which the fork's reset dropped."""
        with self._lock:
            self._state, self._result, self._error = OnceState.DONE, result, None

    def reset(self) -> None:
        """Back to "not started" (tests, and forked children)."""
        self._lock = threading.RLock()
        self._state = OnceState.NOT_STARTED
        self._result = None
        self._error = None
        self._owner = None


def _reset_all_after_fork() -> None:
    for once in list(_instances):
        once.reset()


os.register_at_fork(after_in_child=_reset_all_after_fork)
