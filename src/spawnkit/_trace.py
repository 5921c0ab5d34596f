"""A start-up trace's spans, on the one clock every process of a host shares.

Standard library only, and imported only by a launcher asked for a trace: a
worker never imports it (its spans are drawn, in the parent, from timings its
``BootstrapReport`` already carries), so tracing off costs the worker path
nothing.

The clock is ``time.monotonic()``: on Linux that is ``CLOCK_MONOTONIC``,
counted from boot and shared by every process of the machine, so the
launcher's readings and each worker's line up without any exchange; it never
jumps when NTP or an administrator sets the wall clock (``time.time()`` can,
and a span would then end before it began).  A trace holds the offset to the
wall clock (``otherData.wall_offset_s``) for tools that want Unix times
(OpenTelemetry).  Ranks on other machines (Ray, torchrun over nodes) do not
share it, which is why only the host-local launcher traces.

The output is Chrome's trace-event JSON, which Perfetto (ui.perfetto.dev) and
``chrome://tracing`` open: one process track per ``pid``, complete events
(``"ph": "X"``) in microseconds, metadata events (``"ph": "M"``) naming them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from spawnkit._namedtuple import NamedTuple

__all__ = ["CLOCK", "Instant", "Recorder", "Span"]

#: The clock every ``start``/``end``/``at`` below is read on (see the module docstring).
CLOCK = "CLOCK_MONOTONIC"


class Span(NamedTuple):
    """One complete event: ``start``/``end`` are ``time.monotonic()`` seconds."""

    pid: int
    name: str
    start: float
    end: float
    cat: str = "launch"
    args: dict[str, Any] = {}


class Instant(NamedTuple):
    """One moment on a track (a rank seen ready, a rank's exit)."""

    pid: int
    name: str
    at: float
    cat: str = "launch"
    args: dict[str, Any] = {}


class Recorder:
    """Collects spans per track (a process id) and renders them as Chrome trace-event JSON."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.instants: list[Instant] = []
        #: pid -> (track name, sort index): the launcher first, then ranks in order
        self.tracks: dict[int, tuple[str, int]] = {}

    def track(self, pid: int, name: str, order: int) -> None:
        self.tracks[pid] = (name, order)

    def add(self, span: Span) -> None:
        if span.end < span.start:
            raise ValueError(f"span {span.name!r} ends before it starts: {span}")
        self.spans.append(span)

    @contextlib.contextmanager
    def span(self, pid: int, name: str, cat: str = "launch", **args: Any) -> Iterator[None]:
        """The ``with`` body as one span (recorded even when the body raises)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(Span(pid, name, start, time.monotonic(), cat, args))

    def instant(self, pid: int, name: str, at: float, cat: str = "launch", **args: Any) -> None:
        self.instants.append(Instant(pid, name, at, cat, args))

    def chrome(self, **other: Any) -> dict[str, Any]:
        """The trace as Chrome trace-event JSON (a dict ready for ``json.dump``)."""
        events: list[dict[str, Any]] = []
        for pid, (name, order) in self.tracks.items():
            events.append(_meta(pid, "process_name", name))
            events.append(_meta(pid, "process_sort_index", order, key="sort_index"))
            events.append(_meta(pid, "thread_name", "main"))
        # Parents before children at equal start: longer spans first.
        for s in sorted(self.spans, key=lambda s: (s.pid, s.start, -s.end)):
            ts = _us(s.start)
            events.append(
                {
                    "name": s.name,
                    "cat": s.cat,
                    "ph": "X",
                    "ts": ts,
                    "dur": max(0.0, round(_us(s.end) - ts, 3)),
                    "pid": s.pid,
                    "tid": s.pid,
                    "args": dict(s.args),
                }
            )
        for i in sorted(self.instants, key=lambda i: (i.pid, i.at)):
            events.append(
                {
                    "name": i.name,
                    "cat": i.cat,
                    "ph": "i",
                    "s": "t",
                    "ts": _us(i.at),
                    "pid": i.pid,
                    "tid": i.pid,
                    "args": dict(i.args),
                }
            )
        other.setdefault("clock", CLOCK)
        other.setdefault("wall_offset_s", time.time() - time.monotonic())
        other.setdefault("launcher_pid", os.getpid())
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _us(seconds: float) -> float:
    """Seconds to the format's microseconds (rounded to the nanosecond)."""
    return round(seconds * 1e6, 3)


def _meta(pid: int, name: str, value: Any, key: str = "name") -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": pid, "args": {key: value}}
