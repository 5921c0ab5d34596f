"""The Process classes of a bootstrapping context, and what their child does before its target.

``spawnkit.get_context()`` (``launch/context.py``) hands out a context whose
``Process`` is a subclass of one of the classes here, carrying the
namespace's frozen spec.  Everything built on ``ctx.Process`` (``ctx.Pool``,
``ProcessPoolExecutor(mp_context=ctx)``, torch's ``DataLoader``) therefore
starts children that, in :func:`run_target`, bootstrap first (guard, platform,
plugins, hooks: ``Bootstrapper.through_hooks``) and only then unpickle and
call their target.  The target, its arguments and keyword arguments travel
as opaque bytes inside the pickled Process, so a target module that imports
hook targets is imported after the hooks are applied, as an entry is.

The children's start, per method: spawn runs the guarded command line
(guard armed in its first statement, early-error pipe); forkserver forks
from the pre-bootstrapped warm server (``warm``), whose shared stages
the child inherits; fork copies the parent, which, if it is already
bootstrapped for the namespace, hands its bootstrap down without running the
stages again.

A child whose bootstrap fails does not run its target: it writes the
one-line root cause and the failure record to stderr and to its early-error
pipe, tells a known consumer (a ``ProcessPoolExecutor`` or a ``DataLoader``
worker's result queue) through an object that raises the root cause when the
parent unpickles it, and exits with :data:`BOOTSTRAP_FAILED_EXIT`.

A bootstrap can also end with no word from the child (a plugin that segfaults,
``os._exit``, the OOM killer): the child marks each stage it starts on its
early-error pipe, and that its target is next, with ``faulthandler`` writing a
crash's stack there meanwhile; an exit before that last mark is a failed
bootstrap too (``ChildExitedError``, the signal or exit code and the stage).
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import sys
import threading
import time
from typing import Any

from spawnkit.protocol import child, failure, popen
from spawnkit.protocol.failure import Failed
from spawnkit.spec._record import replace

__all__ = [
    "BOOTSTRAP_FAILED_EXIT",
    "bootstrap_error",
    "bootstrapped_report",
    "run_target",
    "variant",
]

BOOTSTRAP_FAILED_EXIT = 70
"""Exit status of a context's child whose bootstrap failed (EX_SOFTWARE): its target never ran."""

#: Process class name -> (package, start method).
_VARIANTS: dict[str, tuple[str, str]] = {
    f"_{p}Boot{m.capitalize()}Process": (package, m)
    for p, package in (("Std", "multiprocessing"), ("Dill", "multiprocess"))
    for m in ("spawn", "forkserver", "fork")
}

#: On a context child's early-error pipe, ahead of anything else there (a failure record is a
#: pickle, ``b"\x80"``; a crash's faulthandler dump, text): each stage as it starts, then
#: that the target is next.  The parent reads the pipe once the child exited.
_STAGE_MARK = b"\x01"
_TARGET_MARK = b"\x02"

#: Targets whose parent reads a result queue: (module, qualname) -> index of that queue in
#: the target's arguments.  A failed bootstrap puts its root cause there, so the parent's
#: executor or loader raises it instead of a bare "process terminated abruptly".
_RESULT_QUEUES: dict[tuple[str, str], int] = {
    ("concurrent.futures.process", "_process_worker"): 1,
    ("torch.utils.data._utils.worker", "_worker_loop"): 3,
    # a manager's server: its start() reads the address from this pipe (EOFError, bare)
    ("multiprocessing.managers", "BaseManager._run_server"): 4,
    ("multiprocess.managers", "BaseManager._run_server"): 4,
}


def _sub(package: str, name: str) -> Any:
    return importlib.import_module(f"{package}.{name}")


def _build(name: str) -> type:
    package, method = _VARIANTS[name]
    context = _sub(package, "context")
    base = {"spawn": context.SpawnProcess, "forkserver": context.ForkServerProcess}.get(
        method, context.ForkProcess
    )
    popen_cls = popen.popen_class(package, method) if method != "fork" else None
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": name,
        "_spawnkit_package": package,
        "run": run_target,
        "__init_subclass__": _subclassed,
        "start": _start,
        "__reduce_ex__": _reduce_ex,
        "bootstrap_error": _bootstrap_error,
    }
    if popen_cls is not None:
        namespace["_Popen"] = staticmethod(popen_cls)
    cls = type(name, (base,), namespace)
    cls._spawnkit_fixed = cls  # type: ignore[attr-defined]
    return cls


_classes = popen.LazyClasses(__name__, _VARIANTS, _build)
__getattr__ = _classes.get
variant = _classes.variant


# ------------------------------------------------------------------ parent side
def _start(self: Any) -> None:
    """Start the child: through this context's warm server, or with an early pipe for fork."""
    base_start = _sub(self._spawnkit_package, "process").BaseProcess.start
    call = (self.__dict__.get("_target"), self.__dict__.get("_args", ()))  # start() drops them
    if "_spawnkit_pooled" not in self.__dict__ and _is_pool_worker(call[0]):
        from spawnkit.protocol import _pool_workers

        # a plain pool's (joblib's): once one failed its bootstrap, a thread answers for it
        _pool_workers.start(self, call[1], lambda: _start_process(self, base_start))
        return
    _start_process(self, base_start)
    _relay_exit(self, *call)


#: ``multiprocessing.pool.worker`` and ``multiprocess``'s copy: a pool's worker loop.
_POOL_WORKERS = frozenset({("multiprocessing.pool", "worker"), ("multiprocess.pool", "worker")})


def _is_pool_worker(target: Any) -> bool:
    return (getattr(target, "__module__", ""), getattr(target, "__qualname__", "")) in _POOL_WORKERS


def _start_process(self: Any, base_start: Any) -> None:
    if self._start_method == "forkserver":
        from spawnkit.protocol import warm

        server = _context_server(self)
        self._spawnkit_forked_from = server  # its own, whichever the context has later
        with warm.launching(server):
            base_start(self)
    elif self._start_method != "fork":
        base_start(self)
    else:
        _start_forked(self, base_start)


def _context_server(proc: Any) -> Any:
    """The context's warm server, a new one where a file its workers run changed since it
    started (``warm.for_context``); kept on the context's Process class from then on."""
    from spawnkit.protocol import warm

    owner: Any = next(c for c in type(proc).__mro__ if "_spawnkit_server" in vars(c))
    server = owner._spawnkit_server
    current = warm.for_context(server, proc._spawnkit_spec.namespace, owner._spawnkit_lease)
    if current is not server:
        owner._spawnkit_server = current
    return current


def _start_forked(self: Any, base_start: Any) -> None:
    early_r, early_w = os.pipe()
    self._spawnkit_early_w = early_w
    try:
        base_start(self)
    except BaseException:
        os.close(early_r)
        raise
    finally:
        os.close(early_w)
        del self._spawnkit_early_w
    os.set_blocking(early_r, False)
    self._popen.early_error_fd = early_r
    _sub(self._spawnkit_package, "util").Finalize(self._popen, os.close, (early_r,))


#: Reading a child's early-error pipe consumes it: one reader at a time (``_relay_exit``).
_reading = threading.Lock()


def _bootstrap_error(self: Any) -> Exception | None:
    """Why this exited child never ran its target: its bootstrap's ``ChildRaisedError`` (it
    raised), ``ChildExitedError`` (it exited before its target with no word), or None."""
    with _reading:
        if "_spawnkit_error" in self.__dict__:
            found: Exception | None = self.__dict__["_spawnkit_error"]
            return found
        if self._popen is None or self.exitcode is None:
            return None
        err = _read_early(self)
        self.__dict__["_spawnkit_error"] = err
        return err


def _read_early(proc: Any) -> Exception | None:
    """The story of the early-error pipe: stage marks, then the target's mark (it ran), a
    failure record, a crash's stack, or nothing (it ended with no word in the last stage)."""
    from spawnkit.protocol import popen

    if getattr(proc._popen, "early_error_fd", None) is None:  # no pipe: only 70 tells
        if proc.exitcode != BOOTSTRAP_FAILED_EXIT:
            return None
        rest, stage = b"", ""
    else:
        rest, stage = _marks(popen._early_bytes(proc))
    if rest.startswith(_TARGET_MARK):
        return None  # the target ran: how it ended is its own (multiprocessing's semantics)
    text = "" if rest.startswith(b"\x80") else rest.decode("utf-8", "replace")
    if not rest or text.startswith("Fatal Python error"):
        err = _exited_error(proc, stage or failure.PRE_BOOTSTRAP, text)
        return _server_gone(proc, err) or err
    rec = _record(rest, text)
    line = _root_line(proc.name, proc._spawnkit_spec.namespace.name, rec)
    loads = child.picklers(proc._spawnkit_package)[1]
    return bootstrap_error(rec, line, loads, proc.exitcode)


def _record(raw: bytes, text: str) -> Failed:
    """The failure record the child wrote, or the text its command line wrote instead."""
    import pickle

    try:
        return Failed(*pickle.loads(raw))
    except Exception:
        last = text.strip().splitlines()[-1] if text.strip() else ""
        return Failed(failure.PRE_BOOTSTRAP, "", last, text)


def _marks(raw: bytes) -> tuple[bytes, str]:
    """``raw`` after its stage marks, and the last stage marked (``""``: none)."""
    stage = b""
    while raw.startswith(_STAGE_MARK) and b"\n" in raw:
        stage, _, raw = raw[1:].partition(b"\n")
    return raw, stage.decode("utf-8", "replace")


def _server_gone(proc: Any, err: Exception) -> Exception | None:
    """A forkserver context's child that died with no word while its warm server is gone
    (killed: the OOM killer) died of that: the server's ``ForkServerError`` names the cause,
    the child's own exit its detail, as a start the dead server could not serve is told.  A
    child whose status pipe the server closed unwritten (``status_lost``; its "255" is no exit
    of its own, it may still run) is classified once the server is seen to end, bounded:
    checked at once, a killed server whose pipes had closed but that ``waitpid`` could not yet
    reap was found running, and the OOM killer's work told as the child's exit (CI)."""
    forked = proc._start_method == "forkserver"
    server = proc.__dict__.get("_spawnkit_forked_from") if forked else None
    if server is None:
        return None
    ending = getattr(proc._popen, "status_lost", False)  # the server is ending: see it end
    what = (
        "it ended before process {} (pid {}) it had forked ran its target"
        if ending
        else "process {} (pid {}) it had forked ended before its target ran"
    )
    gone: Exception | None = server.gone_error(
        what.format(repr(proc.name), proc.pid), ending=ending
    )
    if gone is not None:
        gone.__cause__ = err
    return gone


def _exited_error(proc: Any, stage: str, fault: str) -> Exception:
    """A child whose bootstrap ended with no word: a signal, or an exit past Python's handling."""
    from spawnkit.errors import ChildExitedError

    who = failure.Worker(-1, proc.pid)
    head, detail, signal_name = failure._exit_story(who, proc.exitcode, None, stage, False)
    head = head.removeprefix(f"{who.label} ")
    namespace = proc._spawnkit_spec.namespace.name
    fault = failure.current_thread_first(fault.strip())
    if fault:
        detail += f"\nFatal error report written by the process (faulthandler):\n{fault}"
    return ChildExitedError(
        f"spawnkit: process {proc.name!r} (pid {proc.pid}) of namespace {namespace!r} did not "
        f"run its target: it {head}\n{detail}\nEffect: its target never ran; a pool on the "
        "context stops instead of replacing the process.",
        stage=stage,
        exit_code=proc.exitcode,
        signal_name=signal_name,
        fault_text=fault,
        pid=proc.pid,
    )


#: Consumers that learn a process died from its sentinel alone: their error has no cause.
_SENTINEL_READERS = frozenset({("concurrent.futures.process", "_process_worker")})


def _relay_exit(proc: Any, target: Any, args: tuple[Any, ...]) -> None:
    """A ``ProcessPoolExecutor`` breaks as soon as a worker's sentinel fires, with a cause only
    from its result queue: a worker that died in its bootstrap with no word (a segfault) left a
    bare ``BrokenProcessPool``.  Its sentinel is relayed: once the process exited, the
    ``ChildExitedError`` goes into the result queue, then the relayed sentinel fires."""
    where = (getattr(target, "__module__", ""), getattr(target, "__qualname__", ""))
    if where not in _SENTINEL_READERS or len(args) <= _RESULT_QUEUES[where]:
        return
    relay_r, relay_w = os.pipe()
    real, proc._sentinel = proc._sentinel, relay_r
    _sub(proc._spawnkit_package, "util").Finalize(proc._popen, os.close, (relay_r,))
    relayed = (proc, real, relay_w, args[_RESULT_QUEUES[where]])
    threading.Thread(target=_relay, args=relayed, name="spawnkit-exit-relay", daemon=True).start()


def _relay(proc: Any, real: int, relay_w: int, queue: Any) -> None:
    try:
        _sub(proc._spawnkit_package, "connection").wait([real])
        deadline = time.monotonic() + 5  # the sentinel fires as it exits, just before waitpid
        while proc._popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        err = proc.bootstrap_error()
        if err is not None:  # after the child's own _Failure, if it put one: unread then
            _put(queue, _Raises(err), proc._spawnkit_package)
    except Exception:  # the sentinel still fires: the executor breaks without a cause
        pass
    finally:
        _mark_once(relay_w)


def _mark_once(fd: int) -> None:
    """One byte, not EOF: a child forked later may hold this end too."""
    try:
        os.write(fd, b"x")
    except OSError:
        pass
    os.close(fd)


def _put(queue: Any, obj: Any, package: str) -> None:
    """``SimpleQueue.put``, giving up where its lock stays held (a worker killed holding it)."""
    data = _sub(package, "reduction").ForkingPickler.dumps(obj)
    lock = getattr(queue, "_wlock", None)
    if lock is not None and not lock.acquire(timeout=5):
        return
    try:
        queue._writer.send_bytes(data)
    finally:
        if lock is not None:
            lock.release()


def _subclassed(cls: type, **kwargs: Any) -> None:
    """An engine's own ``class Detok(ctx.Process)`` with its ``run()``: the child bootstraps
    first all the same.  The override is kept aside and ``run_target`` calls it after the
    bootstrap (a forked child ran it without one; a spawned one pickled as the fixed class,
    so its ``run()`` never ran and it exited 0)."""
    own = cls.__dict__.get("run")
    if own is not None and own is not run_target:
        cls._spawnkit_user_run = own  # type: ignore[attr-defined]
        cls.run = run_target  # type: ignore[attr-defined]


#: What ``BaseProcess.__init__`` keeps on a process; a subclass's other attributes are its own
_PROCESS_STATE = frozenset(
    {"_identity", "_config", "_parent_pid", "_parent_name", "_popen", "_closed", "_target",
     "_name", "_args", "_kwargs"}
)  # fmt: skip


def _reduce_ex(self: Any, protocol: int) -> tuple[Any, ...]:
    """Pickle as the fixed class, the spec in the state and the call as opaque bytes; an
    engine's subclass travels in those bytes too, with its own attributes (its arguments)."""
    state = dict(self.__dict__)
    state.pop("_spawnkit_forked_from", None)  # the launcher's handle on its server
    call: tuple[Any, ...] = (
        state.pop("_target", None), state.pop("_args", ()), state.pop("_kwargs", {})
    )  # fmt: skip
    cls = type(self)
    if not cls.__module__.startswith("spawnkit."):  # an engine's subclass
        own = {k: state.pop(k) for k in list(state) if _own(k)}
        call += (cls, own)
    pickler = _sub(self._spawnkit_package, "reduction").ForkingPickler
    state["_spawnkit_call"] = bytes(pickler.dumps(call))
    state["_spawnkit_spec"] = self._spawnkit_spec
    return (_rebuild, (self._spawnkit_fixed, state))


def _own(key: str) -> bool:
    return key not in _PROCESS_STATE and not key.startswith("_spawnkit_")


def _rebuild(cls: type, state: dict[str, Any]) -> Any:
    obj: Any = object.__new__(cls)
    obj.__dict__.update(state)
    return obj


# ------------------------------------------------------------------- child side
def run_target(self: Any) -> None:
    """A context child's ``run()``: bootstrap for the context's namespace, then the target
    (or the engine's own ``run()``: ``_subclassed``)."""
    if self.__dict__.get("_spawnkit_ran"):  # the engine's run() calling super().run()
        _sub(self._spawnkit_package, "process").BaseProcess.run(self)
        return
    self._spawnkit_ran = True
    if "_spawnkit_early_w" in self.__dict__:  # fork: the pipe made by _start
        child.set_early_fd(self.__dict__.pop("_spawnkit_early_w"))
    stages = _Stages()
    faults = _faults_to_early_pipe()
    try:
        _bootstrap(self._spawnkit_spec, stages)
    except BaseException as exc:
        _fail(self, exc, stages.stage)
    child.report_pages()  # its start is done: the target is next
    call = self.__dict__.pop("_spawnkit_call", None)
    if call is not None:
        loads = _sub(self._spawnkit_package, "reduction").ForkingPickler.loads
        try:  # imports the target's module: the entry's resolution, as in a worker
            self._target, self._args, self._kwargs, *subclass = loads(call)
        except BaseException as exc:
            _fail(self, exc, "resolve_entry")
        if subclass:  # after the hooks: the engine's class and its attributes
            self.__dict__.update(subclass[1])
            self.__class__ = subclass[0]
    if getattr(self._target, "__module__", None) in ("__main__", "__mp_main__"):
        try:
            _check_script_target(self)
        except BaseException as exc:
            _fail(self, exc, stages.stage)
    _target_next(faults)
    own_run = getattr(type(self), "_spawnkit_user_run", None)
    if own_run is not None:
        own_run(self)
        return
    _sub(self._spawnkit_package, "process").BaseProcess.run(self)


def _check_script_target(proc: Any) -> None:
    """A target from the launching script runs the script's copy of a hooked module."""
    from spawnkit.bootstrap import _script_copy
    from spawnkit.spec import _phase

    namespace = _phase.worker_namespace()
    if namespace is not None:
        spec = proc._spawnkit_spec
        _script_copy.check_entry(namespace, spec, proc._target, "apply_hooks", "target")


def bootstrapped_report(namespace: str) -> Any:
    """This process's report if it is bootstrapped for ``namespace`` (hooks applied), else None."""
    from spawnkit.bootstrap import process
    from spawnkit.spec import _phase

    owner = _phase.worker_namespace()
    if owner is None or owner.name != namespace or _phase.too_early():
        return None
    return process.current_report()


class _Stages:
    """The bootstrap's listener in a context child: the stage it is in.  A ``KeyboardInterrupt``
    or ``sys.exit()`` passes a stage unwrapped (no ``stage`` of its own), and was blamed on
    ``process_start`` whatever stage raised it.  Marked on the early-error pipe too, for a
    parent whose child ends in it with no word (``_read_early``)."""

    stage = ""

    def stage_started(self, stage: str) -> None:
        self.stage = str(getattr(stage, "value", stage))
        _mark(_STAGE_MARK + self.stage.encode() + b"\n")

    def stage_finished(self, stage: str, seconds: float) -> None:
        return None

    def ready(self, report: Any) -> None:
        return None


def _mark(data: bytes) -> None:
    fd = child._early_fd
    if fd is not None:
        try:
            os.write(fd, data)
        except OSError:
            pass


def _faults_to_early_pipe() -> bool:
    """A crash in the bootstrap (a plugin's native code) writes its stack where the parent
    reads it; a process whose faulthandler is on already (``-X faulthandler``, a forked
    test runner's) keeps its own file.  Only the crashing thread: the pipe is read after the
    exit, so a dump must fit its buffer (``child._EARLY_LIMIT``) or the crash would hang."""
    fd = child._early_fd
    if fd is None or faulthandler.is_enabled():
        return False
    try:
        faulthandler.enable(file=fd, all_threads=False)
    except (OSError, ValueError, RuntimeError):
        return False
    return True


def _target_next(faults: bool) -> None:
    """The bootstrap is over: mark it, and leave the pipe (and faults) to no one from here."""
    if faults:
        faulthandler.disable()
    _mark(_TARGET_MARK)
    child.set_early_fd(None)


def _bootstrap(spec: Any, listener: _Stages) -> None:
    """Run the stages through ``apply_hooks``, unless this process inherited them by fork."""
    from spawnkit.bootstrap import process

    parent_report = bootstrapped_report(spec.namespace.name)
    if parent_report is not None and parent_report.pid != os.getpid():
        inherited = {"forked_from": parent_report.pid, "stages": dict(parent_report.stage_seconds)}
        report = replace(parent_report, pid=os.getpid(), inherited=inherited)
        process._set_current(spec, report)
        from spawnkit.namespace import get_namespace

        get_namespace(spec.namespace).platforms.inherit()  # the parent's, as the hooks are
        return
    boot = process.Bootstrapper(spec, listener=listener)
    boot.freeze_gc = True  # a child started for its target: its heap is the bootstrap's
    boot.through_hooks()


def _fail(proc: Any, exc: BaseException, current: str) -> None:
    """Report a failed bootstrap everywhere the parent may look, then exit before the target."""
    dumps, loads = child.picklers(proc._spawnkit_package)
    stage = failure.failing_stage(exc, current, False)
    rec = failure.record(stage, exc, dumps, loads)
    line = _root_line(proc.name, proc._spawnkit_spec.namespace.name, rec)
    try:
        sys.stderr.write(f"{line}\n{rec.traceback_text}")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    child.send_early(rec)
    _tell_consumer(proc, rec, line, loads)
    raise SystemExit(BOOTSTRAP_FAILED_EXIT)


def _root_line(name: str, namespace: str, rec: Failed) -> str:
    first = rec.message.strip().splitlines()[0] if rec.message.strip() else ""
    return (
        f"spawnkit: process {name!r} (pid {rec.pid}) of namespace {namespace!r} did not run "
        f"its target: bootstrap stage {rec.stage!r} failed: {rec.exc_type}: {first}"
    )


def _tell_consumer(proc: Any, rec: Failed, line: str, loads: Any) -> None:
    """Put the root cause into the result queue of a known target, if this child has one."""
    call = proc.__dict__.get("_spawnkit_call")
    try:
        if call is not None:
            target, args, _kwargs = loads(call)
        else:
            target, args = proc._target, proc._args
        where = (getattr(target, "__module__", ""), getattr(target, "__qualname__", ""))
        index = _RESULT_QUEUES.get(where)
        if index is None or len(args) <= index:
            return
        queue = args[index]
        send = getattr(queue, "put", None) or queue.send  # a Queue, or a Connection
        send(_Failure(tuple(rec), line))
        if hasattr(queue, "join_thread"):  # a Queue sends from a thread: flush it first
            queue.close()
            queue.join_thread()
    except Exception:  # stderr and the exit status still tell the story
        return


class _Failure:
    """Unpickles in the parent as the bootstrap's ``ChildRaisedError``, raised."""

    def __init__(self, fields: tuple[Any, ...], line: str) -> None:
        self.fields, self.line = fields, line

    def __reduce__(self) -> tuple[Any, ...]:
        return (_raise, (self.fields, self.line))


def _raise(fields: tuple[Any, ...], line: str) -> None:
    raise bootstrap_error(Failed(*fields), line)


class _Raises:
    """Unpickles as ``err``, raised: the parent's relay of a child that died with no word."""

    def __init__(self, err: Exception) -> None:
        self.err = err

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reraise, (self.err,))


def _reraise(err: Exception) -> None:
    raise err


def bootstrap_error(
    rec: Failed, line: str, loads: Any = None, code: int | None = BOOTSTRAP_FAILED_EXIT
) -> Exception:
    """The parent's typed error for a child whose bootstrap failed: root cause first."""
    from spawnkit.errors import ChildRaisedError

    exc = failure.load_exception(rec.exc_bytes, loads)
    err = ChildRaisedError(
        f"{line}\nEffect: the process exited with status {code} before its "
        f"target ran.\nChild traceback (pid {rec.pid}):\n{rec.traceback_text.rstrip()}",
        stage=rec.stage,
        exc_type=rec.exc_type,
        traceback_text=rec.traceback_text,
        child_exception=exc,
        pid=rec.pid or None,
        host=rec.host,
    )
    if exc is not None:
        err.__cause__ = exc
    return err
