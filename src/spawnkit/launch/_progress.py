"""The ``progress=`` callback of ``spawn_with_plugins`` (stages and errors: see README)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from spawnkit.errors import ProgressCallbackError

__all__ = ["DONE", "END_STAGES", "FAILED", "STOPPED", "ProgressCallback", "ProgressRelay"]

DONE = "done"
FAILED = "failed"
STOPPED = "stopped"
END_STAGES = frozenset({DONE, FAILED, STOPPED})

ProgressCallback = Callable[[int, str, float], object]


class ProgressRelay:
    """Calls the callback once per stage change; turns its first exception into the run's error."""

    def __init__(self, callback: ProgressCallback | None, run_id: str) -> None:
        if callback is not None and not callable(callback):
            raise TypeError(
                f"progress must be a callable taking (rank, stage, elapsed), got {callback!r}"
            )
        self._callback = callback
        self._run_id = run_id
        self._last: dict[int, str] = {}
        self.error: ProgressCallbackError | None = None
        self._said = False  # ``error`` reached someone: a wait raised it, or it was logged

    def emit(self, rank: int, stage: str, elapsed: float) -> None:
        callback = self._callback
        last = self._last.get(rank)
        if callback is None or last == stage or last in END_STAGES:
            return
        self._last[rank] = stage
        try:
            callback(rank, stage, elapsed)
        except Exception as exc:
            self._callback = None  # one failure is the run's; no second call into broken code
            name = getattr(callback, "__qualname__", None) or "the callback"
            err = ProgressCallbackError(
                f"the progress callback raised {type(exc).__name__}: {exc} (while told that "
                f"rank {rank} reached {stage!r}).\nEffect: worker group {self._run_id} was torn "
                "down: the launcher does not keep supervising workers past a failure in its "
                "caller's code.\nFix: make the callback not raise (it runs in the launcher's "
                f"wait calls; catch inside {name} what it may raise).",
                rank=rank,
                stage=stage,
            )
            err.__cause__ = exc
            self.error = err

    def raised(self) -> ProgressCallbackError:
        """The error, to be raised by a wait now: said, so the teardown does not log it."""
        assert self.error is not None
        self._said = True
        return self.error

    def warn_unsaid(self) -> None:
        """Log the callback's error if no wait raised it: it arose during a teardown (the wait
        that started it raises something else), or in a call that is no wait (the launch's own
        ``process_start``, ``exit_codes``, a ``with`` block's end) before ``terminate()`` or
        the group's collection, where nothing else would ever say it."""
        if self.error is not None and not self._said:
            self._said = True
            logging.getLogger("spawnkit.bootstrap").warning(
                "worker group %s: %s\n(No wait of the group raised it; join(), results() and "
                "wait_ready() raise it.)",
                self._run_id,
                self.error,
                exc_info=self.error.__cause__,
            )
