"""``spawn_with_plugins()``: start a group of bootstrapped workers and supervise it.

What the launcher promises, and the failures of other launchers it is built
against:

* **The root cause reaches the caller.**  Each rank reports stage progress,
  then READY, or FAILED with stage, traceback and exception, over its own
  pipe; a rank that dies without reporting is described by its exit code or
  signal, the stage it was in and, for fatal signals, the faulthandler dump
  it wrote to a second pipe.  The first failure is raised as a typed,
  picklable :class:`~spawnkit.errors.ChildError` whose message starts with
  that cause and contains the child's traceback; it never points at logs.
* **Every wait is bounded.**  The parent waits on all report pipes and all
  process sentinels at once; startup has a real deadline (``ready_timeout``)
  that names the rank, the stage it is stuck in, for how long, and where (a
  stack dump requested from the stuck worker); teardown is
  grace -> SIGTERM -> SIGKILL with a bounded reap, and pids that survive are
  reported instead of waited on.
* **Nothing is left behind.**  Teardown snapshots each worker's process tree
  before signalling anything; workers die by themselves when the launcher
  dies, and end their own children first (death pipe, plus a guardian process
  per worker on Linux, see ``_parent_death``); every process carries the run id,
  so :func:`spawnkit.cleanup` can sweep orphans; groups still running when the
  interpreter exits are torn down by an ``atexit`` handler.
* **Decided once, in the parent.**  The platform and the allowed plugins are
  resolved here and frozen into every rank's spec; the payload is captured
  once; an entry that is not importable by reference travels by value.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as _mp_wait
from types import TracebackType
from typing import Any

from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import (
    BootstrapTimeoutError,
    ChildError,
    ChildExitedError,
    ChildRaisedError,
    ConfigError,
    PayloadError,
)
from spawnkit.launch import _interrupt
from spawnkit.launch._checks import check_count, check_seconds
from spawnkit.launch._progress import DONE, FAILED, STOPPED, ProgressCallback, ProgressRelay
from spawnkit.launch.specs import build_spec
from spawnkit.namespace import Namespace, get_namespace
from spawnkit.protocol import messages as proto
from spawnkit.protocol.popen import LaunchContext, early_error_text, get_launch_context
from spawnkit.spec import NamespaceConfig, ProcessSpec
from spawnkit.spec._control import LaunchControl

__all__ = ["WorkerGroup", "spawn_with_plugins"]

_log = logging.getLogger("spawnkit.bootstrap")

DEFAULT_READY_TIMEOUT = 300.0
DEFAULT_GRACE_PERIOD = 3.0
_KILL_REAP_TIMEOUT = 5.0
_STACK_DUMP_WAIT = 0.5
_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})

_SIGNAL_HINTS: dict[str, str] = {
    "SIGSEGV": "a crash in native code (a C extension, a device driver or ctypes) touched "
    "invalid memory",
    "SIGBUS": "native code touched unmapped or misaligned memory (often a truncated "
    "memory-mapped file or exhausted /dev/shm)",
    "SIGILL": "native code ran an instruction this CPU does not support (a binary built for "
    "another architecture)",
    "SIGFPE": "native code divided by zero or hit another arithmetic trap",
    "SIGABRT": "native code called abort(): a failed C/C++ assertion or an uncaught C++ "
    "exception (device runtimes and communication libraries do this)",
    "SIGKILL": "it was killed from outside: most often the kernel's out-of-memory killer "
    "(check `dmesg` or the container's memory limit), otherwise `kill -9` or a supervisor",
    "SIGTERM": "something outside the launcher asked it to stop (a supervisor, a scheduler "
    "or a user)",
    "SIGINT": "it was interrupted (Ctrl-C reached its process group)",
    "SIGHUP": "its controlling terminal went away",
    "SIGPIPE": "it wrote to a pipe or socket whose reader had gone",
}


# --------------------------------------------------------------- parent side
@dataclass
class _Rank:
    """The parent's view of one worker; only the launching thread touches it."""

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
    def label(self) -> str:
        host = f", host {self.host}" if self.host else ""
        return f"rank {self.rank} (pid {self.pid}{host})"


_live_groups: weakref.WeakSet[WorkerGroup] = weakref.WeakSet()


def _teardown_live_groups() -> None:
    """At interpreter exit, end groups still running (multiprocessing would join them forever)."""
    for group in list(_live_groups):
        with contextlib.suppress(Exception):
            group.terminate()


atexit.register(_teardown_live_groups)


class WorkerGroup:
    """A running group of bootstrapped workers; a context manager that always tears down.

    Not thread-safe: supervise a group from one thread.  ``join(timeout)``
    polls; the first failure tears the group down and is raised, and raised
    again by every later call.
    """

    def __init__(
        self,
        *,
        run_id: str,
        context: LaunchContext,
        ready_timeout: float | None,
        join_timeout: float | None,
        grace_period: float,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.run_id = run_id
        self._relay = ProgressRelay(progress, run_id)
        self._interrupting = False
        self._ctx = context
        self._ready_timeout = ready_timeout
        self._join_timeout = join_timeout
        self._grace = max(0.0, grace_period)
        self._ranks: list[_Rank] = []
        self._order: list[_Rank] = []  # ranks in the order their failures were seen
        self._failure: ChildError | None = None
        self._closed = False
        self._launched = time.monotonic()
        self._call_timeout: float | None = None  # wait_ready(timeout=) while it runs
        self.unreaped_pids: list[int] = []

    # ---------------------------------------------------------- properties
    @property
    def ranks(self) -> list[int]:
        return [r.rank for r in self._ranks]

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self._ranks]

    @property
    def world_size(self) -> int:
        return len(self._ranks)

    @property
    def exit_codes(self) -> list[int | None]:
        """Per rank: the exit code, ``-N`` for signal N, ``None`` while running."""
        self._poll_exits()
        return [r.exitcode for r in self._ranks]

    @property
    def stages(self) -> list[str]:
        """Per rank, the stage it last reported starting (``entry`` once ready)."""
        return [r.stage for r in self._ranks]

    @property
    def timeline(self) -> list[list[tuple[str, str, float]]]:
        """Per rank: (message, stage, seconds since its start call) as the launcher saw them.

        Where a slow start goes (interpreter and ``__main__`` re-import before
        the first message, then each stage), without asking the worker.
        """
        return [list(r.events) for r in self._ranks]

    @property
    def failure(self) -> ChildError | None:
        return self._failure

    @property
    def start_method(self) -> str:
        return self._ctx.start_method

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._failure else "running"
        return f"<WorkerGroup run_id={self.run_id} ranks={self.world_size} {state}>"

    # ---------------------------------------------------------------- API
    def wait_ready(self, timeout: float | None = None) -> list[Any]:
        """Block until every rank passed its bootstrap; their ``BootstrapReport``s by rank.

        ``timeout`` overrides the remaining ``ready_timeout``; either way,
        expiry tears the group down and raises ``BootstrapTimeoutError``
        naming the limit that expired.
        """
        timeout = check_seconds(
            "timeout", timeout, none="the group's ready_timeout", zero_ok=True, call="wait_ready"
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        self._call_timeout = timeout
        try:
            self._pump(lambda: all(r.ready for r in self._ranks), deadline, ready_deadline=deadline)
        finally:
            self._call_timeout = None
        return [r.report_obj for r in self._ranks]

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` for every rank to finish; True once every rank's entry returned.

        False when ``timeout`` passes first (call again to keep waiting), and
        False, at once, after :meth:`terminate` stopped a rank before its entry
        returned: stopped work is not done work.  Raises the group's first failure.
        """
        timeout = check_seconds("timeout", timeout, none="no limit", zero_ok=True, call="join")
        deadline = None if timeout is None else time.monotonic() + timeout
        done = self._pump(lambda: all(r.exitcode is not None for r in self._ranks), deadline)
        if not done:
            return False
        self._close(initial_grace=0.0)
        return not any(r.terminated and r.result is None for r in self._ranks)

    def results(self, timeout: float | None = None) -> list[Any]:
        """The entry functions' return values by rank, once all finished (see :meth:`join`)."""
        if not self.join(timeout) and not self._closed:
            waited = timeout if timeout is not None else 0.0
            running = [r.label for r in self._ranks if r.exitcode is None]
            raise BootstrapTimeoutError(
                f"results() timed out after {waited:.1f} s: {', '.join(running)} still running "
                "their entry function. The group keeps running; call results() again with a "
                "longer timeout, or terminate() it.",
                stage="entry",
                waited_s=waited,
            )
        values: list[Any] = []
        for r in self._ranks:
            res = r.result
            if res is None and (r.terminated or r.exitcode not in (0, None)):
                # Stopped by terminate() (the only way to get here without a failure):
                # a None would read as the entry's return value.
                raise ChildExitedError(
                    f"{r.label} has no result: it was stopped (exit code {r.exitcode}) by "
                    "terminate() before its entry function returned. Call results() before "
                    "terminate(), or join() to wait for the entry.",
                    rank=r.rank,
                    pid=r.pid,
                    host=r.host,
                    stage=r.stage,
                    exit_code=r.exitcode,
                )
            if res is None or res.data is None:
                values.append(None)
                continue
            try:
                values.append(self._ctx.loads(res.data))
            except Exception as exc:
                raise PayloadError(
                    f"{r.label} returned a value the launcher cannot unpickle: "
                    f"{type(exc).__name__}: {exc}. Return plain data, or make the module "
                    "defining the value's type importable in the launcher.",
                    stage="entry",
                    rank=r.rank,
                    pid=r.pid,
                    host=r.host,
                ) from exc
        return values

    def terminate(self) -> None:
        """Stop every worker now: SIGTERM, ``grace_period``, SIGKILL, bounded reap."""
        self._close(initial_grace=0.0)

    close = terminate

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._interrupting = True
        self.terminate()

    # ------------------------------------------------------- event pumping
    def _pump(
        self,
        until: Callable[[], bool],
        deadline: float | None,
        *,
        ready_deadline: float | None = None,
    ) -> bool:
        """Ctrl-C while waiting stops the group (bounded) and is re-raised, never swallowed."""
        try:
            return self._pump_events(until, deadline, ready_deadline=ready_deadline)
        except KeyboardInterrupt:
            self._interrupting = True
            for r in self._ranks:
                r.terminated = r.terminated or r.exitcode is None
            self._close(initial_grace=0.0)
            raise

    def _pump_events(
        self,
        until: Callable[[], bool],
        deadline: float | None,
        *,
        ready_deadline: float | None = None,
    ) -> bool:
        """Process reports and exits until ``until()``; False at ``deadline``; raises failures."""
        if self._failure is not None:
            raise self._failure
        if ready_deadline is None and self._ready_timeout is not None:
            ready_deadline = self._launched + self._ready_timeout
        join_deadline = None if self._join_timeout is None else self._launched + self._join_timeout
        while True:
            if self._relay.error is not None:
                self._close(initial_grace=0.0)
                raise self._relay.error
            # A failure recorded outside this loop (``exit_codes`` polls exits) comes
            # before ``until()``: "every rank exited" must not turn it into success.
            first = self._first_failure() if not self._closed else None
            if first is not None:
                self._fail(first)
            if until():
                return True
            if self._closed:
                return until()
            now = time.monotonic()
            not_ready = [r for r in self._ranks if not r.ready and r.exitcode is None]
            if not_ready and ready_deadline is not None and now >= ready_deadline:
                self._fail(self._ready_timeout_error(not_ready, now))
            if join_deadline is not None and now >= join_deadline:
                running = [r for r in self._ranks if r.exitcode is None]
                if running:
                    self._fail(self._join_timeout_error(running, now))
            if deadline is not None and now >= deadline:
                return False
            limits = [d for d in (deadline, join_deadline) if d is not None]
            if not_ready and ready_deadline is not None:
                limits.append(ready_deadline)
            wait_for = None if not limits else max(0.0, min(limits) - now)
            self._wait_once(wait_for)
            first = self._first_failure()
            if first is not None:
                self._fail(first)

    def _wait_once(self, timeout: float | None) -> None:
        by_obj: dict[Any, tuple[str, _Rank]] = {}
        for r in self._ranks:
            if r.report_open:
                by_obj[r.report] = ("report", r)
            if r.exitcode is None:
                by_obj[r.proc.sentinel] = ("exit", r)
        if not by_obj:
            if timeout:
                time.sleep(min(timeout, 0.05))
            return
        ready = _mp_wait(list(by_obj), timeout)
        # Reports first: a FAILED message is the root cause of the exit that follows it.
        for obj in ready:
            kind, r = by_obj[obj]
            if kind == "report":
                self._drain(r)
        for obj in ready:
            kind, r = by_obj[obj]
            if kind == "exit":
                self._on_exit(r)

    def _drain(self, r: _Rank) -> None:
        """Read every message already in the rank's pipe; never blocks on an empty pipe."""
        while r.report_open:
            try:
                if not r.report.poll(0):
                    return
                msg = r.report.recv()
            except (EOFError, OSError):
                r.report_open = False
                return
            except Exception as exc:  # a message that does not unpickle here
                _log.warning("%s sent an unreadable report message: %s", r.label, exc)
                continue
            self._on_message(r, msg)

    def _on_message(self, r: _Rank, msg: Any) -> None:
        now = time.monotonic()
        r.events.append((type(msg).__name__, getattr(msg, "stage", ""), now - r.started))
        if isinstance(msg, proto.Hello):
            r.host, r.dump_signal = msg.host, msg.dump_signal
        elif isinstance(msg, proto.StageStarted):
            r.stage, r.stage_since = msg.stage, now
            self._relay.emit(r.rank, msg.stage, now - r.started)
        elif isinstance(msg, proto.StageFinished):
            r.stage_seconds[msg.stage] = msg.seconds
        elif isinstance(msg, proto.Ready):
            r.ready, r.report_obj = True, msg.report
            r.stage, r.stage_since = "entry", now
            self._relay.emit(r.rank, "entry", now - r.started)
        elif isinstance(msg, proto.Result):
            r.result = msg
            r.ready = True
        elif isinstance(msg, proto.Failed | proto.Exited) and r.failure is None:
            r.failure = msg
            r.stage = msg.stage
            self._order.append(r)

    def _on_exit(self, r: _Rank) -> None:
        self._drain(r)
        r.proc.join(1.0)  # the sentinel fires a moment before the process can be reaped
        code = r.proc.exitcode
        r.exitcode = code if code is not None else r.exitcode
        if r.exitcode is None:
            return
        r.fault_text = self._read_fault(r)
        r.early_text = early_error_text(r.proc)
        self._tell_end(r)
        if r.terminated or r.failure is not None:
            return
        if r.exitcode != 0 or not r.ready or (r.result is not None and r.result.error):
            self._order.append(r)

    def _tell_end(self, r: _Rank) -> None:
        """The progress callback's last word on a rank: done, failed or stopped."""
        if r.end_told:
            return
        r.end_told = True
        named = self._failure is not None and self._failure.rank == r.rank
        if r.terminated and not named and (r.failure is None or self._interrupting):
            end = STOPPED
        elif (
            named
            or r.failure is not None
            or r.exitcode != 0
            or not r.ready
            or (r.result is not None and r.result.error)
        ):
            end = FAILED
        else:
            end = DONE
        self._relay.emit(r.rank, end, time.monotonic() - r.started)

    def _poll_exits(self) -> None:
        if self._closed:
            return
        for r in self._ranks:
            if r.exitcode is None and r.proc.exitcode is not None:
                self._on_exit(r)

    def _read_fault(self, r: _Rank, wait: float = 0.0) -> str:
        if r.fault is None:
            return r.fault_text
        chunks: list[bytes] = [r.fault_text.encode()] if r.fault_text else []
        deadline = time.monotonic() + wait
        fd = r.fault.fileno()
        while True:
            left = deadline - time.monotonic()
            if not _mp_wait([r.fault], max(left, 0.0)):
                break
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
            if wait:  # a dump arrives in one burst: stop after a short quiet period
                deadline = time.monotonic() + 0.05
        return b"".join(chunks).decode("utf-8", "replace")

    def _first_failure(self) -> ChildError | None:
        if not self._order:
            return None
        r = self._order[0]
        return self._error_for(r)

    # --------------------------------------------------------------- errors
    def _others(self, failed: _Rank) -> str:
        parts = [f"rank {o.rank}: {o.stage}" for o in self._ranks if o is not failed]
        return "; ".join(parts) if parts else "none"

    def _error_for(self, r: _Rank) -> ChildError:
        effect = (
            f"Effect: worker group {self.run_id} ({self.world_size} rank(s), "
            f"{self._ctx.start_method}/{self._ctx.package}) is being torn down; the other "
            f"ranks were at: {self._others(r)}."
        )
        msg = r.failure
        if isinstance(msg, proto.Failed):
            exc = proto.load_exception(msg.exc_bytes, self._ctx.loads)
            when = "" if msg.stage != Stage.ENTRY else " (its entry function raised)"
            text = (
                f"{r.label} failed in stage {msg.stage!r}{when}: {msg.exc_type}: {msg.message}\n"
                f"{self._preload_hint(exc)}{effect}\n"
                f"Child traceback ({r.label}):\n{msg.traceback_text.rstrip()}"
            )
            err: ChildError = ChildRaisedError(
                text,
                rank=r.rank,
                pid=r.pid,
                host=r.host,
                stage=msg.stage,
                exc_type=msg.exc_type,
                traceback_text=msg.traceback_text,
                child_exception=exc,
            )
            if exc is not None:
                err.__cause__ = exc
            return err
        if msg is None and r.early_text and not r.host:
            return self._early_error(r, effect)
        if r.result is not None and r.result.error:
            return ChildRaisedError(
                f"{r.label} finished its entry function, but {r.result.error}\n{effect}",
                rank=r.rank,
                pid=r.pid,
                host=r.host,
                stage="entry",
                exc_type="pickle.PicklingError",
                traceback_text="",
            )
        code = r.exitcode if not isinstance(msg, proto.Exited) else msg.code
        if r.exitcode is not None and r.exitcode < 0:
            code = r.exitcode
        return self._exited_error(r, code, msg if isinstance(msg, proto.Exited) else None, effect)

    def _preload_hint(self, exc: BaseException | None) -> str:
        """A guard finding whose import site is this group's warm-start preload: say so."""
        preload = self._ctx.server.preload if self._ctx.server is not None else ()
        findings = getattr(exc, "findings", None) or []
        hits = sorted(
            {
                str(f.get("module", ""))
                for f in findings
                if isinstance(f, dict)
                and any(
                    str(f.get("module", "")) == p
                    or str(f.get("module", "")).startswith(p + ".")
                    or "_warm_server" in str(f.get("first_import", ""))
                    for p in preload
                )
            }
        )
        if not hits:
            return ""
        return (
            f"Launcher: the warm-start server imported {', '.join(hits)} through "
            f"preload={list(preload)} before any hook was applied: with "
            "SPAWNKIT_WARM_BOOTSTRAP=worker each worker applies hooks itself, after the "
            "server's preloads. Unset it (the server then applies hooks before preloading), or "
            "remove the target (or the module that imports it) from preload=.\n"
        )

    def _early_error(self, r: _Rank, effect: str) -> ChildRaisedError:
        text = r.early_text.rstrip()
        last = _exception_summary(text)
        exc_type, _, message = last.partition(": ")
        if "bootstrapping phase" in text or "freeze_support" in text:
            cause = (
                "Cause: the launching script starts workers when it is imported, and a spawned "
                "worker re-imports it (as __mp_main__). Put the code that calls "
                'spawn_with_plugins() under `if __name__ == "__main__":`.'
            )
        else:
            cause = (
                "It failed before its bootstrap began: while re-importing the launching "
                "script (__main__, as __mp_main__) or unpickling its spec. Code at the top "
                "level of the launching script runs again in every spawned worker."
            )
        return ChildRaisedError(
            f"{r.label} failed in stage {proto.PRE_BOOTSTRAP!r}: {last}\n{cause}\n{effect}\n"
            f"Child traceback ({r.label}):\n{text}",
            rank=r.rank,
            pid=r.pid,
            host=r.host,
            stage=proto.PRE_BOOTSTRAP,
            exc_type=exc_type if message else "",
            traceback_text=text,
        )

    def _exited_error(
        self, r: _Rank, code: int | None, exited: proto.Exited | None, effect: str
    ) -> ChildExitedError:
        phase = "after it reported ready" if r.ready else "before it reported ready"
        signal_name = ""
        if code is not None and code < 0:
            try:
                signal_name = signal.Signals(-code).name
            except ValueError:
                signal_name = f"signal {-code}"
            head = f"{r.label} was killed by {signal_name} in stage {r.stage!r}, {phase}."
            hint = _SIGNAL_HINTS.get(signal_name, "an uncaught signal ended it")
            detail = f"Likely cause: {hint}."
        elif exited is not None:
            head = f"{r.label} called sys.exit({code}) in stage {exited.stage!r}, {phase}."
            detail = f"Where it exited:\n{exited.traceback_text.rstrip()}"
        elif code == 0:
            head = f"{r.label} exited with code 0 in stage {r.stage!r}, {phase}."
            detail = (
                "Likely cause: code in that stage ended the process (os._exit(0) or a C "
                "library's exit()) instead of raising, so the bootstrap could not finish."
            )
        elif r.stage == proto.PRE_BOOTSTRAP and not r.host:
            head = f"{r.label} exited with code {code} before its bootstrap began."
            detail = (
                "Likely cause: the new interpreter failed while re-importing the launching "
                "script (__main__, as __mp_main__) or unpickling its spec: a script that starts "
                'workers at import time needs `if __name__ == "__main__":` around the launch; '
                "the worker printed that traceback to its stderr."
            )
        else:
            head = (
                f"{r.label} exited with code {code} in stage {r.stage!r}, {phase}, without "
                "raising a Python exception."
            )
            detail = (
                f"Likely cause: code in that stage called os._exit({code}) or a C library's "
                f"exit({code}), which skips Python's error handling; exit code {code} is "
                "what that code chose."
            )
        fault = _current_thread_first(r.fault_text.strip())
        if fault:
            detail += f"\nFatal error report written by the worker (faulthandler):\n{fault}"
        return ChildExitedError(
            f"{head}\n{detail}\n{effect}",
            rank=r.rank,
            pid=r.pid,
            host=r.host,
            stage=r.stage if exited is None else exited.stage,
            exit_code=code,
            signal_name=signal_name,
            fault_text=fault,
        )

    def _ready_timeout_error(self, stuck: list[_Rank], now: float) -> BootstrapTimeoutError:
        stacks = self._dump_stacks(stuck)
        first = stuck[0]
        in_stage = now - (first.stage_since or first.started)
        waited = now - self._launched
        others = ", ".join(
            f"rank {r.rank} in {r.stage!r} for {now - (r.stage_since or r.started):.1f} s"
            for r in stuck[1:]
        )
        if self._call_timeout is not None:
            limit = f"wait_ready(timeout={self._call_timeout:g}) expired"
            knob = "a larger timeout= to wait_ready() (None waits up to the group's ready_timeout)"
        else:
            limit = (
                f"the group's startup deadline passed after {waited:.1f} s "
                f"(ready_timeout={self._ready_timeout:g})"
            )
            knob = "a larger ready_timeout= to spawn_with_plugins()"
        text = (
            f"{first.label} is stuck in stage {first.stage!r}: it has been in that stage for "
            f"{in_stage:.1f} s and {limit}.\n"
            f"{len(stuck)} of {self.world_size} rank(s) not ready"
            + (f"; also {others}" if others else "")
            + f".\nFix: if that stage is legitimately slow, pass {knob}; "
            "otherwise the stack below shows where it hangs.\n"
            f"Effect: worker group {self.run_id} is being torn down.\n"
        )
        if stacks.get(first.rank):
            text += f"Stack of {first.label} at the deadline:\n{stacks[first.rank].rstrip()}"
        else:
            text += (
                f"No stack dump: rank {first.rank} had not started its bootstrap yet (it was "
                "still starting the interpreter, re-importing __main__ or unpickling its spec)."
                if first.stage == proto.PRE_BOOTSTRAP
                else "No stack dump could be obtained from the worker."
            )
        return BootstrapTimeoutError(
            text,
            rank=first.rank,
            pid=first.pid,
            host=first.host,
            stage=first.stage,
            waited_s=in_stage,
            stacks=stacks,
            not_ready={r.rank: r.stage for r in stuck},
        )

    def _join_timeout_error(self, running: list[_Rank], now: float) -> BootstrapTimeoutError:
        stacks = self._dump_stacks(running)
        first = running[0]
        text = (
            f"{first.label} was still running (stage {first.stage!r}) when the group's "
            f"join_timeout={self._join_timeout} s passed; {len(running)} of {self.world_size} "
            "rank(s) had not finished.\nFix: pass a larger join_timeout= (or None for no limit) "
            "if the work is legitimately long; otherwise the stack below shows where it hangs.\n"
            f"Effect: worker group {self.run_id} is being torn down.\n"
        )
        if stacks.get(first.rank):
            text += f"Stack of {first.label} at the deadline:\n{stacks[first.rank].rstrip()}"
        return BootstrapTimeoutError(
            text,
            rank=first.rank,
            pid=first.pid,
            host=first.host,
            stage=first.stage,
            waited_s=now - self._launched,
            stacks=stacks,
        )

    def _dump_stacks(self, ranks: Sequence[_Rank]) -> dict[int, str]:
        """Ask each worker's faulthandler for all its threads' stacks; bounded wait."""
        asked: list[_Rank] = []
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
            stacks[r.rank] = _current_thread_first(
                self._read_fault(r, wait=_STACK_DUMP_WAIT).strip()
            )
            r.fault_text = ""
        return stacks

    def _fail(self, err: ChildError) -> None:
        self._failure = err
        self._close(initial_grace=self._grace)
        err.unreaped_pids = list(self.unreaped_pids)
        if self.unreaped_pids:
            err.args = (
                f"{err.args[0]}\nWarning: pid(s) {self.unreaped_pids} survived SIGKILL and "
                "could not be reaped (uninterruptible sleep, usually a device or filesystem "
                "call); they may still hold resources.",
            )
        raise err

    # ------------------------------------------------------------ teardown
    def _close(self, *, initial_grace: float) -> None:
        if self._closed:
            return
        told = self._relay.error
        try:
            self._stop_workers(initial_grace)
        finally:
            self._closed = True
            _live_groups.discard(self)
            for r in self._ranks:
                self._tell_end(r)
            if self._relay.error is not None and self._relay.error is not told:
                _log.warning(
                    "worker group %s: %s",
                    self.run_id,
                    self._relay.error,
                    exc_info=self._relay.error.__cause__,
                )
            for r in self._ranks:
                for conn in (r.report, r.death, r.fault):
                    with contextlib.suppress(OSError):
                        conn.close()
                if r.exitcode is not None:
                    with contextlib.suppress(ValueError):
                        r.proc.close()
            from spawnkit.launch._cleanup import forget_run

            forget_run(self.run_id)

    def _stop_workers(self, initial_grace: float) -> None:
        """Teardown; a Ctrl-C during it sends SIGKILL at once, and is raised after unless the
        teardown was itself for a Ctrl-C (that one is still on its way up)."""
        try:
            with _interrupt.second_interrupt_escalates():
                try:
                    self._stop_gently(initial_grace, signal.SIGTERM)
                    return
                except _interrupt.EscalateTeardown:
                    self._stop_gently(0.0, signal.SIGKILL)
        except _interrupt.EscalateTeardown:
            pass  # pressed just as the teardown ended: nothing is left to kill
        if not self._interrupting:
            self._interrupting = True
            raise KeyboardInterrupt

    def _stop_gently(self, initial_grace: float, first: int) -> None:
        if initial_grace > 0:
            end = time.monotonic() + initial_grace
            while any(r.exitcode is None for r in self._ranks) and time.monotonic() < end:
                self._wait_once(max(0.0, end - time.monotonic()))
        from spawnkit.launch._cleanup import _tagged, snapshot_tree

        live = [r for r in self._ranks if r.exitcode is None]
        # The whole tree is captured before anything is signalled: once a worker is dead
        # its children are re-parented and no walk from it can find them.
        tree = snapshot_tree(r.pid for r in live)
        workers = {r.pid for r in live}
        extra = [p for p in _tagged(self.run_id) if p.pid not in workers]
        descendants = [p for p in tree if p.pid not in workers]
        known = {p.pid for p in descendants}
        descendants += [p for p in extra if p.pid not in known and p.pid != os.getpid()]
        for r in live:
            r.terminated = True
        self._signal_all(live, descendants, first)
        if live or descendants:
            self._reap(live, descendants, self._grace)
        live = [r for r in live if r.exitcode is None]
        descendants = [p for p in descendants if _alive(p)]
        if live or descendants:
            self._signal_all(live, descendants, signal.SIGKILL)
            self._reap(live, descendants, _KILL_REAP_TIMEOUT)
        unreaped = [r.pid for r in live if r.exitcode is None]
        unreaped += [p.pid for p in descendants if _alive(p)]
        self.unreaped_pids = sorted(unreaped)
        if unreaped:
            _log.warning(
                "worker group %s: pid(s) %s survived SIGKILL and could not be reaped",
                self.run_id,
                self.unreaped_pids,
            )

    def _signal_all(self, live: list[_Rank], descendants: list[Any], sig: int) -> None:
        for r in live:
            with contextlib.suppress(OSError):
                os.kill(r.pid, sig)
        for p in descendants:
            with contextlib.suppress(Exception):
                p.send_signal(sig)

    def _reap(self, live: list[_Rank], descendants: list[Any], timeout: float) -> None:
        """Wait for workers through their sentinels (never psutil: it would reap our children)."""
        end = time.monotonic() + timeout
        while True:
            pending = [r for r in live if r.exitcode is None]
            left = end - time.monotonic()
            if not pending or left <= 0:
                break
            for obj in _mp_wait([r.proc.sentinel for r in pending], left):
                for r in pending:
                    if r.proc.sentinel == obj:
                        self._drain(r)
                        r.proc.join(max(0.0, min(1.0, end - time.monotonic())))
                        if r.proc.exitcode is not None:
                            r.exitcode = r.proc.exitcode
                            r.fault_text = self._read_fault(r)
        # Polled, not psutil.wait_procs: a descendant that is not our child stays a zombie
        # until its own parent reaps it, and waiting for that would use up the whole timeout.
        while any(_alive(p) for p in descendants) and time.monotonic() < end:
            time.sleep(0.02)

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and any(r.exitcode is None for r in self._ranks):
            _log.warning(
                "worker group %s was garbage-collected while running; use it as a context "
                "manager or call terminate()",
                self.run_id,
            )


def _current_thread_first(dump: str) -> str:
    """Reorder a faulthandler dump so the crashing thread's stack comes first (root cause)."""
    blocks = dump.split("\n\n")
    current = [b for b in blocks if b.startswith("Current thread")]
    if not current:
        return dump
    header = [b for b in blocks if b.startswith("Fatal Python error")]
    rest = [b for b in blocks if b not in current and b not in header]
    return "\n\n".join([*header, *current, *rest])


def _exception_summary(text: str) -> str:
    """``Type: message`` from a formatted traceback, joining a message spread over lines."""
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    rest = lines[frames[-1] + 1 :] if frames else lines
    for i, line in enumerate(rest):
        if line and not line.startswith(" "):
            more = [x.strip() for x in rest[i + 1 : i + 4] if x.strip()]
            return " ".join([line.strip(), *more])[:400]
    return lines[-1].strip() if lines else "unknown error"


def _alive(proc: Any) -> bool:
    try:
        return bool(proc.is_running()) and proc.status() != "zombie"
    except Exception:
        return False


# --------------------------------------------------------------- launching
def spawn_with_plugins(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    nprocs: int = 1,
    namespace: Namespace | NamespaceConfig | str | None = None,
    start_method: str = "spawn",
    preload: Sequence[str] = (),
    context: str = "multiprocessing",
    env: dict[str, str] | None = None,
    ready_timeout: float | None = DEFAULT_READY_TIMEOUT,
    join_timeout: float | None = None,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    rank_extra: Callable[[int], Mapping[str, Any]] | None = None,
    progress: ProgressCallback | None = None,
) -> WorkerGroup:
    """Start ``nprocs`` workers that each bootstrap (platform, plugins, hooks) and run ``entry``.

    ``entry`` is called as ``entry(payload)`` (or ``entry()`` without a
    payload) in every rank after its hooks are applied; ranks read their
    rank and world size from ``spawnkit.bootstrap.current_spec()``.
    ``start_method="forkserver"`` with ``preload=("torch", ...)`` forks
    workers from a server that imported those modules once (warm start).
    ``ready_timeout`` bounds startup (None: unbounded), ``join_timeout`` the
    whole run (None: unbounded, for servers), ``grace_period`` each teardown
    step.  ``rank_extra(rank)`` adds per-rank values to that rank's
    ``spec.extra``: how an engine hands each rank its own ``Connection`` (the
    seed's ``pipe_writer``); close your copy of a child's end after this
    returns.  ``progress(rank, stage, elapsed)`` is called from the group's wait
    calls as each rank starts a stage, then once with ``done``/``failed``/
    ``stopped`` (see ``spawnkit.launch._progress``; a callback that raises
    stops the run with ``ProgressCallbackError``).  Ctrl-C during a wait call
    stops the group (bounded) and is re-raised; a second Ctrl-C meanwhile
    kills the workers at once.  Returns a running :class:`WorkerGroup`; use it
    as a context manager.
    """
    check_count("nprocs", nprocs)
    check_seconds("ready_timeout", ready_timeout, none="no startup limit")
    check_seconds("join_timeout", join_timeout, none="no limit")
    if (
        grace_period is None
        or check_seconds("grace_period", grace_period, none="", zero_ok=True) is None
    ):
        raise ConfigError(
            "grace_period=None: must be a number of seconds (0: SIGKILL right after SIGTERM).",
            setting="grace_period",
        )
    preload = tuple(preload)
    ns = get_namespace(namespace)
    template = build_spec(entry, payload, nprocs=nprocs, namespace=ns, env=env)
    run_id = template.run_id
    lctx = get_launch_context(context, start_method, preload, template, ready_timeout)
    # Spawned workers start with SIGINT ignored, a terminal's Ctrl-C being ours to handle.
    deaf = lctx.server is None and _interrupt.will_start_deaf()
    control = LaunchControl(
        parent_pid=os.getpid(),
        # Only a spawned worker's parent is this process (a forkserver worker's is the
        # server): there it checks getppid() against our pid, to catch a launcher that
        # died before the worker armed its watch.
        pdeathsig=start_method == "spawn" and threading.current_thread() is threading.main_thread(),
        context=context,
        sigint_restore=deaf,
    )
    template = template.replace(_control=control)
    group = WorkerGroup(
        run_id=run_id,
        context=lctx,
        ready_timeout=ready_timeout,
        join_timeout=join_timeout,
        grace_period=grace_period,
        progress=progress,
    )
    _live_groups.add(group)
    try:
        for rank in range(nprocs):
            extra = dict(rank_extra(rank)) if rank_extra is not None else {}
            with _interrupt.children_start_deaf(deaf):
                group._ranks.append(_start_rank(lctx, template, rank, extra))
            group._relay.emit(rank, proto.PRE_BOOTSTRAP, 0.0)
        # psutil is imported here, not at module level: a launching script that imports this
        # module is re-imported by every spawned worker, which should not pay for it.  Inside
        # the try: a Ctrl-C during that import must not leave the started workers running.
        from spawnkit.launch._cleanup import record_run

        record_run(run_id, group.pids)
    except BaseException:
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            group._interrupting = True
        group.terminate()
        raise
    return group


def _start_rank(
    lctx: LaunchContext, template: ProcessSpec, rank: int, extra: dict[str, Any]
) -> _Rank:
    report_r, report_w = lctx.pipe()
    death_r, death_w = lctx.pipe()
    fault_r, fault_w = lctx.pipe()
    spec = template.replace(
        rank=rank,
        local_rank=rank,
        report_conn=report_w,
        death_conn=death_r,
        extra=extra,
        _control=template._control.replace(fault_conn=fault_w),
    )
    proc = lctx.process(spec, f"spawnkit-{template.run_id}-rank{rank}")
    try:
        lctx.start(proc)
    except BaseException:
        for conn in (report_r, report_w, death_r, death_w, fault_r, fault_w):
            conn.close()
        raise
    finally:
        # The child has its own copies now; ours must go, or EOF would never arrive.
        for conn in (report_w, death_r, fault_w):
            with contextlib.suppress(OSError):
                conn.close()
    os.set_blocking(fault_r.fileno(), False)
    now = time.monotonic()
    return _Rank(rank, proc, report_r, death_w, fault_r, proc.pid, started=now, stage_since=now)
