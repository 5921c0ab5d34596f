"""Warm start: a fork server per configuration, bootstrapped once, that forks ready workers.

The standard library keeps one forkserver per process, configured by a global
preload list that silently skips modules failing to import.  spawnkit keeps
one server per *key* (everything that decides a bootstrap's outcome: package,
preload list, namespace, platform, plugins, entry-point rows, environment,
guard policy, ``sys.path`` and what is installed on it, working directory and
interpreter), because a worker forked from a server inherits all of those
from the moment the server started: a later group whose key differs must not
be served by a stale one.

Pre-bootstrapped (the default): the server arms the import guard, then runs
``initialize_platform`` -> ``load_plugins`` -> ``apply_hooks`` once with the
spec every rank shares, then imports the preloads, which therefore see
patched code (a preload may import hook targets).  A forked worker only arms
parent death, materialises its payload, resolves its entry and runs it; its
report names this server as the source of the stages it inherited.  With
``SPAWNKIT_WARM_BOOTSTRAP=worker`` the server only preloads and each worker
runs every stage itself (for plugins whose callbacks need per-rank state);
preloading a hook target is then an import-guard error.

Server start is checked, not assumed: before serving, the server refuses (a
typed error naming the culprit) when an accelerator context was created by the
platform, a plugin, hook application or a preload, or when a thread is still
running (forking copies no thread, and a lock it held stays locked in every
worker).  Progress, the outcome and any crash dump reach the launcher over
pipes it reads with the launch's ``ready_timeout``.  Only then does the server
enter the standard library's fork loop.  Servers stop when the launcher exits
(``atexit``) or on :func:`shutdown_forkservers`; one that died is replaced on
the next launch, and a launch that races its death fails with
``ForkServerError`` instead of waiting.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import wait as _mp_wait
from typing import Any

from spawnkit import _steps
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import ConfigError, ForkSafetyError, ForkServerError
from spawnkit.protocol import failure

__all__ = [
    "MODE_VAR",
    "WarmServer",
    "current_server",
    "get_server",
    "launching",
    "serve",
    "shutdown_forkservers",
]

MODE_VAR = "SPAWNKIT_WARM_BOOTSTRAP"
"""``server`` (default): bootstrap once in the server; ``worker``: every worker bootstraps."""

_START_TIMEOUT = 120.0
_FORK_TIMEOUT = 30.0
_DUMP_WAIT = 0.5
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
_STOP_TIMEOUT = 5.0

_servers: dict[tuple[Any, ...], WarmServer] = {}
_servers_lock = threading.Lock()
_tls = threading.local()


def _pkg(name: str, sub: str) -> Any:
    return importlib.import_module(f"{name}.{sub}")


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj)
    return struct.pack("!I", len(data)) + data


def _unframe(raw: bytes) -> list[Any]:
    """Messages from the status pipe; a torn last frame (the server died mid-write) is dropped."""
    out: list[Any] = []
    pos = 0
    while pos + 4 <= len(raw):
        (size,) = struct.unpack("!I", raw[pos : pos + 4])
        if pos + 4 + size > len(raw):
            break
        try:
            out.append(pickle.loads(raw[pos + 4 : pos + 4 + size]))
        except Exception:
            break
        pos += 4 + size
    return out


class WarmServer:
    """One running fork server: its address, its "alive" pipe, its pid and what it did at start."""

    def __init__(self, package: str, preload: tuple[str, ...], boot: Any = None) -> None:
        self.package = package
        self.preload = preload
        self.boot = boot
        self.pid: int | None = None
        self.address: Any = None
        self.fork_timeout = _FORK_TIMEOUT
        self._alive_w: int | None = None
        self._fault_r: int | None = None
        self._lock = threading.Lock()
        self.preload_seconds: dict[str, float] = {}
        self.stage_seconds: dict[str, float] = {}
        self.started_at = 0.0

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = _START_TIMEOUT) -> None:
        util = _pkg(self.package, "util")
        spawn = _pkg(self.package, "spawn")
        connection = _pkg(self.package, "connection")
        _pkg(self.package, "resource_tracker").ensure_running()
        boot = pickle.dumps(self.boot) if self.boot is not None else b""
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            _bind(listener, address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            status_r, status_w = os.pipe()
            fault_r, fault_w = os.pipe()
            boot_r, boot_w = os.pipe()
            child_fds = [listener.fileno(), alive_r, status_w, fault_w, boot_r]
            try:
                cmd = (
                    "from spawnkit.protocol._warm_server import serve; "
                    f"serve({listener.fileno()}, {alive_r}, {status_w}, {fault_w}, {boot_r}, "
                    f"{self.package!r}, {list(self.preload)!r}, {list(sys.path)!r})"
                )
                exe = spawn.get_executable()
                args = [exe, *util._args_from_interpreter_flags(), "-c", cmd]
                pid = util.spawnv_passfds(exe, args, child_fds)
            except BaseException:
                for fd in (alive_w, status_r, fault_r, boot_w):
                    os.close(fd)
                raise
            finally:
                for fd in child_fds[1:]:
                    os.close(fd)
        self.pid, self.address, self._alive_w = pid, address, alive_w
        self._fault_r = fault_r
        os.set_blocking(fault_r, False)
        # Never blocking: the server reads the spec first thing, but one that died before
        # reading must not block this launch (its death is reported below).
        from spawnkit.protocol.popen import send_start_data

        try:
            send_start_data(boot_w, boot)
        finally:
            os.close(boot_w)
        try:
            status = self._read_status(status_r, timeout)
        finally:
            os.close(status_r)
        if not status.get("ok"):
            fault = self._read_fault()
            err = _start_error(status, self, fault)
            self.stop(0.5)
            raise err
        self.preload_seconds = dict(status.get("seconds", {}))
        self.stage_seconds = dict(status.get("stages", {}))
        self.started_at = float(status.get("started", time.time()))
        self.fork_timeout = max(timeout, 1.0)

    def _read_status(self, fd: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self._timed_out(timeout, _unframe(b"".join(chunks)))
            # poll-based: select() refuses descriptors above 1024, which a serving
            # process with many sockets open hands out.
            if not _mp_wait([fd], left):
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append(data)
        messages = _unframe(b"".join(chunks))
        final = [m for m in messages if "ok" in m]
        if final:
            status: dict[str, Any] = final[-1]
            return status
        where = _last_step(messages)
        return {"ok": False, "kind": "died", "step": where, "detail": self._exit_text()}

    def _timed_out(self, timeout: float, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if self.pid is not None:  # ask faulthandler for the stack of the stuck server
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGUSR1)
            time.sleep(_DUMP_WAIT)
        return {"ok": False, "kind": "timeout", "step": _last_step(messages), "timeout": timeout}

    def _read_fault(self) -> str:
        fd, chunks = self._fault_r, []
        if fd is None:
            return ""
        with contextlib.suppress(OSError):
            while data := os.read(fd, 65536):
                chunks.append(data)
        return b"".join(chunks).decode("utf-8", "replace")

    def _exit_text(self, timeout: float = 2.0, running: str = "") -> str:
        code = self._reap(timeout)
        if code is None:
            return running or "it stopped reporting without exiting"
        if code < 0:
            try:
                return f"it was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"it was killed by signal {-code}"
        return f"it exited with code {code}"

    def _reap(self, timeout: float) -> int | None:
        if self.pid is None:
            return None
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return 0
            if pid:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return pid == 0

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Close the alive pipe (the server exits once its workers are gone); bounded, then kill."""
        with self._lock:
            if self._alive_w is not None:
                os.close(self._alive_w)
                self._alive_w = None
            if self._fault_r is not None:
                os.close(self._fault_r)
                self._fault_r = None
            if self.pid is not None:
                # The server also exits when its last worker closes its copy of the alive
                # pipe; a worker still running would keep it waiting, so bound the wait.
                if self._reap(timeout) is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGKILL)
                    self._reap(timeout)
                self.pid = None
            if self.address is not None:
                util = _pkg(self.package, "util")
                if not util.is_abstract_socket_namespace(self.address):
                    with contextlib.suppress(OSError):
                        os.unlink(self.address)
                self.address = None

    # ------------------------------------------------------------- forking
    def connect_to_new_process(self, fds: list[int]) -> tuple[int, int]:
        """Ask the server for a child, as the standard library's ForkServer does."""
        reduction = _pkg(self.package, "reduction")
        resource_tracker = _pkg(self.package, "resource_tracker")
        if self._alive_w is None:
            raise ForkServerError("the warm-start fork server was shut down", stage="preload")
        client = socket.socket(socket.AF_UNIX)
        try:
            client.connect(self.address)
        except OSError as exc:
            client.close()
            raise self._gone(f"connecting to it failed ({exc})") from exc
        with client:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            allfds = [child_r, child_w, self._alive_w, resource_tracker.getfd(), *fds]
            try:
                reduction.sendfds(client, allfds)
                return parent_r, parent_w
            except BaseException as exc:
                os.close(parent_r)
                os.close(parent_w)
                if isinstance(exc, OSError):
                    raise self._gone(f"sending it the request failed ({exc})") from exc
                raise
            finally:
                os.close(child_r)
                os.close(child_w)

    def read_child_pid(self, sentinel: int) -> int:
        """The forked worker's pid, which the server writes first; bounded (see ``launching``)."""
        timeout = getattr(_tls, "timeout", None) or self.fork_timeout
        if not _mp_wait([sentinel], timeout):
            raise self._gone(
                f"it did not fork a worker within {timeout:.0f} s (stopped or stuck), so the "
                "launcher killed it",
                kill=True,
            )
        try:
            pid: int = _pkg(self.package, "forkserver").read_signed(sentinel)
        except (EOFError, OSError) as exc:
            raise self._gone("it closed the connection before forking a worker") from exc
        return pid

    def _gone(self, what: str, *, kill: bool = False) -> ForkServerError:
        """The typed error of a launch that raced the server's death (or found it stuck)."""
        pid = self.pid
        if kill and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        state = self._exit_text(1.0 if kill else 0.0, running="it is still running")
        err = ForkServerError(
            f"the warm-start fork server (pid {pid}) could not start a worker: {what}; {state}. "
            "Effect: this launch started no further worker and is being torn down. The next "
            "launch starts a new server; retry it.",
            stage=Stage.ARM_PARENT_DEATH.value,
        )
        err.server_pid = pid
        return err


def _last_step(messages: list[dict[str, Any]]) -> str:
    steps = [m["step"] for m in messages if "step" in m]
    return str(steps[-1]) if steps else "startup"


def _step_text(step: str) -> str:
    kind, name = _steps.split_step(step)
    if kind == _steps.PRELOAD:
        return f"importing preload module {name!r}"
    if kind == _steps.PLUGIN:
        return f"loading plugin {name!r} (stage 'load_plugins')"
    return f"running stage {step!r}" if step != "startup" else "starting up"


def _step_stage(step: str) -> str:
    kind, _name = _steps.split_step(step)
    return {
        _steps.PLUGIN: "load_plugins",
        _steps.PRELOAD: "preload",
        _steps.STARTUP: "preload",
    }.get(kind, step)


def _start_error(status: dict[str, Any], server: WarmServer, fault: str) -> ForkServerError:
    """The parent's typed error for a server that refused to serve or died starting."""
    kind = status.get("kind")
    err = (
        _refusal_error(status)
        if kind in ("accelerator", "import", "safety")
        else _failure_error(status, server, fault)
    )
    err.server_pid = server.pid
    if kind in ("stage", "safety"):
        err.traceback_text = err.traceback_text or str(status.get("traceback", ""))
    return err


def _refusal_error(status: dict[str, Any]) -> ForkServerError:
    """A server that started but refuses to serve: a preload or a thread made forking unsafe."""
    kind = status.get("kind")
    module = status.get("module", "")
    if kind == "accelerator":
        return ForkServerError(
            f"preload module {module!r} initialized an accelerator context "
            f"({', '.join(status.get('detail', []))}) in the warm-start fork server. Forked "
            "workers cannot use a context created before the fork, so this preload is "
            f"refused. Preload only modules that import without touching the device, "
            f"or use start_method='spawn'.",
            stage="preload",
            kind="preload",
        )
    if kind == "import":
        return ForkServerError(
            f"preload module {module!r} failed to import in the warm-start fork server, so no "
            f"worker could be started from it.\n{status.get('traceback', '')}"
            "Fix the import or remove it from preload=.",
            stage="preload",
            traceback_text=status.get("traceback", ""),
            kind="preload",
        )
    err = ForkSafetyError(str(status.get("message", "")), stage=status.get("stage", ""))
    err.culprit = str(status.get("culprit", ""))
    return err


def _failure_error(status: dict[str, Any], server: WarmServer, fault: str) -> ForkServerError:
    """A server that could not finish starting: a shared stage raised, it exited, hung or died."""
    pid, preload = server.pid, server.preload
    kind = status.get("kind")
    if kind == "stage":
        err = ForkServerError(
            f"the warm-start fork server (pid {pid}) failed in stage "
            f"{status.get('stage')!r}, which it runs once for every worker it will fork: "
            f"{status.get('message')}\n"
            "Effect: no worker was started. Fix the cause; set "
            f"{MODE_VAR}=worker to run this stage in each worker instead, or use "
            "start_method='spawn'.\n"
            f"Server traceback (pid {pid}):\n{str(status.get('traceback', '')).rstrip()}",
            stage=str(status.get("stage", "")),
            traceback_text=str(status.get("traceback", "")),
        )
        err.cause = failure.load_exception(status.get("exc"))
        return err
    step = str(status.get("step", "startup"))
    dump = f"\nServer fault dump (pid {pid}):\n{fault.rstrip()}" if fault.strip() else ""
    if kind == "exited":
        text = (
            f"the warm-start fork server (pid {pid}) called sys.exit({status.get('code')}) "
            f"while {_step_text(step)}, so it cannot serve workers. Effect: no worker was "
            "started. Remove the exit from that code (a plugin or module must not end the "
            f"process), or set {MODE_VAR}=worker.\n{status.get('traceback', '')}".rstrip()
        )
    elif kind == "timeout":
        text = (
            f"the warm-start fork server (pid {pid}) did not finish starting within "
            f"{status.get('timeout', 0.0):.0f} s: it is stuck {_step_text(step)} (stack "
            "below). Effect: no worker was started; the server was killed. Fix the hang, or "
            f"raise ready_timeout if that step is just slow.{dump}"
        )
    else:
        text = (
            f"the warm-start fork server (pid {pid}) for preload={list(preload)} died while "
            f"{_step_text(step)}: {status.get('detail', 'no status was reported')}. Effect: no "
            f"worker was started.{dump}"
        )
    return ForkServerError(text, stage=_step_stage(step))


def _accelerator_contexts() -> list[str]:
    """Accelerator runtimes that already hold a context (checked without creating one)."""
    torch = sys.modules.get("torch")
    found: list[str] = []
    if torch is None:
        return found
    for name in ("cuda", "xpu"):
        mod = sys.modules.get(f"torch.{name}")
        probe = getattr(mod, "is_initialized", None)
        try:
            if callable(probe) and probe():
                found.append(f"torch.{name}")
        except Exception:
            continue
    return found


# ------------------------------------------------------------------- server side
class _Refused(Exception):
    """A fork-safety refusal inside the server, turned into a status message."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


def _refuse_accelerator(culprit: str, stage: str, contexts: list[str]) -> ForkSafetyError:
    err = ForkSafetyError(
        f"{culprit} created an accelerator context ({', '.join(contexts)}) in the warm-start "
        "fork server. A worker forked from it cannot use a context created before the fork, so "
        "the server refuses to serve. Defer device work to the entry (or to hook call time), "
        f"or use start_method='spawn'.",
        stage=stage,
    )
    err.culprit = culprit
    return err


class _ThreadOrigins:
    """Which step started each thread, so a thread left running can be blamed on its plugin."""

    def __init__(self) -> None:
        import weakref

        from spawnkit.bootstrap import guard

        self._guard = guard
        self.origins: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()
        self._original = threading.Thread.start

    def __enter__(self) -> _ThreadOrigins:
        origins, original, guard = self.origins, self._original, self._guard

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
            step = self.origins.get(thread, "")
            kind, name = _steps.split_step(step)
            if kind == _steps.PLUGIN:
                culprit = f"plugin {name!r}"
            elif kind == _steps.PRELOAD:
                culprit = f"preload module {name!r}"
            elif step:
                culprit = f"stage {step!r}"
            else:
                culprit = ""
            by = f", started by {culprit}," if culprit else " (its starter is unknown)"
            raise _Refused(
                {
                    "ok": False,
                    "kind": "safety",
                    "stage": _step_stage(step) if step else "preload",
                    "culprit": culprit,
                    "message": (
                        f"thread {thread.name!r}{by} is still running in the warm-start fork "
                        "server after its bootstrap. A forked worker gets no copy of it, and a "
                        "lock it holds stays locked in every worker, so the server refuses to "
                        "serve. Start the thread at hook call time or in the entry (plugin "
                        "callbacks run once per server), or use start_method='spawn'."
                    ),
                }
            )


def _arm_faulthandler(fd: int) -> None:
    import faulthandler

    with contextlib.suppress(OSError, ValueError, RuntimeError, AttributeError):
        faulthandler.enable(file=fd, all_threads=True)
        faulthandler.register(signal.SIGUSR1, file=fd, all_threads=True, chain=False)


def _disarm_faulthandler(fd: int) -> None:
    import faulthandler

    with contextlib.suppress(OSError, ValueError, RuntimeError, AttributeError):
        faulthandler.unregister(signal.SIGUSR1)
        faulthandler.disable()
    os.close(fd)


def _read_boot(fd: int) -> Any:
    chunks = []
    while data := os.read(fd, 65536):
        chunks.append(data)
    os.close(fd)
    raw = b"".join(chunks)
    return pickle.loads(raw) if raw else None


class _SafetyListener:
    """The server's stage listener: each stage goes to the launcher, then an accelerator check.

    A context created by a shared stage would be unusable in every forked
    worker, so the stage that created it is refused by name right after it.
    """

    def __init__(self, spec: Any, say: _StatusWriter) -> None:
        self.spec = spec
        self.say = say
        self.namespace: Any = None  # the bootstrapper's, once it exists

    def stage_started(self, stage: str) -> None:
        self.say({"step": str(getattr(stage, "value", stage))})

    def stage_finished(self, stage: str, seconds: float) -> None:
        from spawnkit.bootstrap.report import platform_info as _platform_info

        stage = str(getattr(stage, "value", stage))
        contexts = _accelerator_contexts()
        if not contexts:
            return
        if stage == Stage.PLATFORM.value:
            name = _platform_info(self.namespace, self.spec).get("name", "?")
            culprit = f"platform {name!r} (its init_backend)"
        else:
            culprit = f"importing hook target modules (stage {Stage.HOOKS.value!r})"
        raise _refuse_accelerator(culprit, stage, contexts)

    def ready(self, report: Any) -> None:
        return None


def _prebootstrap(spec: Any, say: _StatusWriter) -> dict[str, Any]:
    """Platform, plugins and hooks, once, with a fork-safety check after each step."""
    from spawnkit.bootstrap.process import Bootstrapper
    from spawnkit.hooks import plugins

    def after_plugin(name: str, dist: str) -> None:
        say({"step": _steps.plugin_step(name)})
        contexts = _accelerator_contexts()
        if contexts:
            raise _refuse_accelerator(f"plugin {name!r} from {dist}", Stage.PLUGINS.value, contexts)

    listener = _SafetyListener(spec, say)
    bootstrapper = Bootstrapper(spec, listener=listener)
    listener.namespace = bootstrapper.namespace
    plugins.after_each_plugin = after_plugin
    try:
        bootstrapper.prebootstrap()
    except ForkSafetyError as exc:
        # From a check after a stage, or (wrapped by the stage) after one plugin: the
        # check's own message says it all.
        own = exc.cause if isinstance(exc.cause, ForkSafetyError) else exc
        raise _Refused(
            {
                "ok": False,
                "kind": "safety",
                "stage": exc.stage,
                "culprit": own.culprit,
                "message": Exception.__str__(own),
            }
        ) from exc
    except Exception as exc:
        raise _Refused(_stage_status(exc, bootstrapper)) from exc
    finally:
        plugins.after_each_plugin = None
    return dict(bootstrapper.stage_seconds)


def _stage_status(exc: Exception, bootstrapper: Any) -> dict[str, Any]:
    """The status of a shared stage that raised: a worker's FAILED record, as a dict."""
    stage = str(getattr(exc, "stage", "") or bootstrapper.next_stage or "")
    failed = failure.record(stage, exc)
    return {
        "ok": False,
        "kind": "stage",
        "stage": stage,
        "exc_type": failed.exc_type,
        "message": Exception.__str__(exc),
        # A stage error's own text is the failing stage's traceback (its cause's, when wrapped).
        "traceback": getattr(exc, "traceback_text", "") or failed.traceback_text,
        "exc": failed.exc_bytes,
    }


class _StatusWriter:
    """Sends framed status messages to the launcher; remembers the step last announced."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.last_step = "startup"

    def __call__(self, msg: dict[str, Any]) -> None:
        self.last_step = msg.get("step", self.last_step)
        os.write(self.fd, _frame(msg))


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
    sys.path[:] = sys_path
    _arm_faulthandler(fault_fd)
    # First, while this process is small and has one thread: the guardian of every worker
    # it will fork (see _parent_death), so forked workers need not fork one each.
    from spawnkit.bootstrap._parent_death import start_server_guardian

    start_server_guardian()
    started = time.time()
    say = _StatusWriter(status_fd)
    spec = _read_boot(boot_fd)
    for module in _OWN_PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:  # an optional part missing: the worker imports what it needs
            continue
    _pkg(package, "popen_forkserver")
    status = _prepare(spec, preload, say, started)
    say(status)
    os.close(status_fd)
    if not status["ok"]:
        os._exit(1)
    _disarm_faulthandler(fault_fd)
    # Everything preloaded is immortal for the server's children: keep their collector from
    # walking (and so copy-on-write faulting) the preloaded heap, which can cost a forked
    # torch worker more than the fork itself.
    gc.collect()
    gc.freeze()
    forkserver = _pkg(package, "forkserver")
    forkserver._serve_one = _early_reporting(forkserver._serve_one, package)
    forkserver.main(listener_fd, alive_r, [], None, None)


def _early_reporting(serve_one: Any, package: str) -> Any:
    """The fork loop's per-worker function, sending a failure before ``child_main`` to the launcher.

    The forked worker re-imports ``__main__`` and unpickles its Process in
    ``serve_one``; an exception there used to reach the launcher as exit
    code 1 only.  Its early-error pipe is its first inherited descriptor
    (``fds[2]``, after the server's alive pipe and the resource tracker; see
    ``WarmPopen``), as a spawned worker's is on its command line.
    """
    from spawnkit.protocol import child

    def serve_one_reporting(child_r: int, fds: list[int], *rest: Any) -> Any:
        child.set_early_fd(fds[2] if len(fds) > 2 else None)
        try:
            return serve_one(child_r, fds, *rest)
        except Exception as exc:
            child.report_early(exc, package)
            raise

    return serve_one_reporting


def _prepare(spec: Any, preload: list[str], say: _StatusWriter, started: float) -> dict[str, Any]:
    """Bootstrap once (``spec`` None: not at all), preload, check threads: the final status."""
    status: dict[str, Any] = {"ok": True, "seconds": {}, "stages": {}, "started": started}
    try:
        with _ThreadOrigins() as threads:
            if spec is not None:
                status["stages"] = _prebootstrap(spec, say)
            for module in preload:
                status["seconds"][module] = _preload(module, say)
            threads.check()
    except _Refused as refused:
        return refused.status
    except SystemExit as exc:
        import traceback

        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return {
            "ok": False,
            "kind": "exited",
            "code": code,
            "step": say.last_step,
            "traceback": traceback.format_exc(),
        }
    return status


def _preload(module: str, say: _StatusWriter) -> float:
    """Import one preload module; refused if it fails or creates an accelerator context."""
    from spawnkit.bootstrap import guard

    say({"step": _steps.preload_step(module)})
    begun = time.perf_counter()
    try:
        with guard.step(_steps.preload_step(module)):
            importlib.import_module(module)
    except Exception:
        import traceback

        raise _Refused(
            {
                "ok": False,
                "kind": "import",
                "module": module,
                "traceback": traceback.format_exc(),
            }
        ) from None
    seconds = time.perf_counter() - begun
    contexts = _accelerator_contexts()
    if contexts:
        raise _Refused({"ok": False, "kind": "accelerator", "module": module, "detail": contexts})
    return seconds


# ------------------------------------------------------------------ registry
def server_key(
    package: str, preload: tuple[str, ...], namespace: Any, boot: Any = None
) -> tuple[Any, ...]:
    from spawnkit import _metadata

    identity = None
    if boot is not None:
        from spawnkit.bootstrap.process import _boot_identity

        identity = _boot_identity(boot)
    return (
        package,
        preload,
        namespace,
        identity,
        tuple(sys.path),
        # What is installed on sys.path: a pip install or uninstall changes a directory.
        _metadata.path_fingerprint(),
        os.getcwd(),
        tuple(sorted(os.environ.items())),
        # The interpreter the server is started with (``set_executable()`` changes it).
        os.fsdecode(_pkg(package, "spawn").get_executable()),
    )


def get_server(
    package: str,
    preload: tuple[str, ...],
    namespace: Any,
    boot: Any = None,
    timeout: float | None = None,
) -> WarmServer:
    """The running server for this key, started (bootstrapped, preloaded) on first use.

    ``boot`` is the spec every rank shares (None: workers bootstrap themselves);
    ``timeout`` bounds the start (the launch's ``ready_timeout``).
    """
    key = server_key(package, preload, namespace, boot)
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and server.alive():
            return server
        if server is not None:
            server.stop(0.5)  # it died: replace it
            del _servers[key]
        server = WarmServer(package, preload, boot)
        server.start(_START_TIMEOUT if timeout is None else timeout)
        _servers[key] = server
        return server


def shutdown_forkservers(timeout: float = _STOP_TIMEOUT) -> int:
    """Stop every warm-start server of this process; returns how many were running."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.stop(timeout)
    return len(servers)


@contextlib.contextmanager
def launching(server: WarmServer, timeout: float | None = None) -> Iterator[None]:
    """Name the server the next ``Process.start()`` on this thread forks from.

    ``timeout`` (the launch's ``ready_timeout``) bounds the wait for the fork.
    """
    previous = getattr(_tls, "server", None), getattr(_tls, "timeout", None)
    _tls.server, _tls.timeout = server, timeout
    try:
        yield
    finally:
        _tls.server, _tls.timeout = previous


def current_server() -> WarmServer:
    server: WarmServer | None = getattr(_tls, "server", None)
    if server is None:
        raise RuntimeError("a spawnkit warm-start process was started outside spawn_with_plugins()")
    return server


def _forget_after_fork() -> None:
    # A forked copy of the launcher does not own these servers; never stop them from there.
    _servers.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(shutdown_forkservers)


def _bind(listener: socket.socket, address: str) -> None:
    """Bind the server's socket; a temp dir too deep for a socket path is named, with the fix."""
    try:
        listener.bind(address)
    except OSError as exc:
        if "too long" not in str(exc):
            raise
        raise ConfigError(
            f"the warm-start server's socket path {address!r} ({len(address)} bytes) is longer "
            "than the OS allows for a Unix socket (about 107 bytes), because the temporary "
            f"directory is deep (TMPDIR={os.environ.get('TMPDIR', '')!r}). Set TMPDIR to a "
            "short path (for example /tmp) for the launching process, or use "
            "start_method='spawn'.",
            setting="TMPDIR",
        ) from exc
