"""A stage listener that remembers where a worker is, for launchers that report afterwards.

Ray actors and torchrun ranks have no pipe to a spawnkit parent that could
receive each stage as it happens; they need to know, when something fails,
which stage it failed in and whether the worker had become ready.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from spawnkit.bootstrap.stages import Stage

if TYPE_CHECKING:
    from spawnkit.bootstrap.report import BootstrapReport
    from spawnkit.protocol.failure import Failed

__all__ = ["ProgressListener"]


class ProgressListener:
    """Records the current stage, finished stage durations and the ready report.

    ``ready_event`` is set when the worker is ready *or* when it fails
    (``fail``), so a thread waiting for readiness never waits on a worker that
    has already given up.  ``forward`` is another listener to notify as well.
    ``node`` (a cluster node id) is stamped on the report when it is ready,
    before the entry runs, so the entry's ``current_report()`` names it too.
    """

    def __init__(self, forward: Any | None = None, *, node: str = "") -> None:
        self.current: str = ""
        self.finished: dict[str, float] = {}
        self.report: BootstrapReport | None = None
        self.failure: Failed | None = None
        self.ready_event = threading.Event()
        self._forward = forward
        self.node = node

    def stage_started(self, stage: str) -> None:
        self.current = str(stage)
        if self._forward is not None:
            self._forward.stage_started(stage)

    def stage_finished(self, stage: str, seconds: float) -> None:
        self.finished[str(stage)] = seconds
        if self._forward is not None:
            self._forward.stage_finished(stage, seconds)

    def ready(self, report: BootstrapReport) -> None:
        if self.node and not report.node:
            report.node = self.node
        self.report = report
        self.current = Stage.ENTRY.value
        self.ready_event.set()
        if self._forward is not None:
            self._forward.ready(report)

    def fail(self, failure: Failed) -> None:
        self.failure = failure
        self.ready_event.set()
