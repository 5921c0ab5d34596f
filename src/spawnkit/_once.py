"""Run-once gates for per-process stages (platform init, plugin loading, hook application).

A boolean "loaded" flag, as vLLM and SGLang use, has three known failures:
it is set before the work so a failure can never be retried *or* reported
again, it is inherited by a forked child that never ran the work itself, and
it gives other threads no way to wait.  ``Once`` is a four-state machine
(not started, running, done, failed) behind a re-entrant lock:

* the first caller runs the action; other threads block until it finishes;
* a re-entrant call from inside the action (a plugin callback calling
  ``load_plugins()``) returns ``None`` at once instead of deadlocking;
  :meth:`Once.running_here` tells a caller it is inside the action, and
  :meth:`Once.wait` bounds how long another thread waits for it;
* a failure is final: later calls raise again, chained to the first cause;
* forked children start from "not started" (``os.register_at_fork``).
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Once", "OnceState"]

T = TypeVar("T")


class OnceState(enum.Enum):
    NOT_STARTED = "not started"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


_instances: weakref.WeakSet[Once[object]] = weakref.WeakSet()


class Once(Generic[T]):
    """A gate that runs one action once per process; see the module docstring.

    ``again`` builds the exception raised by calls after a failure, given the
    first exception; it defaults to re-raising the first exception itself.
    """

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
        """Wait up to ``timeout`` s while another thread runs the action; False if it still is.

        Returns at once when nothing runs, or when the caller is the one running it.
        """
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
