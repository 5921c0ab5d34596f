"""The parent's half of the protocol: how a worker process is started and what it is sent.

The exchange as a whole is drawn in :mod:`spawnkit.protocol`.  Here: the
guarded command line (its first statement arms the import guard, before
``__main__`` is re-imported or anything is unpickled), the bytes the parent
writes (preparation data, then the ``Process`` carrying the spec, never
blocking the launcher), the early-error pipe it reads, and the Popen of the four
Process variants (the classes themselves are in ``_process_classes``, which a child
imports to unpickle its own without this module): package (``multiprocessing`` or
its dill-based fork ``multiprocess``, the same classes under another name) x method
(spawn, or forkserver from a warm server), built from one table so they cannot drift apart.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import signal
import time
from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING
from spawnkit._plain import Plain
from spawnkit.errors import ConfigError
from spawnkit.protocol import _process_classes
from spawnkit.protocol._failed import PRE_BOOTSTRAP, Failed
from spawnkit.protocol.child import child_main, picklers, send_start_data
from spawnkit.spec import ProcessSpec
from spawnkit.spec._control import CONTEXTS

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.protocol.warm import Lease, WarmServer

__all__ = [
    "CONTEXTS",
    "START_METHODS",
    "LaunchContext",
    "early_error_text",
    "early_failure",
    "get_launch_context",
    "LazyClasses",
    "popen_class",
    "send_start_data",
    "spawn_context",
]

START_METHODS = ("spawn", "forkserver")

# Arms the guard and marks the process a worker whose hooks are not applied yet, so
# that a lazy proxy touched while ``__main__`` is re-executed refuses (see ``lazy``).
# A child that cannot import spawnkit (another PYTHONPATH, a broken install) writes its
# traceback to the early-error pipe, which the launcher quotes, not only to its stderr.
_GUARD_PROLOGUE = """\
import time as _t; _up = _t.monotonic()  # the interpreter is up: a start-up trace's mark
try:
    from spawnkit.bootstrap import guard as _g; _g.arm()
    from spawnkit.spec import _phase as _p; _p.enter_worker()
    from spawnkit.protocol.child import note_start, spawn_main_reporting
    note_start("interpreter", _up)
except BaseException:
    import os, traceback
    os.write({early_fd}, traceback.format_exc().encode("utf-8", "replace"))
    raise
"""


def _sub(package: str, name: str) -> Any:
    return importlib.import_module(f"{package}.{name}")


def _guarded_command_line(package: str, early_fd: int, **kwds: Any) -> list[str]:
    """The package's spawn command line, run behind the guard and the early-error reporter."""
    cmd: list[str] = list(_sub(package, "spawn").get_command_line(**kwds))
    index = cmd.index("-c") + 1
    args = ", ".join(f"{k}={v!r}" for k, v in kwds.items())
    cmd[index] = (
        _GUARD_PROLOGUE.format(early_fd=early_fd)
        + f"spawn_main_reporting({package!r}, {early_fd}, {args})"
    )
    return cmd


def _pickle_for_child(package: str, popen: Any, process_obj: Any) -> io.BytesIO:
    """What a spawned or forkserver child reads first: preparation data, then the Process."""
    context = _sub(package, "context")
    buf = io.BytesIO()
    context.set_spawning_popen(popen)
    try:
        context.reduction.dump(_sub(package, "spawn").get_preparation_data(process_obj._name), buf)
        context.reduction.dump(process_obj, buf)
    finally:
        context.set_spawning_popen(None)
    return buf


def _guarded_spawn_popen(package: str) -> type:
    """The package's spawn Popen, with the guard prologue and the early-error pipe."""
    popen_spawn_posix = _sub(package, "popen_spawn_posix")
    spawn = _sub(package, "spawn")
    util = _sub(package, "util")

    class GuardedSpawnPopen(popen_spawn_posix.Popen):  # type: ignore[misc,name-defined]
        #: The read end of the child's early-error pipe (see :func:`early_error_text`).
        early_error_fd: int

        #: perf_counter at start, spec pickled, interpreter spawned, spec sent (a trace's spans).
        marks: tuple[float, ...] = ()

        def _launch(self, process_obj: Any) -> None:
            begun = time.perf_counter()
            tracker_fd = _sub(package, "resource_tracker").getfd()
            self._fds.append(tracker_fd)
            fp = _pickle_for_child(package, self, process_obj)
            pickled = time.perf_counter()
            parent_r = parent_w = None
            early_r, early_w = os.pipe()
            child_fds = [early_w]  # the child's ends: ours must be closed
            try:
                parent_r, child_w = os.pipe()
                child_fds.append(child_w)
                child_r, parent_w = os.pipe()
                child_fds.append(child_r)
                cmd = _guarded_command_line(
                    package, early_w, tracker_fd=tracker_fd, pipe_handle=child_r
                )
                self._fds.extend([child_r, child_w, early_w])
                self.pid = util.spawnv_passfds(spawn.get_executable(), cmd, self._fds)
                spawned = time.perf_counter()
                self.sentinel = parent_r
                # The child's ends go before writing: holding child_r ourselves, a child
                # that died before reading its spec would block the write forever.
                while child_fds:
                    os.close(child_fds.pop())
                send_start_data(parent_w, fp.getvalue())
                self.marks = (begun, pickled, spawned, time.perf_counter())
            finally:
                os.set_blocking(early_r, False)
                self.early_error_fd = early_r
                to_close = [fd for fd in (parent_r, parent_w, early_r) if fd is not None]
                self.finalizer = util.Finalize(self, util.close_fds, to_close)
                for fd in child_fds:
                    os.close(fd)

    return GuardedSpawnPopen


def _warm_popen(package: str) -> type:
    """The package's forkserver Popen, forking from this thread's current warm server.

    Its first inherited descriptor is the worker's early-error pipe (where the server's
    ``_serve_one_reporting`` finds it).
    """
    from spawnkit.protocol import warm

    popen_forkserver = _sub(package, "popen_forkserver")
    util = _sub(package, "util")

    class WarmPopen(popen_forkserver.Popen):  # type: ignore[misc,name-defined]
        #: The read end of the child's early-error pipe (see :func:`early_failure`).
        early_error_fd: int
        #: perf_counter at start, spec pickled, connected, sent, pid read (``bench.warm_split``).
        marks: tuple[float, ...] = ()
        #: The server closed this worker's status pipe with no status in it: it is ending
        #: (killed), and the 255 the package makes of that is no exit of the worker's.
        status_lost = False
        pidfd = -1  # the worker's, taken as its pid arrived (:func:`_signal_lost`)

        def poll(self, flag: int = os.WNOHANG) -> int | None:
            return _warm_poll(self, package, flag)

        def _send_signal(self, sig: int) -> None:
            if not _signal_lost(self, sig):
                super()._send_signal(sig)

        def _launch(self, process_obj: Any) -> None:
            begun = time.perf_counter()
            server = warm.current_server()
            early_r, early_w = os.pipe()
            os.set_blocking(early_r, False)
            self.early_error_fd = early_r
            self._fds.append(early_w)  # index 0 of the worker's inherited descriptors
            try:
                buf = _pickle_for_child(package, self, process_obj)
                pickled = time.perf_counter()
                self.sentinel, w = server.connect_to_new_process(self._fds)
                connected = time.perf_counter()
            except BaseException:
                os.close(early_r)
                raise
            finally:
                os.close(early_w)
            parent_w = os.dup(w)
            fds = [parent_w, self.sentinel, early_r]
            self.finalizer = util.Finalize(self, util.close_fds, fds)
            try:
                send_start_data(w, buf.getvalue())
            finally:
                os.close(w)
            sent = time.perf_counter()
            # Bounded: a server that died or stopped after the connect must not hang start().
            self.pid = server.read_child_pid(self.sentinel)
            self.pidfd = _pidfd(self.pid, fds)
            self.marks = (begun, pickled, connected, sent, time.perf_counter())

    return WarmPopen


def _pidfd(pid: int, fds: list[int]) -> int:
    """A pidfd of ``pid``, closed with ``fds`` (the Popen's finalizer's); -1 where none."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3+, or gone already (its status says so)
        return -1
    fds.append(fd)
    return fd


def _signal_lost(popen: Any, sig: int) -> bool:
    """``terminate()``/``kill()`` of a warm worker whose status its server, killed, never
    wrote (True: done here): the package's Popen sends nothing once it has a returncode, and
    the 255 it made of the lost status is no exit.  A ``ProcessPoolExecutor`` broken by the
    server's death "terminated" its workers so, and they waited for tasks forever,
    re-parented to init, after the launcher had exited.  Sent through the pidfd taken at
    start, which no other process can come to own; without one, nothing is sent (the pid
    may be another's now)."""
    if not popen.status_lost:
        return False
    if popen.pidfd >= 0:
        with contextlib.suppress(OSError):  # it exited meanwhile (ProcessLookupError)
            signal.pidfd_send_signal(popen.pidfd, sig)
    return True


def _warm_poll(popen: Any, package: str, flag: int) -> int | None:
    """The package's forkserver ``poll()``, remembering a status pipe that read EOF: only a
    server that is ending closes one unwritten, and a SIGKILLed server's pipes close a moment
    before ``waitpid`` can reap it (``context_process._server_gone``)."""
    if popen.returncode is None:
        timeout = 0 if flag == os.WNOHANG else None
        if not _sub(package, "connection").wait([popen.sentinel], timeout):
            return None
        try:
            popen.returncode = _sub(package, "forkserver").read_signed(popen.sentinel)
        except (OSError, EOFError):
            popen.returncode, popen.status_lost = 255, True  # the package's code for it
    code: int | None = popen.returncode
    return code


def popen_class(package: str, method: str) -> type:
    """The Popen of ``package`` for ``method`` (spawn or forkserver): guarded, early-error pipe."""
    return _guarded_spawn_popen(package) if method == "spawn" else _warm_popen(package)


_process_classes.use_popens(popen_class)
#: The Process classes live in ``_process_classes`` (what a child unpickles); here by their
#: old names too, for the launchers that ask this module.
LazyClasses = _process_classes.LazyClasses
__getattr__ = _process_classes.classes.get
_variant = _process_classes.classes.variant
_StdSpawnProcess = _process_classes.classes.get("_StdSpawnProcess")


class _GuardedSpawnContext(_sub("multiprocessing", "context").SpawnContext):  # type: ignore[misc]
    """``multiprocessing.get_context("spawn")`` whose ``Process`` arms the guard first."""

    Process = _StdSpawnProcess


_SPAWN_CONTEXT: Any = None


def spawn_context() -> Any:
    """A stdlib-style spawn context (``Process``, ``Pipe``...) for workers started by hand."""
    global _SPAWN_CONTEXT
    if _SPAWN_CONTEXT is None:
        _SPAWN_CONTEXT = _GuardedSpawnContext()
    return _SPAWN_CONTEXT


def _early_bytes(proc: Any) -> bytes:
    fd = getattr(getattr(proc, "_popen", None), "early_error_fd", None)
    if fd is None:
        return b""
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError, OSError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def early_failure(proc: Any) -> Failed | None:
    """What a worker sent down its early-error pipe before ``child_main`` ran, as a record."""
    raw = _early_bytes(proc)
    if not raw:
        return None
    try:
        fields = pickle.loads(raw)
        return Failed(*fields)
    except Exception:
        text = raw.decode("utf-8", "replace")
        last = text.strip().splitlines()[-1] if text.strip() else ""
        return Failed(PRE_BOOTSTRAP, "", last, text)


def early_error_text(proc: Any) -> str:
    """The traceback text of :func:`early_failure` (``""`` when there was none)."""
    found = early_failure(proc)
    return found.traceback_text if found is not None else ""


class _DryRunPopen:
    """The starting Popen a dry run pickles under: a descriptor is named, not duplicated."""

    def __init__(self, dup_fd: type) -> None:
        self.DupFd = dup_fd

    def duplicate_for_child(self, fd: int) -> int:
        return fd


class _Discard:
    """A file that keeps nothing (a dry run wants the pickler's errors, not its bytes)."""

    def write(self, data: bytes) -> int:
        return len(data)


class LaunchContext(Plain):
    """What the launcher needs from a context: pipes, processes, how results pickle.

    Plain, not a dataclass: a warm server preloads this module for its workers, and the
    generated code would cost it ~1 ms (spawnkit._plain).
    """

    _fields = ("package", "start_method", "process_class", "server", "fork_timeout", "lease")

    def __init__(
        self,
        package: str,
        start_method: str,
        process_class: Callable[..., Any],
        server: WarmServer | None = None,
        fork_timeout: float | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.package, self.start_method, self.process_class = package, start_method, process_class
        self.server, self.fork_timeout, self.lease = server, fork_timeout, lease

    def release(self) -> None:
        """The launch starts no more workers (its group closed): its server may be let go
        when a later launch's environment differs (``warm.Lease``)."""
        self.lease = None

    def pipe(self) -> tuple[Any, Any]:
        """A one-way pipe ``(read_end, write_end)`` of this package's Connection type."""
        r, w = _sub(self.package, "connection").Pipe(duplex=False)
        return r, w

    def process(self, spec: ProcessSpec, name: str) -> Any:
        """A not yet started worker: it runs ``child_main(spec)`` (see :mod:`.child`)."""
        return self.process_class(target=child_main, args=(spec,), name=name, daemon=False)

    def start(self, proc: Any) -> None:
        if self.server is None:
            from spawnkit.bootstrap._parent_death import RUN_ID_VAR
            from spawnkit.bootstrap.process import rank_env
            from spawnkit.platforms.discovery import env_applied

            # All of env= in the environment the interpreter is exec'd with: what it reads at
            # start (PYTHONHASHSEED, LD_LIBRARY_PATH...), and what the launching script's own
            # imports read as the worker runs it again, before any stage (OMP_NUM_THREADS for
            # the script's `import torch`; an engine's config constants): set by the first
            # stage, they came too late, where a warm worker had them.  Not the run's id: it
            # marks what the worker starts (cleanup() finds the strays by it), set in stage 1.
            spec = proc._args[0]
            env = {k: v for k, v in spec.env.items() if k != RUN_ID_VAR}
            env.update(rank_env(spec))  # its own rank from the start, not the launcher's
            with env_applied(env):
                proc.start()
            return
        from spawnkit.protocol import warm

        with warm.launching(self.server, self.fork_timeout):
            proc.start()

    def dry_pickle(self, value: Any) -> None:
        """Pickle ``value`` as a worker's start will (this package's reducer, as if spawning, so
        a Pipe end, a Queue or a Lock of the context pickles), writing nothing anywhere: it
        raises what that start would, before any rank exists (``launcher._check_sendable``)."""
        context = _sub(self.package, "context")
        context.set_spawning_popen(_DryRunPopen(_sub(self.package, "popen_spawn_posix")._DupFd))
        try:
            context.reduction.dump(value, _Discard())
        finally:
            context.set_spawning_popen(None)

    @property
    def loads(self) -> Callable[[bytes], Any]:
        """The unpickler of what a worker of this context pickled (its result, its exception).

        The function itself, not a method calling it: the unpickled exception then never
        passes through this module on its way to the group (``tests/test_walks.py``)."""
        return picklers(self.package)[1]


def get_launch_context(
    context: str,
    start_method: str,
    preload: tuple[str, ...],
    template: ProcessSpec,
    timeout: float | None = None,
) -> LaunchContext:
    """Resolve ``context=`` and ``start_method=``; starts (or reuses) a warm server if needed."""
    _check_choices(context, start_method, preload)
    if start_method == "spawn":
        return LaunchContext(context, "spawn", _variant(context, "spawn"))
    from spawnkit.bootstrap.process import _PER_LAUNCH_ENV
    from spawnkit.protocol import warm

    mode = warm.bootstrap_mode(template.env)
    from spawnkit._environ import read_at_start

    boot = None
    # Not this launch's own entries (the run's id, a traced launch's TRACEPARENT/TRACESTATE):
    # the server applied them to its environment, so every later launch's worker forked from
    # it, traced or not, continued this launch's (long ended) trace with its trace state.
    shared_env = {k: v for k, v in template.env.items() if k not in _PER_LAUNCH_ENV}
    at_start = {**read_at_start(shared_env), **warm.server_reads(shared_env)}
    if mode == "server":
        boot = template.replace(env=shared_env, payload=None, extra={})
    else:  # its preloads see env= as a spawned worker's imports do (as in server mode)
        at_start.update(_worker_mode_env(shared_env))
    lease = warm.Lease()
    server = warm.get_server(
        context, tuple(preload), template.namespace, boot, timeout, at_start, holder=lease
    )
    variant = _variant(context, "forkserver")
    return LaunchContext(context, "forkserver", variant, server, timeout, lease)


def _worker_mode_env(env: dict[str, str]) -> dict[str, str]:
    """What a server of ``SPAWNKIT_WARM_BOOTSTRAP=worker`` is started with: every ``env=``
    entry this process has otherwise, bar the per-launch ones (each worker sets its own).

    Such a server runs no bootstrap, so it applied no ``env=`` before importing its preloads:
    what they read at import (``HF_HOME`` in huggingface_hub's constants, an engine's
    ``envs.py``, torch's ``OMP_NUM_THREADS``) was the launcher's in every warm worker, while
    server mode and spawned workers read ``env=``.  Started with it, the server is keyed on
    it too, so a launch with another ``env=`` gets another server (the old one let go)."""
    from spawnkit.bootstrap.process import _PER_LAUNCH_ENV

    environ = os.environ
    return {k: v for k, v in env.items() if k not in _PER_LAUNCH_ENV and environ.get(k) != v}


def _check_choices(context: str, start_method: str, preload: tuple[str, ...]) -> None:
    if context not in CONTEXTS:
        raise ConfigError(f"context must be one of {CONTEXTS}, got {context!r}", setting="context")
    if start_method not in START_METHODS:
        meant = str(start_method).strip().lower()
        why = (
            "fork is refused because a forked worker inherits the launcher's imports (hook "
            "targets included) and any accelerator context; use forkserver with preload= for "
            "fast starts"
            if meant == "fork"
            else f"did you mean {meant!r}?"
            if meant in START_METHODS
            else "multiprocessing's other methods are not supported"
        )
        raise ConfigError(
            f"start_method must be one of {START_METHODS}, got {start_method!r}: {why}",
            setting="start_method",
        )
    if preload and start_method != "forkserver":
        raise ConfigError(
            f"preload={list(preload)} needs start_method='forkserver' (a spawned worker starts "
            "from a fresh interpreter, so there is nothing to preload into)",
            setting="preload",
        )
    for name in preload:
        if name in ("__main__", "__mp_main__"):
            # Importing it in the server would run the script once, for every worker; the
            # stdlib forkserver does so from 3.13.8 / 3.14.1, and never did before.
            raise ConfigError(
                f"preload={name!r}: the warm-start server never imports the launching script; "
                "each worker imports it itself (as __mp_main__) after the server applied the "
                "hooks, whatever this Python's own forkserver does with '__main__'. Remove "
                f"{name!r} from preload= (--preload) and preload the modules the script "
                "imports instead.",
                setting="preload",
            )
    if context == "multiprocess":
        try:
            importlib.import_module("multiprocess")
        except ImportError as exc:
            raise ConfigError(
                "context='multiprocess' needs the multiprocess package: pip install multiprocess",
                setting="context",
            ) from exc
