"""One worker as its launcher sees it: the process, its three pipes, what it said, how it ended.

``WorkerGroup`` decides when to wait and in which order failures count;
this is the per-worker bookkeeping under it: reading the report pipe without
blocking, reading the fault pipe (fatal-signal tracebacks and requested stack
dumps), reaping the process and naming the worker's end for the progress
callback.  Only the launching thread touches a ``Rank``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as _mp_wait
from typing import Any

from spawnkit.launch._progress import DONE, FAILED, STOPPED
from spawnkit.protocol import messages as proto
from spawnkit.protocol.failure import Worker, current_thread_first

__all__ = ["Rank", "dump_stacks"]

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
    failure: proto.Failed | proto.Exited | None = None
    exitcode: int | None = None
    report_open: bool = True
    terminated: bool = False
    fault_text: str = ""
    early_text: str = ""
    events: list[tuple[str, str, float]] = field(default_factory=list)
    end_told: bool = False

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
        """It ended without every sign of success: exit 0, ready, a result that travelled."""
        return self.exitcode != 0 or not self.ready or bool(self.result_error)

    def end_state(self, named: bool, interrupting: bool) -> str:
        """``done``/``failed``/``stopped`` for the progress callback; ``named``: the group's
        failure is this rank's."""
        if self.terminated and not named and (self.failure is None or interrupting):
            return STOPPED
        if named or self.failure is not None or self.unsuccessful:
            return FAILED
        return DONE

    def messages(self) -> Iterator[Any]:
        """Every message already in the report pipe; never blocks on an empty pipe."""
        while self.report_open:
            try:
                if not self.report.poll(0):
                    return
                msg = self.report.recv()
            except (EOFError, OSError):
                self.report_open = False
                return
            except Exception as exc:  # a message that does not unpickle here
                _log.warning("%s sent an unreadable report message: %s", self.label, exc)
                continue
            yield msg

    def reap(self, join_s: float) -> bool:
        """Join the process for up to ``join_s``; once it exited, keep its code and fault text."""
        self.proc.join(join_s)
        if self.proc.exitcode is None:
            return False
        self.exitcode = self.proc.exitcode
        self.fault_text = self.read_fault()
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
