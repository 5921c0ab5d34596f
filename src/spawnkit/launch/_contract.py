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

    The meanings (first failure kept and re-raised, waits, context manager) are in README
    "Launch workers"; callers write ``raise self._fail(err)`` so every raise stays visible.
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
