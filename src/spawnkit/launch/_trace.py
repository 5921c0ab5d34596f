"""``spawn_with_plugins(trace=FILE)``: the launch and every rank's start-up, as one trace file.

The launcher records its own spans as it goes (spec build, launch context,
each rank's start); each rank's spans are drawn when the group closes, from
what its ``BootstrapReport`` already carries (stage, plugin and target-import
start times on the shared clock, see :mod:`spawnkit._trace`) and what the
launcher saw (start, READY, exit).  A rank that failed before READY sent no
report: its stages are then drawn from the launcher's receipt of its stage
messages, marked ``seen_by: launcher``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from spawnkit import _steps
from spawnkit._trace import Recorder, Span
from spawnkit.errors import ConfigError
from spawnkit.launch._otel import otel_bridge

__all__ = [
    "PROCESS_START",
    "START_PART",
    "LaunchTrace",
    "check_trace_path",
    "not_written",
    "open_trace",
]

#: A rank's span before its first stage (the launcher's ``process start`` of the rank).
PROCESS_START = "process start"

_log = logging.getLogger("spawnkit.launch")


def open_trace(path: str | os.PathLike[str]) -> LaunchTrace:
    """A trace to be written to ``path``; refused now, before any rank starts, if it cannot be."""
    target = check_trace_path(path)
    held = _hold(path, target)
    try:
        return LaunchTrace(target.absolute(), held)  # written at close: a chdir moves no file
    except BaseException:
        _release(held)
        raise


def check_trace_path(path: object) -> Path:
    """``path`` as a trace file's, refused if no trace could be written there; nothing opened
    or held (the CLI asks this before it runs anything, and the launch then opens it)."""
    if not isinstance(path, str | os.PathLike):
        raise ConfigError(
            f"trace={path!r}: must be a file path (str or os.PathLike), not a "
            f"{type(path).__name__}.",
            setting="trace",
        )
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        why = "it is a folder" if target.is_dir() else f"{str(folder)!r} is no writable folder"
        raise ConfigError(
            f"trace={str(path)!r}: cannot write a trace file there ({why}). "
            "Pass a file path in an existing, writable folder (spawnkit launch/demo --trace FILE).",
            setting="trace",
        )
    return target


#: The files live traces will write (real paths), each held from its launch until written.
_HELD: set[str] = set()
_HELD_LOCK = threading.Lock()


def _hold(asked: str | os.PathLike[str], target: Path) -> str | None:
    """``target``'s real path, held for this launch's trace; refused while another live
    group's trace holds it (None: no regular file, such as ``/dev/null``, nothing replaced)."""
    real = os.path.realpath(target)
    if os.path.exists(real) and not os.path.isfile(real):
        return None
    with _HELD_LOCK:
        if real in _HELD:
            raise ConfigError(
                f"trace={str(asked)!r}: {real} is already the trace file of another group "
                "that has not closed yet; the group that closes last would replace the other's "
                "trace with its own. Give each group its own file (e.g. trace=f'start-{name}"
                ".json'). No worker was started.",
                setting="trace",
            )
        _HELD.add(real)
    return real


def _release(held: str | None) -> None:
    if held is not None:
        with _HELD_LOCK:
            _HELD.discard(held)


class LaunchTrace:
    """One launch's trace: the launcher's spans now, the ranks' when the group closes."""

    def __init__(self, path: Path, held: str | None = None) -> None:
        self.path = path
        self.held = held  # the real path held against other live traces (``_hold``)
        self.rec = Recorder()
        self.pid = os.getpid()
        self.begun = time.monotonic()
        self.rec.track(self.pid, f"launcher (pid {self.pid})", 0)
        self.rank_start: dict[int, float] = {}
        self.launch_marks: dict[int, tuple[float, ...]] = {}
        self.offset = time.time() - self.begun  # monotonic -> Unix time, read once
        self.otel = otel_bridge(self.begun, self.offset)  # None unless a provider is set
        self.finished = False
        self.saved = False  # the file holds this launch's trace
        self.error: str | None = None  # why it does not, once finished

    def child_env(self, env: Mapping[str, str] | None) -> dict[str, str] | None:
        """``env`` plus the launch's W3C trace context for the ranks, when OTel is on (a
        ``TRACEPARENT`` in ``env`` is the caller's: the root span's parent)."""
        try:
            if self.otel is not None and not self.otel.start(env):
                self.otel = None  # the provider's root span has no valid context: OTel is off
        except BaseException:  # env= refused: no launch, so no trace holds the path
            self.finished = True
            _release(self.held)
            raise
        if self.otel is None:
            return None if env is None else dict(env)
        return self.otel.child_env(env)

    @contextlib.contextmanager
    def span(self, name: str, **args: Any) -> Iterator[None]:
        with self.rec.span(self.pid, name, **args):
            yield

    def started(self, rank: int, pid: int, start: float, marks: Sequence[float] = ()) -> None:
        """Rank ``rank`` (process ``pid``) was started from ``start`` until now; ``marks``: its
        Popen's own (``protocol.popen``), drawn as the parts of that start."""
        self.rank_start[rank] = start
        self.launch_marks[rank] = tuple(marks)
        end = time.monotonic()
        self.rec.add(Span(self.pid, f"start rank {rank}", start, end, args={"pid": pid}))
        names = _LAUNCHER_PARTS.get(len(marks), ())
        for name, begun, done in _parts(names, marks, start, end):
            self.rec.add(Span(self.pid, name, begun, done, START_PART, {"rank": rank}))

    def finish(
        self, ranks: Sequence[Any], server: Any = None, error: BaseException | None = None
    ) -> None:
        """Draw every rank's spans (and the warm server's, when this launch started it) and
        write the file, once; ``error``: what the launch raised (the OTel root span's status).

        Called from the group's teardown, where an exception would replace the
        run's own error: a failure here is logged at ERROR with the file named.
        """
        if self.finished:
            return
        self.finished = True
        if self.otel is not None:
            self.otel.error = error
        try:
            self._finish(ranks, server)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            _log.error(
                "the start-up trace %s was not written: %s: %s; the launch itself was not "
                "affected (report this with the traceback: --debug).",
                self.path,
                type(exc).__name__,
                exc,
                exc_info=True,
            )
        finally:
            _release(self.held)  # written (or not): another group may use the path now

    def _finish(self, ranks: Sequence[Any], server: Any) -> None:
        closed = time.monotonic()
        if server is not None and server.pid is not None and server.start_window[0] >= self.begun:
            _server_spans(self.rec, server)
        for r in ranks:
            start = self.rank_start.get(r.rank, r.started)
            _rank_spans(self.rec, r, start, closed, self.launch_marks.get(r.rank, ()))
            if r.ready:
                ready = next((t for kind, _, t in r.events if kind == "Ready"), None)
                if ready is not None:
                    self.rec.instant(self.pid, f"rank {r.rank} ready", r.started + ready)
            if r.ended:
                self.rec.instant(self.pid, f"rank {r.rank} exit", r.ended, code=r.exitcode)
        self.rec.add(Span(self.pid, "spawn_with_plugins", self.begun, time.monotonic()))
        data = self.rec.chrome(
            world_size=len(ranks),
            launch_window_us=[self.begun * 1e6, time.monotonic() * 1e6],
            wall_offset_s=self.offset,
        )
        if self.otel is not None:
            self.otel.emit(self.rec)
        try:
            _write_whole(self.path, json.dumps(data, indent=None) + "\n")
        except OSError as exc:
            self.error = str(exc)
            _log.error(
                "the start-up trace could not be written to %s: %s; the launch itself was "
                "not affected. Pass trace= a writable file path.",
                self.path,
                exc,
            )
        else:
            self.saved = True


def _write_whole(path: Path, text: str) -> None:
    """``text`` as the file ``path``, whole or not at all: written to a new file beside it and
    renamed over it, so a full disk leaves neither a truncated trace (which ``spawnkit trace``
    would refuse) nor a half-overwritten older one.  A path that is no regular file
    (``/dev/null``, a FIFO) is written as it is: there is no file there to replace."""
    real = Path(os.path.realpath(path))  # a symlink's file is replaced, not the link
    try:
        mode = real.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        real.write_text(text, encoding="utf-8")
        return
    temp = real.with_name(f".{real.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        if mode is not None:
            os.fchmod(fd, stat.S_IMODE(mode))  # an existing trace keeps its permissions
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(temp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def not_written(group: Any) -> str | None:
    """Why ``group``'s ``trace=`` file was not written, once the group closed; None when it
    was, or when no trace was asked for (the CLI's closing line and exit status)."""
    tracer: LaunchTrace | None = getattr(group, "_trace", None)
    if tracer is None or tracer.saved:
        return None
    return tracer.error or "the group was not closed"


def _rank_spans(
    rec: Recorder, r: Any, start: float, closed: float, launch: tuple[float, ...]
) -> None:
    """Rank ``r``'s track: its life, process start, stages, plugin loads, target imports."""
    end = r.ended or closed
    rec.track(r.pid, f"rank {r.rank} (pid {r.pid})", r.rank + 1)
    rec.add(Span(r.pid, f"rank {r.rank}", start, end, "rank", {"exitcode": r.exitcode}))
    report = r.report_obj
    starts: dict[str, float] = dict(getattr(report, "stage_starts", None) or {})
    if not starts:  # no report: its stages as the launcher saw them, and its start too
        seen = _seen_stages(rec, r, end)
        first = end if seen is None else min(max(seen, start), end)
        rec.add(Span(r.pid, PROCESS_START, start, first, "rank", {"seen_by": "launcher"}))
        _worker_parts(rec, r, launch, start, first)
        return
    seconds: dict[str, float] = report.stage_seconds
    first = min(starts.values())
    # From the launcher's start call to the first stage: a new interpreter (spawn) or a fork
    # (forkserver), the spec's transfer and unpickling.
    rec.add(Span(r.pid, PROCESS_START, start, first, "rank"))
    _worker_parts(rec, r, launch, start, first)
    last = first
    for stage, at in starts.items():
        done = at + seconds.get(stage, 0.0)
        last = max(last, done)
        rec.add(Span(r.pid, stage, at, done, "stage"))
    if not report.inherited:  # a warm worker's plugins loaded in its server, not here
        for p in report.plugins:
            if p.get("started"):
                begun = p["started"]
                rec.add(
                    Span(
                        r.pid,
                        f"plugin {p['name']}",
                        begun,
                        begun + p["seconds"],
                        "plugin",
                        {"dist": p.get("dist"), "version": p.get("version")},
                    )
                )
    for module, begun, done in report.target_imports:
        rec.add(Span(r.pid, f"import {module}", begun, done, "import"))
    entry = r.stage_seconds.get("entry")
    rec.add(
        Span(r.pid, "entry", last, min(end, last + entry) if entry is not None else end, "stage")
    )


#: The category of a start's parts: the trace file has them, the plotted timeline does not.
START_PART = "start"

#: The launcher's part of a rank's start, by the number of its Popen's marks:
#: spawn (start, pickled, spawned, sent) and warm (start, pickled, connected, sent, pid read).
_LAUNCHER_PARTS = {
    4: ("pickle spec", "spawn interpreter", "send spec"),
    5: ("pickle spec", "connect to server", "send spec", "read pid"),
}

#: The worker's part, from the launcher mark that hands it over (index) to its first stage,
#: through its own marks (HELLO's): (launcher mark, [(worker mark, part that ends there)]).
_WORKER_PARTS = {
    4: (2, (("interpreter", "interpreter start-up"), ("child_main", "imports, spec, __main__"))),
    5: (3, (("handed", "server hands over"), ("child_main", "spec, __main__"))),
}


def _parts(
    names: Sequence[str], marks: Sequence[float], start: float, end: float
) -> list[tuple[str, float, float]]:
    """``names[i]`` from ``marks[i]`` to ``marks[i + 1]``, each clamped into ``start..end`` and
    after the one before: marks read by two processes may cross by a scheduling delay."""
    points, last = [], start
    for t in marks:
        last = min(max(t, last), end)
        points.append(last)
    return [(n, a, b) for n, a, b in zip(names, points, points[1:], strict=False)]


def _worker_parts(
    rec: Recorder, r: Any, launch: tuple[float, ...], start: float, first: float
) -> None:
    """A rank's start split, inside its ``process start``: the worker's own parts up to the
    first stage (``child_main to first stage`` the last), from its HELLO marks."""
    plan = _WORKER_PARTS.get(len(launch))
    mine = dict(r.marks)
    if plan is None or not all(m in mine for m, _ in plan[1]):
        return  # no such marks (a rank that died before HELLO): the span stays whole
    index, steps = plan
    marks = [launch[index], *(mine[m] for m, _ in steps), first]
    names = [name for _, name in steps] + ["child_main to first stage"]
    for name, begun, done in _parts(names, marks, start, first):
        rec.add(Span(r.pid, name, begun, done, START_PART))


def _server_spans(rec: Recorder, server: Any) -> None:
    """The warm-start server this launch started: its life until ready, and each stage and
    preload it reported (started when the launcher read its STARTED, which may lag: each one
    begins no earlier than the one before it ended)."""
    pid, (begun, ready) = server.pid, server.start_window
    rec.track(pid, f"warm-start server (pid {pid})", -1)  # above the ranks: they fork from it
    rec.add(Span(pid, "server start", begun, ready, "rank"))
    first = min((min(max(seen, begun), ready) for _, seen, _ in server.steps), default=ready)
    rec.add(Span(pid, "interpreter start-up, imports", begun, first, "stage"))
    last = first
    for step, seen, seconds in server.steps:
        start = min(max(seen, last), ready)
        last = min(start + seconds, ready)
        kind, name = _steps.split_step(step)
        label = f"preload {name}" if kind == _steps.PRELOAD and name else step
        rec.add(Span(pid, label, start, last, "stage", {"seen_by": "launcher"}))


def _seen_stages(rec: Recorder, r: Any, end: float) -> float | None:
    """Stages of a rank that sent no report, as the launcher received their messages; when
    the first of them began (None: it sent none)."""
    begun: dict[str, float] = {}
    first: float | None = None
    for kind, stage, t in r.events:
        at = r.started + t
        if kind == "StageStarted":
            begun[stage] = at
            first = at if first is None else min(first, at)
        elif kind == "StageFinished" and stage in begun:
            rec.add(Span(r.pid, stage, begun.pop(stage), at, "stage", {"seen_by": "launcher"}))
    for stage, at in begun.items():  # started and never finished: it ended with the rank
        rec.add(Span(r.pid, stage, at, max(at, end), "stage", {"seen_by": "launcher"}))
    return first
