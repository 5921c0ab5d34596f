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
"""

from __future__ import annotations

import importlib
import os
import sys
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
    if self._start_method == "forkserver":
        from spawnkit.protocol import warm

        with warm.launching(self._spawnkit_server):
            base_start(self)
        return
    if self._start_method != "fork":
        base_start(self)
        return
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


def _bootstrap_error(self: Any) -> Exception | None:
    """Why this exited child never ran its target: its bootstrap's ``ChildRaisedError``, or None."""
    if "_spawnkit_error" in self.__dict__:
        found: Exception | None = self.__dict__["_spawnkit_error"]
        return found
    if self._popen is None or self.exitcode != BOOTSTRAP_FAILED_EXIT:
        return None
    from spawnkit.protocol.popen import early_failure

    rec = early_failure(self)
    err = None
    if rec is not None:
        line = _root_line(self.name, self._spawnkit_spec.namespace.name, rec)
        err = bootstrap_error(rec, line, child.picklers(self._spawnkit_package)[1])
    self.__dict__["_spawnkit_error"] = err
    return err


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
    try:
        _bootstrap(self._spawnkit_spec, stages)
    except BaseException as exc:
        _fail(self, exc, stages.stage)
    child.report_pages()  # its start is done: the target is next
    call = self.__dict__.pop("_spawnkit_call", None)
    if call is not None:
        loads = _sub(self._spawnkit_package, "reduction").ForkingPickler.loads
        self._target, self._args, self._kwargs, *subclass = loads(call)
        if subclass:  # after the hooks: the engine's class and its attributes
            self.__dict__.update(subclass[1])
            self.__class__ = subclass[0]
    if getattr(self._target, "__module__", None) in ("__main__", "__mp_main__"):
        try:
            _check_script_target(self)
        except BaseException as exc:
            _fail(self, exc, stages.stage)
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
    ``process_start`` whatever stage raised it."""

    stage = ""

    def stage_started(self, stage: str) -> None:
        self.stage = str(getattr(stage, "value", stage))

    def stage_finished(self, stage: str, seconds: float) -> None:
        return None

    def ready(self, report: Any) -> None:
        return None


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


def bootstrap_error(rec: Failed, line: str, loads: Any = None) -> Exception:
    """The parent's typed error for a child whose bootstrap failed: root cause first."""
    from spawnkit.errors import ChildRaisedError

    exc = failure.load_exception(rec.exc_bytes, loads)
    err = ChildRaisedError(
        f"{line}\nEffect: the process exited with status {BOOTSTRAP_FAILED_EXIT} before its "
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
