"""``GroupContract``: what every worker group promises, local or on a Ray cluster.

The local :class:`~spawnkit.launch.group.WorkerGroup` and
:class:`~spawnkit.scaleout.ray.RayWorkerGroup` used to share their interface by
convention only, and it drifted (``_fail`` raised in one and returned in the
other).  The meanings below are written once, here, and both inherit them.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Any, TypeVar

from spawnkit.errors import ChildError

__all__ = ["GroupContract"]

_G = TypeVar("_G", bound="GroupContract")


class GroupContract(abc.ABC):
    """A started group of ranks; one meaning for each part, whatever runs the ranks.

    * **First failure.**  The first rank failure a wait sees is kept in
      :attr:`failure`, tears the whole group down, and is raised: by the wait
      that saw it and, the same object, by every later ``wait_ready``, ``join``
      or ``results`` call.  :meth:`_fail` records it (an earlier failure wins),
      tears down, and *returns* the error; callers write ``raise self._fail(err)``
      so every raise stays visible where it happens.
    * **Waits.**  ``wait_ready(timeout)`` returns every rank's ``BootstrapReport``
      by rank.  ``join(timeout)`` returns True once every rank's entry returned,
      False while ranks still run when ``timeout`` passes (call again), and
      False at once after :meth:`terminate` stopped a rank before its entry
      returned: stopped work is not done work.  ``results(timeout)`` returns the
      entries' values by rank; its ``timeout`` passing raises
      ``EntryTimeoutError`` (``BootstrapTimeoutError`` for a rank still
      bootstrapping) and leaves the group running, while the group's own
      ``ready_timeout``/``join_timeout`` passing tears it down.  A rank that
      :meth:`terminate` stopped has no result: ``results`` raises
      ``ChildExitedError`` for it.
    * **Context manager.**  Leaving the ``with`` block terminates the group,
      however it is left; :meth:`terminate` (alias :meth:`close`) is safe to
      call again.
    """

    run_id: str
    _failure: ChildError | None = None

    @property
    def failure(self) -> ChildError | None:
        """The group's first failure, ``None`` while none happened."""
        return self._failure

    def _fail(self, err: ChildError) -> ChildError:
        """Keep ``err`` unless a failure came first, tear down, and return the one to raise."""
        if self._failure is None:
            self._failure = err
            self._stop_for(err)
        else:
            self.terminate()
        return self._failure

    def _raise_first(self) -> None:
        """Every wait starts here: a failed group raises its first failure again."""
        if self._failure is not None:
            raise self._failure

    @abc.abstractmethod
    def _stop_for(self, err: ChildError) -> None:
        """Tear the group down because of ``err`` (adding what the teardown learned to it)."""

    @abc.abstractmethod
    def wait_ready(self, timeout: float | None = None) -> list[Any]:
        """Every rank's ``BootstrapReport`` by rank, once all passed their bootstrap."""

    @abc.abstractmethod
    def join(self, timeout: float | None = None) -> bool:
        """True once every rank's entry returned; False while ranks run at ``timeout``, and
        False at once for a group :meth:`terminate` stopped first."""

    @abc.abstractmethod
    def results(self, timeout: float | None = None) -> list[Any]:
        """The entries' return values by rank (``ChildExitedError`` for a stopped rank)."""

    @abc.abstractmethod
    def terminate(self) -> None:
        """Stop every rank and release what the group holds; safe to call again."""

    def close(self) -> None:
        """The same as :meth:`terminate`."""
        self.terminate()

    @property
    @abc.abstractmethod
    def world_size(self) -> int: ...

    @property
    def ranks(self) -> list[int]:
        return list(range(self.world_size))

    def __enter__(self: _G) -> _G:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.terminate()
