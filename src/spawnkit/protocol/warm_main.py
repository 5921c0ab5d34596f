"""The warm-start server's own process: bootstrap once, check it is safe to fork, then fork.

``serve()`` is the ``-c`` statement :class:`~spawnkit.protocol.warm.WarmServer`
starts.  It arms the import guard, runs the shared stages once
(:func:`prebootstrap`), imports the preloads (which therefore see patched
code), refuses to serve when forking would be unsafe, and only then enters
the package's fork loop.  It speaks the worker protocol on its status pipe:
a ``StageStarted``/``StageFinished`` pair per stage, plugin and preload, then
``Ready``, or one ``Failed`` record (``failure.record``; a refusal travels as
its typed ``ForkSafetyError``/``ForkServerError`` of kind ``preload``) or ``Exited``.

Refused, by name: an accelerator context created by the platform, a plugin,
hook application or a preload (a forked worker cannot use it), a thread
still running after the bootstrap (forking copies no thread, and a lock it
held stays locked in every worker), and a network connection still open after
it (every worker would share it: ``_fork_sockets``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import spawnkit._collector as _collector
from spawnkit import _steps
from spawnkit.bootstrap.stages import STAGES, Stage
from spawnkit.errors import ForkSafetyError, ForkServerError
from spawnkit.protocol import (
    _fork_children,
    _fork_exit,
    _fork_loop,
    _fork_pools,
    _fork_prepare,
    _fork_sockets,
    _fork_state,
    _main_code,
    _shadows,
    _sources,
    failure,
)
from spawnkit.protocol import messages as proto

__all__ = ["prebootstrap", "serve"]

_OWN_PRELOAD = (
    # spawnkit's own worker-side modules: hook-neutral by construction (no engine code, no
    # plugin), and importing them is most of what a forked worker would otherwise repeat.
    "spawnkit.protocol.child",
    "spawnkit.protocol.popen",
    "spawnkit.bootstrap._parent_death",
    "spawnkit.bootstrap.process",
    "spawnkit.hooks.plugins",
    "spawnkit.hooks.registry",
    "spawnkit.platforms.discovery",
)


class _Status:
    """The status pipe: the worker protocol's messages; remembers the step last announced."""

    def __init__(self, fd: int) -> None:
        self.conn = Connection(fd, readable=False)
        self.step = "startup"
        self.pools = _fork_pools.Pools()  # native pools a fork would leave behind (OpenMP)

    def send(self, msg: proto.Message) -> None:
        if isinstance(msg, proto.StageStarted):
            self.step = msg.stage
        self.conn.send(msg)

    # StageListener: each stage goes to the launcher, then the accelerator check.
    def stage_started(self, stage: str) -> None:
        self.send(proto.StageStarted(str(stage)))

    def stage_finished(self, stage: str, seconds: float) -> None:
        self.send(proto.StageFinished(str(stage), seconds))
        if stage == Stage.PLATFORM.value:
            winner = self.namespace.platforms.decision().get("winner")
            culprit = f"platform {getattr(winner, 'name', '?')!r} (its init_backend)"
        else:
            culprit = f"importing hook target modules (stage {stage!r})"
        self.pools.after(culprit, stage)
        if _accelerator_contexts():
            _check_accelerator(culprit, stage)

    def plugin_loaded(self, name: str, dist: str) -> None:
        self.send(proto.StageStarted(_steps.plugin_step(name)))
        self.pools.after(f"plugin {name!r} from {dist}", Stage.PLUGINS.value)
        _check_accelerator(f"plugin {name!r} from {dist}", Stage.PLUGINS.value)

    def ready(self, report: Any) -> None:
        return None

    namespace: Any = None  # the bootstrapper's, once it exists


def _check_accelerator(culprit: str, stage: str) -> None:
    contexts = _accelerator_contexts()
    if not contexts:
        return
    err = ForkSafetyError(
        f"{culprit} created an accelerator context ({', '.join(contexts)}) in the warm-start "
        "fork server. A worker forked from it cannot use a context created before the fork, so "
        "the server refuses to serve. Defer device work to the entry (or to hook call time), "
        "or use start_method='spawn'.",
        stage=stage,
    )
    err.culprit = culprit
    raise err


def _accelerator_contexts() -> list[str]:
    """Accelerator runtimes that already hold a context (checked without creating one)."""
    found: list[str] = []
    if "torch" not in sys.modules:
        return found
    for name in ("cuda", "xpu"):
        probe = getattr(sys.modules.get(f"torch.{name}"), "is_initialized", None)
        try:
            if callable(probe) and probe():
                found.append(f"torch.{name}")
        except Exception:
            continue
    return found


def prebootstrap(spec: Any, status: _Status) -> None:
    """Platform, plugins and hooks, once, with a fork-safety check after each step."""
    from spawnkit.bootstrap.process import Bootstrapper

    bootstrapper = Bootstrapper(spec, listener=status, server=True)
    status.namespace = bootstrapper.namespace
    try:
        for row in STAGES:
            if row.shared:
                getattr(bootstrapper, row.method)()
    except ForkSafetyError as exc:
        raise exc.cause if isinstance(exc.cause, ForkSafetyError) else exc from None
    bootstrapper.hand_down()


class _ThreadOrigins:
    """Which step started each thread, so a thread left running can be blamed on its plugin."""

    def __enter__(self) -> _ThreadOrigins:
        import weakref

        from spawnkit.bootstrap import guard

        self.origins: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()
        self._original = original = threading.Thread.start
        origins = self.origins

        def start(thread: threading.Thread) -> None:
            origins[thread] = guard.current_step()
            original(thread)

        threading.Thread.start = start  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        threading.Thread.start = self._original  # type: ignore[method-assign]

    def check(self) -> None:
        for thread in threading.enumerate():
            if thread is threading.main_thread() or not thread.is_alive():
                continue
            raise failure.fork_refusal(
                f"thread {thread.name!r}",
                *_steps.blame(self.origins.get(thread, "")),
                "started",
                "running",
                "A forked worker gets no copy of it, and a lock it holds stays locked in every "
                "worker",
                "Start the thread at hook call time or in the entry (plugin callbacks run once "
                "per server)",
            )


def _preload(module: str, status: _Status) -> None:
    """Import one preload module; refused if it fails or creates an accelerator context."""
    from spawnkit.bootstrap import guard

    step = _steps.preload_step(module)
    status.send(proto.StageStarted(step))
    begun = time.perf_counter()
    try:
        with guard.step(step):
            importlib.import_module(module)
    except SystemExit:
        raise  # the server's own exit record (``_prepare``)
    except BaseException as exc:  # KeyboardInterrupt too: no signal came, the module raised it
        import traceback

        text = traceback.format_exc()
        raise ForkServerError(
            f"preload module {module!r} failed to import in the warm-start fork server, so no "
            f"worker could be started from it.\n{text}Fix the import or remove it from preload=.",
            stage="preload",
            traceback_text=text,
            kind="preload",
        ) from exc
    status.send(proto.StageFinished(step, time.perf_counter() - begun))
    status.pools.after(f"preload module {module!r}", "preload")
    contexts = _accelerator_contexts()
    if contexts:
        raise ForkServerError(
            f"preload module {module!r} initialized an accelerator context "
            f"({', '.join(contexts)}) in the warm-start fork server. Forked workers cannot use "
            "a context created before the fork, so this preload is refused. Preload only "
            "modules that import without touching the device, or use start_method='spawn'.",
            stage="preload",
            kind="preload",
        )


def _prepare(
    spec: Any, preload: list[str], status: _Status, started: float, launcher: list[str]
) -> int | None:
    """Bootstrap once (``spec`` None: not at all), preload, check threads; the last message.

    Returns the most spares to fork ahead (``_fork_loop``), or None when the server failed.
    """
    try:
        spares = _fork_loop.most_spares()  # the launcher checked it: same environment
        with (
            _ThreadOrigins() as threads,
            _fork_sockets.Connections() as connections,
            _fork_children.Children() as children,
            _sources.Reads() as reads,  # a plugin's configuration: listed with the sources
        ):
            if spec is not None:
                prebootstrap(spec, status)
            elif preload:  # worker mode: each worker bootstraps, yet preloads run here once
                from spawnkit.bootstrap.process import note_rankless_reads

                note_rankless_reads()
            for module in preload:
                _preload(module, status)
            _import_quietly(launcher, status)
            status.pools.after("", _steps.stage_of(status.step))
            threads.check()
            connections.check()
            children.check()
        _fork_state.settle()
        _fork_exit.settle()
        _fork_prepare.settle()
    except SystemExit as exc:
        import traceback

        status.send(failure.exited(status.step, exc, traceback.format_exc()))
        return None
    except BaseException as exc:  # a plugin's KeyboardInterrupt read as "killed by SIGINT"
        stage = str(getattr(exc, "stage", "") or _steps.stage_of(status.step))
        status.send(failure.record(stage, exc))
        return None
    from spawnkit.bootstrap.process import take_rankless_reads

    # who asked for a rank while there was none: the launcher warns (WarmServerWarning);
    # the files whose code its workers run: the launcher forks from it while none changed
    report = {"started": started, "rankless": take_rankless_reads()}
    started_ns = int(started * 1e9)
    sources = _sources.snapshot(started_ns, reads.paths, reads.listed)
    # where a module put since would be imported in place of the server's (_shadows)
    shadows = _shadows.watch(started_ns, _sources.installed_roots(), reads.missed)
    status.send(proto.Ready({**report, "sources": sources, "shadows": shadows}))
    return spares


def serve(
    listener_fd: int,
    alive_r: int,
    status_fd: int,
    fault_fd: int,
    boot_fd: int,
    package: str,
    preload: list[str],
    sys_path: list[str],
) -> None:
    """The server's main: guard, bootstrap once, preload, check fork safety, then fork loop."""
    from spawnkit.protocol.child import arm_guard

    arm_guard()
    _fork_state.watch()  # before any plugin: numpy's global random state, as it is imported
    _fork_exit.watch()  # and the exit handlers each worker runs as a spawned one would
    # What the server imports from here on is kept for its life and frozen below: no
    # automatic collection walks it meanwhile (spawnkit._collector; ~80 ms of a torch preload).
    paused = _collector.pause()
    sys.path[:] = sys_path
    _faulthandler(fault_fd, True)
    # First, while this process is small and has one thread: the guardian of every worker
    # it will fork (see _parent_death), so forked workers need not fork one each.
    from spawnkit.bootstrap._parent_death import start_server_guardian

    start_server_guardian()
    started = time.time()
    status = _Status(status_fd)
    spec, launcher, main, argv = _read_boot(boot_fd)
    _as_its_workers(package, argv, alive_r)
    _fork_prepare.before()  # what the bootstrap changes from here, each worker changes again
    for module in _OWN_PRELOAD:
        with contextlib.suppress(ImportError):  # an optional part: the worker imports it
            importlib.import_module(module)
    importlib.import_module(f"{package}.popen_forkserver")
    # The Process class every worker unpickles by reference, built lazily: once here, not in
    # each forked worker (which builds it, and reports why it could not, if this fails).
    with contextlib.suppress(Exception):
        importlib.import_module("spawnkit.protocol.popen")._variant(package, "forkserver")
    spares = _prepare(spec, preload, status, started, launcher)
    status.conn.close()
    if spares is None:
        os._exit(1)
    _faulthandler(fault_fd, False)
    # Everything preloaded is immortal for the server's children: keep their collector from
    # walking (and so copy-on-write faulting) the preloaded heap, which can cost a forked
    # torch worker more than the fork itself.
    gc.collect()
    gc.freeze()
    _collector.resume(paused)  # a worker's own objects are collected as usual
    # The package's forkserver protocol, served by spawnkit's loop (workers forked ahead, see
    # _fork_loop), with two of its functions replaced in this process:
    # a worker's failure before child_main reaches the launcher, and the launcher's
    # __main__ runs from code compiled once here (each worker still runs it: _main_code).
    forkserver: Any = importlib.import_module(f"{package}.forkserver")
    forkserver._serve_one = _early_reporting(forkserver._serve_one, package)
    _worker_prepare(package, main)
    _fork_loop.serve_forever(package, listener_fd, alive_r, spares)


def _worker_prepare(package: str, main: Any) -> None:
    """``spawn.prepare`` as each worker runs it: the launcher's ``__main__`` from code compiled
    once here, then what the bootstrap changed in ``sys.path`` and the directory (``prepare()``
    puts the launcher's back, where a spawned worker's plugins change them after it)."""
    spawn: Any = importlib.import_module(f"{package}.spawn")
    compiled = _main_code.compile_main(main)
    if compiled is not None:
        spawn.prepare = _main_code.prepare_with(spawn.prepare, compiled, spawn)
    spawn.prepare = _fork_prepare.wrap(spawn.prepare)


#: The server's process name while it bootstraps (``multiprocessing.current_process().name``).
SERVER_NAME = "spawnkit-warm-server"


def _as_its_workers(package: str, argv: list[str], alive_r: int) -> None:
    """Before the bootstrap: the process a spawned worker's plugins see, not a launcher.

    A spawned worker loads its plugins after multiprocessing made it a child: the launcher's
    command line (``prepare()``), a process that is not ``MainProcess`` and has a parent, stdin
    closed (``Process._bootstrap``).  A plugin or preload that asks (``sys.argv``, the
    ``current_process().name == "MainProcess"`` idiom, ``parent_process()``, ``input()``) here
    decides as it would there, not as a launcher would, for every worker forked from here.
    """
    process: Any = importlib.import_module(f"{package}.process")
    sys.argv[:] = argv
    process.current_process().name = SERVER_NAME
    parent = getattr(process, "_ParentProcess", None)
    if parent is not None:  # the launcher; ``alive_r`` reads EOF once it and every worker left
        process._parent_process = parent("MainProcess", os.getppid(), alive_r)
    importlib.import_module(f"{package}.util")._close_stdin()


def _early_reporting(serve_one: Any, package: str) -> Any:
    """The fork loop's per-worker function, sending a failure before ``child_main`` to the launcher.

    The early-error pipe is ``fds[2]``, after the server's alive pipe and the resource tracker.
    """
    from spawnkit.protocol import child

    def serve_one_reporting(child_r: int, fds: list[int], *rest: Any) -> Any:
        child.set_early_fd(fds[2] if len(fds) > 2 else None)
        try:
            return serve_one(child_r, fds, *rest)
        except SystemExit:
            raise
        except BaseException as exc:
            child.report_early(exc, package)
            raise

    return serve_one_reporting


def _faulthandler(fd: int, on: bool) -> None:
    """A hang or crash at start is dumped to the launcher's fault pipe; closed before serving."""
    import faulthandler

    with contextlib.suppress(OSError, ValueError, RuntimeError, AttributeError):
        if on:
            faulthandler.enable(file=fd, all_threads=True)
            faulthandler.register(signal.SIGUSR1, file=fd, all_threads=True, chain=False)
            return
        # A plugin or preload that installed its own SIGUSR1 handler meanwhile keeps it:
        # unregister() puts back the C handler saved before them (the default, which ends
        # the process), while getsignal() went on naming theirs in every forked worker.
        theirs = signal.getsignal(signal.SIGUSR1)
        faulthandler.unregister(signal.SIGUSR1)
        if callable(theirs) or theirs is signal.SIG_IGN:
            signal.signal(signal.SIGUSR1, theirs)
        faulthandler.disable()
    if not on:
        os.close(fd)


def _import_quietly(modules: list[str], status: _Status) -> None:
    """The launcher's own modules (``warm.launcher_modules``): what its workers would re-import.

    Announced as a step of its own: one of them can be slow, and a start that times out there
    must say so, not name the stage before it.
    """
    missing = [name for name in modules if name not in sys.modules]
    if not missing:
        return
    from spawnkit.bootstrap import guard

    step = _steps.LAUNCHER_MODULES
    status.send(proto.StageStarted(step))
    begun = time.perf_counter()
    with guard.step(step):
        for name in missing:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    status.send(proto.StageFinished(step, time.perf_counter() - begun))


def _read_boot(fd: int) -> tuple[Any, list[str], Any, list[str]]:
    import pickle

    chunks = []
    while data := os.read(fd, 65536):
        chunks.append(data)
    os.close(fd)
    spec, launcher, main, argv = pickle.loads(b"".join(chunks))
    return spec, list(launcher), main, list(argv)
