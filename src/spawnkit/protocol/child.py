"""The worker's side of a launch: run the staged bootstrap and tell the launcher how it went.

``child_main`` is the target every spawnkit worker process runs.  It does as
little as possible itself, in this order, before the bootstrap takes over:
make crashes and hangs diagnosable (``faulthandler`` writes fatal-signal
tracebacks, and stack dumps on request, to a pipe the launcher reads), say
hello, then run the stages (``bootstrap_process`` with the heap frozen after the hooks:
``Bootstrapper.freeze_gc``) with a listener
that forwards stage progress.  Whatever happens next (a stage raises, the
entry raises, someone calls ``sys.exit``, the entry returns) is reported
over the rank's report pipe *before* the process ends, so the launcher never
has to guess a root cause from an exit code when Python was still running.

The start data it reads first (preparation data, then the ``Process`` with
the spec) is written by ``send_start_data`` at the end of this module: the
launcher's half of that one exchange sits beside the child's.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import types
from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING
from spawnkit.bootstrap.stages import Stage
from spawnkit.protocol import messages as proto
from spawnkit.spec import ProcessSpec

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.protocol._failed import Failed

__all__ = [
    "START_MARKS",
    "arm_guard",
    "child_main",
    "note_start",
    "picklers",
    "report_early",
    "report_pages",
    "send_early",
    "send_start_data",
    "set_early_fd",
    "spawn_main_reporting",
]


#: What a worker notes of its start before ``child_main`` (``note_start``), then ``child_main``:
#: ``interpreter`` (spawn: the command line's first statement ran, the interpreter is up),
#: ``handed`` (warm: a spare was handed its request, or a worker was forked for it).
START_MARKS = ("interpreter", "handed", "child_main")
_marks: list[tuple[str, float]] = []


def note_start(name: str, at: float) -> None:
    """Keep one of ``START_MARKS``; HELLO carries them to the launcher (its start-up trace)."""
    _marks.append((name, at))


def arm_guard() -> None:
    """First statement of a fork server: record imports from now on (see ``guard.arm``)."""
    from spawnkit.bootstrap import guard
    from spawnkit.spec import _phase

    guard.arm()
    _phase.enter_worker()


def spawn_main_reporting(package: str, early_fd: int, **kwds: Any) -> None:
    """Run the package's ``spawn_main``; a failure before ``child_main`` goes to ``early_fd``.

    The report pipe does not exist before the spec is unpickled; without this the launcher
    would see only "exit code 1".  ``SystemExit`` is how ``spawn_main`` ends and passes.
    """
    import importlib

    set_early_fd(early_fd)
    try:
        importlib.import_module(f"{package}.spawn").spawn_main(**kwds)
    except SystemExit:
        raise
    except BaseException as exc:  # a KeyboardInterrupt raised by the re-imported script too
        report_early(exc, package)
        raise


_early_fd: int | None = None


def set_early_fd(fd: int | None) -> None:
    """Name this process's early-error pipe (spawn: the command line; warm: the fork server)."""
    global _early_fd
    _early_fd = fd


def report_early(exc: BaseException, package: str, stage: str = proto.PRE_BOOTSTRAP) -> None:
    """Send ``exc``'s failure record down the early-error pipe, if this process has one."""
    if _early_fd is None:
        return
    from spawnkit.protocol import failure  # only on a failure path (issue #23)

    dumps, loads = picklers(package)
    send_early(failure.record(stage, exc, dumps, loads))


def send_early(rec: Failed) -> None:
    """Write ``rec`` to the early-error pipe, once; what does not fit its buffer is dropped.

    The pipe is read only after this process exited, so a write must never block.
    """
    global _early_fd
    fd, _early_fd = _early_fd, None
    if fd is None:
        return
    data = pickle.dumps(tuple(rec))
    if len(data) > _EARLY_LIMIT:
        keep = rec.traceback_text[-(_EARLY_LIMIT // 2) :]
        data = pickle.dumps(tuple(rec._replace(exc_bytes=None, traceback_text=keep)))
    try:
        os.write(fd, data[:_EARLY_LIMIT])
    except OSError:
        pass


#: Below a pipe's smallest buffer (64 KiB on Linux): a write that never blocks an exiting child.
_EARLY_LIMIT = 60000


def picklers(kind: str) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """``(dumps, loads)`` of a context: the child pickles with one, the launcher unpickles."""
    if kind == "multiprocess":
        import dill

        return dill.dumps, dill.loads
    return (lambda obj: pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), pickle.loads


def _arm_faulthandler(conn: Any) -> int | None:
    """Send fatal-signal tracebacks, and stack dumps on SIGUSR1, to the launcher's fault pipe;
    the signal it dumps on goes to the launcher in HELLO.

    A warm worker inherits the handlers its server's plugins and preloads installed
    (``signal.signal(SIGUSR1, on_usr1)``): registering over one replaced it at the C level,
    so the plugin's handler never ran while ``getsignal()`` still named it.  A signal with a
    handler of the process's own is left to it (SIGUSR2 dumps instead, or nothing does).
    """
    if conn is None:
        return None
    try:
        faulthandler.enable(file=conn, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        return None
    register = getattr(faulthandler, "register", None)
    for name in ("SIGUSR1", "SIGUSR2"):
        sig = getattr(signal, name, None)
        if register is None or sig is None or signal.getsignal(sig) is not signal.SIG_DFL:
            continue
        try:
            register(sig, file=conn, all_threads=True, chain=False)
        except (OSError, ValueError, RuntimeError):
            return None
        return int(sig)
    return None


def _deaf(signum: int, frame: object) -> None:
    """SIGINT while the bootstrap runs: dropped (the launcher tears the group down)."""


def _hear_sigint(on: bool) -> None:
    """SIGINT raises KeyboardInterrupt (``on``) or is dropped; only in a worker started deaf
    (SIGINT blocked): set first, then unblocked, so a Ctrl-C held since the start is dropped.

    Heard again only where it is still ours: a handler that a plugin or the entry's module
    installed meanwhile (even ``SIG_IGN``) is theirs to keep, as in a warm worker, which
    inherits it from its server.  A handler of our own, not ``SIG_IGN``, tells the two apart,
    and a process a plugin starts meanwhile gets the default back at ``exec``, not ignored.
    """
    try:
        if on and signal.getsignal(signal.SIGINT) is not _deaf:
            return
        signal.signal(signal.SIGINT, signal.default_int_handler if on else _deaf)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    except (ValueError, OSError, AttributeError):
        pass


class _Reporter:
    """A ``StageListener`` that forwards progress; it never raises into the bootstrap.

    A message that spawnkit's own code always follows at once with another (a stage's
    FINISHED, then the next stage's STARTED or READY; READY, then the entry's STARTED) is
    held and written with that next one: one write, so one wake-up of the launcher, instead
    of two.  What announces work that may block (a STARTED, HELLO in a cold worker) or ends
    the report (RESULT, FAILED, EXITED, ``close``) is written at once, with anything held.
    A stage that cannot block where it runs (``quiet``, see ``_quiet_stages``) has its STARTED
    held too.  Each write wakes the launcher, whose reading takes this CPU from a worker on a
    busy two-core machine (0.1 ms a write, a twentieth of a warm start): a warm trivial worker
    writes once before its entry, not four times.
    A broken pipe usually means the launcher is gone, and the parent-death watcher ends this
    process; ``lost`` keeps why, for the last message (``_unsent``): the entry may have closed
    the pipe itself (``os.closerange(3, ...)``) while the launcher waits.  Each write first
    checks that the descriptor is still the pipe (``_fd``: one ``fstat``): one closed whose
    number a file the entry opened then got had the records written into that file, and was
    closed under it; such a descriptor is let go, never written to or closed.
    """

    lost: BaseException | None = None

    def __init__(self, conn: Any, sigint_restore: bool = False) -> None:
        self._conn = conn
        self.quiet: Callable[[str], bool] = _loud
        self.stage = proto.PRE_BOOTSTRAP
        self.ready_sent = False
        self.sigint_restore = sigint_restore
        self._held: list[bytes] = []
        if conn is not None:  # the pickler conn.send() would use: the launcher reads with it
            self._dumps = sys.modules[type(conn).__module__]._ForkingPickler.dumps
            self._pipe = _identity(conn.fileno())

    def send(self, msg: proto.Message, hold: bool = False) -> None:
        if self._conn is None:
            return
        try:
            data = bytes(self._dumps(msg))
            if len(data) >= _FRAME_LIMIT:  # Connection's longer header: let it frame this one
                self._write(b"".join(self._held))
                self._held.clear()
                self._fd()
                self._conn.send_bytes(data)
                return
            self._held.append(_FRAME.pack(len(data)) + data)  # as Connection.send frames it
            if not hold:
                self._write(b"".join(self._held))
                self._held.clear()
        except (OSError, EOFError) as exc:
            self._conn, self.lost = None, exc

    def _write(self, data: bytes) -> None:
        view, fd = memoryview(data), self._fd()
        while view:
            view = view[os.write(fd, view) :]

    def _fd(self) -> int:
        """The pipe's descriptor, if it still is the pipe; else the connection lets go of it
        (its ``close()`` would close what the number is now) and this raises what happened."""
        fd: int = self._conn.fileno()
        try:
            same = _identity(fd) == self._pipe
        except OSError:
            same = False  # closed (EBADF): a file opened later could get the number
        if not same:
            _let_go(self._conn)
            raise OSError(_not_the_pipe(fd))
        return fd

    def stage_started(self, stage: str) -> None:
        self.stage = str(getattr(stage, "value", stage))
        self.send(proto.StageStarted(self.stage), hold=self.quiet(self.stage))
        if self.stage == _ENTRY:
            report_pages()

    def stage_finished(self, stage: str, seconds: float) -> None:
        stage = str(getattr(stage, "value", stage))
        self.send(proto.StageFinished(stage, float(seconds)), hold=True)

    def ready(self, report: Any) -> None:
        from spawnkit.bootstrap.report import to_send

        self.stage = Stage.ENTRY.value
        self.ready_sent = True
        try:
            self.send(proto.Ready(to_send(report)), hold=True)
        except Exception:  # an unpicklable report must not fail the worker, nor vanish
            self.send(proto.Ready(_sendable(report)), hold=True)
        if self.sigint_restore:
            _hear_sigint(True)

    def close(self) -> None:
        if self._conn is not None:
            try:
                if self._held:
                    self._write(b"".join(self._held))
                self._conn.close()
            except OSError:
                pass
            self._held.clear()
            self._conn = None


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _let_go(conn: Any) -> None:
    """Forget ``conn``'s descriptor without closing it (``Connection.close`` and its
    finalizer close whatever the number is now: a file of the entry's)."""
    try:
        conn._handle = None
    except AttributeError:
        pass


def _not_the_pipe(fd: int) -> str:
    """What descriptor ``fd`` is now, said for ``_unsent`` (only on this failure path)."""
    try:
        now = os.readlink(f"/proc/self/fd/{fd}")  # Linux: the path of the file it now is
    except OSError:
        try:
            os.fstat(fd)
            now = "another file"
        except OSError:
            return f"descriptor {fd} was closed (nothing was written)"
    return (
        f"descriptor {fd} was closed and its number reused by the process: it is now {now}, "
        "which was not written to"
    )


#: A message's frame on the report pipe, as ``multiprocessing.connection`` writes and reads it.
_FRAME = struct.Struct("!i")
_FRAME_LIMIT = 0x7FFFFFFF
_ENTRY = Stage.ENTRY.value


def report_pages() -> None:
    """Where a start is done (an entry, a context child's target, about to run): a warm
    worker runs its target only if its launcher learned its pid (``_known``), and a warm
    server's learning worker reports the pages its start wrote (``_prefault``); any other
    process has nothing to do, and a spawned one never imports the modules for it."""
    known = sys.modules.get("spawnkit.protocol._known")
    if known is not None:
        known.target_next()
    prefault = sys.modules.get("spawnkit.protocol._prefault")
    if prefault is not None:
        prefault.report()


def _quiet_stages(spec: ProcessSpec, *, forked: bool) -> Callable[[str], bool]:
    """Whether a stage of ``spec``'s worker cannot block, asked as it starts: it runs only
    spawnkit's own bookkeeping, no import, plugin, payload or entry code.  ``forked``: a warm
    worker, whose ``arm_parent_death`` finds its server's environment, platform and watcher
    thread in place; ``materialize_payload`` with no payload (and an entry named, not sent by
    value) has nothing to unpickle; ``resolve_entry`` of an entry whose module is imported and
    holds the entry's first name (no import, no module ``__getattr__``) only reads it."""
    empty = spec.payload is None and (bool(spec.entry) or spec.entry_payload is None)

    def quiet(stage: str) -> bool:
        if stage == _PARENT_DEATH:
            return forked
        if stage == _PAYLOAD:
            return empty
        if stage == _RESOLVE:
            return _imported_entry(spec.entry)
        return False

    return quiet


def _imported_entry(reference: str) -> bool:
    module_name, _, qualname = reference.partition(":")
    module = sys.modules.get(module_name.strip())
    if not isinstance(module, types.ModuleType):
        return False  # not imported (or an object standing in for a module)
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        return False  # still importing: its lock may be another thread's
    return qualname.strip().split(".")[0] in module.__dict__


def _loud(stage: str) -> bool:
    """Every stage's STARTED at once: a reporter not told which stages cannot block."""
    return False


_PARENT_DEATH = Stage.ARM_PARENT_DEATH.value
_PAYLOAD = Stage.PAYLOAD.value
_RESOLVE = Stage.RESOLVE_ENTRY.value


def _sendable(report: Any) -> Any:
    """The report with each field that does not pickle emptied and named in ``unsent``."""
    sendable = getattr(report, "sendable", None)
    if sendable is None:  # not a BootstrapReport: say so instead of sending nothing
        return {"unsent": {"report": f"a {type(report).__name__} that could not be pickled"}}
    return sendable(lambda obj: pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _failing_stage(exc: BaseException, reporter: _Reporter) -> str:
    from spawnkit.protocol import failure  # only on a failure path (issue #23)

    return failure.failing_stage(exc, reporter.stage, reporter.ready_sent)


def _record(
    exc: BaseException,
    reporter: _Reporter,
    dumps: Callable[[Any], bytes],
    loads: Callable[[bytes], Any],
) -> Failed:
    """The failure record of ``exc``, made by :mod:`spawnkit.protocol.failure`, which only a
    failing worker imports (issue #23)."""
    from spawnkit.protocol import failure

    return failure.record(_failing_stage(exc, reporter), exc, dumps, loads)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def _redirect_output(stdout_conn: Any, stderr_conn: Any) -> None:
    """Point fds 1 and 2 at the launcher's relay pipes (see ``launch._output``)."""
    for conn, fd, name in ((stdout_conn, 1, "stdout"), (stderr_conn, 2, "stderr")):
        if conn is None:
            continue
        stream = getattr(sys, name, None)
        try:
            if stream is not None:
                stream.flush()
            os.dup2(conn.fileno(), fd)
            conn.close()
            if stream is not None and stream.fileno() == fd:
                stream.reconfigure(line_buffering=True)
        except (OSError, ValueError, AttributeError):
            continue  # output then goes where it went before: shared, but not lost


def child_main(spec: ProcessSpec) -> None:
    """Run the bootstrap and the entry for one rank; report the outcome before exiting."""
    note_start("child_main", time.monotonic())
    _redirect_output(spec._control.stdout_conn, spec._control.stderr_conn)
    dump_signal = _arm_faulthandler(spec._control.fault_conn)
    dumps, loads = picklers(spec._control.context)
    deaf = spec._control.sigint_restore
    if deaf:  # started with SIGINT blocked: ignored until the entry (heard again there)
        _hear_sigint(False)
    reporter = _Reporter(spec.report_conn, deaf)
    # HELLO carries the signal a stuck start is asked for its stacks with: held only where
    # nothing can block before a STARTED (a warm worker; a cold one imports the bootstrap).
    warm = "spawnkit.bootstrap.process" in sys.modules
    hello = proto.Hello(os.getpid(), socket.gethostname(), dump_signal, tuple(_marks))
    reporter.send(hello, hold=warm)
    try:
        from spawnkit.bootstrap.process import Bootstrapper

        boot = Bootstrapper(spec, listener=reporter)
        reporter.quiet = _quiet_stages(spec, forked=boot.inherited is not None)
        boot.freeze_gc = True  # this process is the worker: its heap is the bootstrap's
        result = boot.run()
    except SystemExit as exc:
        _report_exit(exc, reporter, deaf, spec)
        raise
    except BaseException as exc:
        if deaf:
            _hear_sigint(False)
        rec = _record(exc, reporter, dumps, loads)
        reporter.send(rec)
        reporter.close()
        _flush()
        if reporter.lost is not None:
            first = rec.message.strip().splitlines()[0] if rec.message.strip() else ""
            what = f"stage {rec.stage!r} failed: {rec.exc_type}: {first}"
            _unsent(reporter, spec, what, rec.traceback_text)
        raise SystemExit(1) from None
    if deaf:
        _hear_sigint(False)
    try:
        data = dumps(result)
    except Exception as exc:
        from spawnkit._names import qualified_name  # only on this failure path

        kind = qualified_name(type(result))
        reporter.send(
            proto.Result(
                None,
                _unawaited(result)
                or f"its {kind} return value could not be pickled to send it back: "
                f"{qualified_name(exc)}: {exc}. Return plain data (or a picklable "
                "object) from the entry function"
                + (": `return list(...)`." if kind.endswith("generator") else "."),
            )
        )
    else:
        reporter.send(proto.Result(data))
    reporter.close()
    if reporter.lost is not None:
        _unsent(reporter, spec, "its entry returned, and its result is lost", "")


def _unsent(reporter: _Reporter, spec: ProcessSpec, what: str, text: str) -> None:
    """The last message did not reach a launcher that is still there: the entry closed the
    report pipe (``os.closerange``) or replaced its descriptor.  What it would have said goes
    to stderr, as ``context_process._fail`` says it, so the launcher's "no exception, exit or
    result" has its answer beside it.  A launcher that is gone is not written to."""
    launcher = spec._control.parent_pid
    if isinstance(launcher, int):
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            return
        except OSError:
            pass  # there, but not ours to signal
    line = (
        f"spawnkit: rank {spec.rank} (pid {os.getpid()}): {what}; its report pipe to the "
        f"launcher was lost ({type(reporter.lost).__name__}: {reporter.lost}), so this is "
        "written here instead\n"
    )
    data = (line + text).encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(2, data) :]
    except OSError:
        pass


def _unawaited(result: Any) -> str:
    """What to say of an entry that returned a coroutine (a sync wrapper of an ``async def``,
    which the entry's check before the call cannot see): none of its body ran."""
    if not isinstance(result, types.CoroutineType):
        return ""
    result.close()  # never awaited, said here: no RuntimeWarning at exit besides
    return (
        f"it returned the coroutine {result.__qualname__}() that nothing awaited: none of "
        "its body ran. Make the entry a plain function that runs it: `return "
        "asyncio.run(...)`."
    )


def _report_exit(exc: SystemExit, reporter: _Reporter, deaf: bool, spec: ProcessSpec) -> None:
    """A ``sys.exit()``: its code and where, or after ready with 0, an entry that ended as it
    meant to, with no value (an ``os._exit(0)`` sends nothing: the launcher calls it a failure)."""
    if deaf:  # the entry is over: a Ctrl-C now must not cut the report short
        _hear_sigint(False)
    code = _exit_code(exc)
    if code != 0 or not reporter.ready_sent:
        import traceback  # only on this failure path

        from spawnkit.protocol import failure

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        rec = failure.exited(_failing_stage(exc, reporter), exc, text)
        reporter.send(rec)
        reporter.close()
        if reporter.lost is not None:
            _unsent(reporter, spec, f"stage {rec.stage!r} called sys.exit({exc.code!r})", text)
        return
    reporter.send(proto.Result())
    reporter.close()
    if reporter.lost is not None:
        _unsent(reporter, spec, "its entry called sys.exit(0), and its result is lost", "")


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


# ------------------------------------------------- the start data, written by the launcher
# Beside its reader (``spawn_main`` above, or a warm server's ``serve``): one exchange, one
# module.  The launcher imports this module anyway, for ``child_main``.
def send_start_data(fd: int, data: bytes) -> None:
    """Write start data to ``fd``, a pipe to a child or a warm server, never blocking the launcher.

    The child re-imports ``__main__`` before reading its ``Process``: a spec larger than the
    pipe buffer would make ``start()`` wait for that re-import (pytorch#131931).  What fits is
    written now, the rest from a daemon thread; a reader's death reaches the launcher elsewhere.
    """
    w = os.dup(fd)
    view = memoryview(data)
    try:
        os.set_blocking(w, False)
        try:
            view = view[os.write(w, view) :]
        except BlockingIOError:
            pass
        os.set_blocking(w, True)
    except OSError:  # EPIPE: the child is already gone
        view = view[len(view) :]
    if not view:
        os.close(w)
        return
    threading.Thread(
        target=_write_rest, args=(w, view), name="spawnkit-start-writer", daemon=True
    ).start()


def _write_rest(fd: int, view: memoryview) -> None:
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the child died before reading everything; its sentinel says how
        pass
    finally:
        os.close(fd)
