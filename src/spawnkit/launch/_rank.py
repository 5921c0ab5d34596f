"""One worker as its launcher sees it: the process, its three pipes, what it said, how it ended.

``WorkerGroup`` decides when to wait, reads the report pipes and keeps the
failures in the order they count; this is the per-worker bookkeeping under
it: the progress a rank reported, reading the fault pipe (fatal-signal
tracebacks and requested stack dumps), reaping the process and naming the
worker's end for the progress callback, and the rank's return value.
Only the launching thread touches a ``Rank``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as _mp_wait
from typing import Any

from spawnkit._waits import wait as _wait
from spawnkit.bootstrap._parent_death import reap_guardian
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import BootstrapError
from spawnkit.launch._progress import DONE, FAILED, STOPPED
from spawnkit.protocol import messages as proto
from spawnkit.protocol.failure import Worker, current_thread_first, stopped_error

__all__ = ["Rank", "dump_stacks", "reap_ranks"]

_log = logging.getLogger("spawnkit.bootstrap")


@dataclass
class Rank:
    """The parent's view of one worker."""

    rank: int
    proc: Any
    report: Any
    death: Any
    fault: Any
    pid: int
    started: float
    host: str = ""
    stage: str = proto.PRE_BOOTSTRAP
    stage_since: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    dump_signal: int | None = None
    ready: bool = False
    report_obj: Any = None
    result: proto.Result | None = None
    exitcode: int | None = None
    report_open: bool = True
    terminated: bool = False
    # stopped before its entry had returned: a result sent after that (an entry that turns
    # SIGTERM into SystemExit, as vLLM's engine core does) is no return of its own
    cut_short: bool = False
    fault_text: str = ""
    events: list[tuple[str, str, float]] = field(default_factory=list)
    marks: tuple[tuple[str, float], ...] = ()  # the worker's own, from HELLO (a trace's)
    end_told: bool = False
    ended: float = 0.0  # time.monotonic() when reaped (a start-up trace's end of this rank)
    unread: list[Any] = field(default_factory=list)  # read by the group, not yet taken: a Ctrl-C

    @property
    def worker(self) -> Worker:
        return Worker(self.rank, self.pid, self.host)

    @property
    def label(self) -> str:
        return self.worker.label

    @property
    def result_error(self) -> str:
        """Why the entry's return value did not travel back; ``""`` when it did (or none came)."""
        return self.result.error if self.result is not None else ""

    @property
    def unsuccessful(self) -> bool:
        """It ended without every sign of success: exit 0, ready, a result that travelled
        (none at all: the entry never returned, ``os._exit(0)`` ended it)."""
        return (
            self.exitcode != 0 or not self.ready or self.result is None or bool(self.result_error)
        )

    def end_state(self, named: bool, reported: bool, interrupting: bool) -> str:
        """``done``/``failed``/``stopped`` for the progress callback; ``named``: the group's
        failure is this rank's; ``reported``: it sent a failure record."""
        if self.terminated and not named and (not reported or interrupting):
            return STOPPED
        if named or reported or self.unsuccessful:
            return FAILED
        return DONE

    def take(self, msg: Any, now: float) -> str:
        """Record one report message; returns the stage the progress callback should hear of
        (``""``: none).  FAILED/EXITED never come here: the group keeps them."""
        self.events.append((type(msg).__name__, getattr(msg, "stage", ""), now - self.started))
        if isinstance(msg, proto.Hello):
            self.host, self.dump_signal, self.marks = msg.host, msg.dump_signal, msg.marks
        elif isinstance(msg, proto.StageStarted):
            self.stage, self.stage_since = msg.stage, now
            return msg.stage
        elif isinstance(msg, proto.StageFinished):
            self.stage_seconds[msg.stage] = msg.seconds
        elif isinstance(msg, proto.Ready):
            self.ready, self.report_obj = True, msg.report
            _warn_unsent(self.label, msg.report)
            self.stage, self.stage_since = Stage.ENTRY.value, now
            return Stage.ENTRY.value
        elif isinstance(msg, proto.Result):
            self.result = msg
            self.ready = True
        return ""

    def stop(self) -> None:
        """The launcher is stopping this rank (``terminate()``, Ctrl-C, a failure), if live."""
        if self.exitcode is None:
            self.terminated = True
            self.cut_short = self.cut_short or self.result is None

    def value(self, loads: Callable[[bytes], Any], group: str) -> Any:
        """The entry's return value; raises when there is none to give (``group`` names the
        group in that message)."""
        res = self.result
        if self.cut_short or (res is None and (self.terminated or self.exitcode not in (0, None))):
            # Stopped by terminate() (the only way to get here without a failure):
            # a None would read as the entry's return value.
            what = "returned from its entry function"
            raise stopped_error(self.worker, group, self.stage, self.exitcode, what)
        if res is None or res.data is None:
            return None
        try:
            return loads(res.data)
        except Exception as exc:
            raise BootstrapError(
                f"{self.label} returned a value the launcher cannot unpickle: "
                f"{type(exc).__name__}: {exc}. Return plain data, or make the module "
                "defining the value's type importable in the launcher.",
                stage=Stage.ENTRY.value,
                **self.worker.fields(),
                kind="payload",
            ) from exc

    def reap(self, join_s: float) -> bool:
        """Join the process for up to ``join_s``; once it exited, keep its code and fault text."""
        self.proc.join(join_s)
        if self.proc.exitcode is None:
            return False
        self.exitcode = self.proc.exitcode
        self.ended = time.monotonic()
        self.fault_text = self.read_fault()
        reap_guardian(self.pid)  # the worker's guardian is this process's child
        return True

    def read_fault(self, wait: float = 0.0) -> str:
        """What the faulthandler wrote so far, waiting up to ``wait`` for a dump to arrive."""
        if self.fault is None:
            return self.fault_text
        chunks: list[bytes] = [self.fault_text.encode()] if self.fault_text else []
        deadline = time.monotonic() + wait
        fd = self.fault.fileno()
        while True:
            left = deadline - time.monotonic()
            if not _mp_wait([self.fault], max(left, 0.0)):
                break
            try:
                data = os.read(fd, 65536)
            except OSError:  # BlockingIOError and InterruptedError included
                break
            if not data:
                break
            chunks.append(data)
            if wait:  # a dump arrives in one burst: stop after a short quiet period
                deadline = time.monotonic() + 0.05
        return b"".join(chunks).decode("utf-8", "replace")

    def close(self) -> None:
        """Close the parent's pipe ends, and the process handle once it was reaped."""
        for conn in (self.report, self.death, self.fault):
            with contextlib.suppress(OSError):
                conn.close()
        if self.exitcode is not None:
            with contextlib.suppress(ValueError):
                self.proc.close()


def _warn_unsent(label: str, report: Any) -> None:
    """A report that arrived with fields emptied because they did not pickle: say which."""
    unsent = getattr(report, "unsent", None) or {}
    if unsent:
        fields = "; ".join(f"{name}: {why}" for name, why in unsent.items())
        _log.warning(
            "%s: its BootstrapReport arrived without field(s) %s (%s); those fields read "
            "as empty in wait_ready()'s report, and report.unsent names "
            "them. Keep report fields to plain data (a plugin or platform put an object there).",
            label,
            ", ".join(sorted(unsent)),
            fields,
        )


def reap_ranks(ranks: Sequence[Rank], timeout: float, drain: Callable[[Rank], None]) -> set[int]:
    """Wait up to ``timeout`` for ``ranks`` to exit, through their sentinels (never psutil: it
    would reap the launcher's children); ``drain`` reads a rank's last messages first.
    Returns the pids still running."""
    end = time.monotonic() + timeout
    while True:
        pending = {r.proc.sentinel: r for r in ranks if r.exitcode is None}
        left = end - time.monotonic()
        if not pending or left <= 0:
            return {r.pid for r in pending.values()}
        for obj in _wait(list(pending), left):
            drain(pending[obj])
            pending[obj].reap(max(0.0, min(1.0, end - time.monotonic())))


def dump_stacks(ranks: Sequence[Rank], wait: float) -> dict[int, str]:
    """Ask each worker's faulthandler for all its threads' stacks; waits ``wait`` per worker."""
    asked: list[Rank] = []
    for r in ranks:
        if r.dump_signal is None or r.exitcode is not None:
            continue
        try:
            os.kill(r.pid, r.dump_signal)
            asked.append(r)
        except OSError:
            continue
    stacks: dict[int, str] = {}
    for r in asked:
        stacks[r.rank] = current_thread_first(r.read_fault(wait=wait).strip())
        r.fault_text = ""
    return stacks
