"""Warm start: a fork server per configuration that has imported heavy modules once.

The standard library keeps one forkserver per process, configured by a global
preload list that silently skips modules failing to import.  spawnkit keeps
one server per *key* (package, preload list, namespace, ``sys.path``, working
directory, environment and interpreter), because a worker forked from a server
inherits all of those from the moment the server started: a later group whose
key differs must not be served by a stale one.

Server start is checked, not assumed: the server arms the import guard before
importing anything (so a preloaded hook target is later reported with the
preload as its import site), imports each preload module, refuses to serve if
a preload created an accelerator context (a forked child cannot use it), and
reports the outcome over a status pipe that the launcher reads with a timeout.
Only then does it enter the standard library's fork loop.  Servers stop when
the launcher exits (``atexit``) or on :func:`shutdown_forkservers`.
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
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import wait as _mp_wait
from typing import Any

from spawnkit.errors import PreloadError

__all__ = [
    "WarmServer",
    "current_server",
    "get_server",
    "launching",
    "serve",
    "shutdown_forkservers",
]

_START_TIMEOUT = 120.0
_OWN_PRELOAD = (
    # spawnkit's own worker-side modules: hook-neutral by construction (no engine code, no
    # plugin), and importing them is most of what a forked worker would otherwise repeat.
    "spawnkit.bootstrap._child",
    "spawnkit.bootstrap._contexts",
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


class WarmServer:
    """One running fork server: its address, its "alive" pipe, and its pid."""

    def __init__(self, package: str, preload: tuple[str, ...]) -> None:
        self.package = package
        self.preload = preload
        self.pid: int | None = None
        self.address: Any = None
        self._alive_w: int | None = None
        self._lock = threading.Lock()
        self.preload_seconds: dict[str, float] = {}

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = _START_TIMEOUT) -> None:
        util = _pkg(self.package, "util")
        spawn = _pkg(self.package, "spawn")
        connection = _pkg(self.package, "connection")
        _pkg(self.package, "resource_tracker").ensure_running()
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            status_r, status_w = os.pipe()
            try:
                cmd = (
                    "from spawnkit.bootstrap._forkserver import serve; "
                    f"serve({listener.fileno()}, {alive_r}, {status_w}, {self.package!r}, "
                    f"{list(self.preload)!r}, {list(sys.path)!r})"
                )
                exe = spawn.get_executable()
                args = [exe, *util._args_from_interpreter_flags(), "-c", cmd]
                pid = util.spawnv_passfds(exe, args, [listener.fileno(), alive_r, status_w])
            except BaseException:
                os.close(alive_w)
                os.close(status_r)
                raise
            finally:
                os.close(alive_r)
                os.close(status_w)
        self.pid, self.address, self._alive_w = pid, address, alive_w
        try:
            status = self._read_status(status_r, timeout)
        finally:
            os.close(status_r)
        if not status.get("ok"):
            self.stop()
            raise _preload_error(status, self.preload)
        self.preload_seconds = dict(status.get("seconds", {}))

    def _read_status(self, fd: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise PreloadError(
                    f"the warm-start fork server (pid {self.pid}) did not finish importing its "
                    f"preload modules {list(self.preload)} within {timeout:.0f} s. A preloaded "
                    "module hangs at import time; remove it from preload=.",
                    stage="preload",
                )
            # poll-based: select() refuses descriptors above 1024, which a serving
            # process with many sockets open hands out.
            if not _mp_wait([fd], left):
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append(data)
        raw = b"".join(chunks)
        if not raw:
            return {"ok": False, "kind": "died", "module": "", "detail": self._exit_text()}
        try:
            status: dict[str, Any] = pickle.loads(raw)
        except Exception:
            return {"ok": False, "kind": "died", "module": "", "detail": self._exit_text()}
        return status

    def _exit_text(self) -> str:
        code = self._reap(2.0)
        if code is None:
            return "it stopped reporting without exiting"
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
            raise PreloadError("the warm-start fork server was shut down", stage="preload")
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(self.address)
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            allfds = [child_r, child_w, self._alive_w, resource_tracker.getfd(), *fds]
            try:
                reduction.sendfds(client, allfds)
                return parent_r, parent_w
            except BaseException:
                os.close(parent_r)
                os.close(parent_w)
                raise
            finally:
                os.close(child_r)
                os.close(child_w)


def _preload_error(status: dict[str, Any], preload: tuple[str, ...]) -> PreloadError:
    module = status.get("module", "")
    kind = status.get("kind")
    if kind == "accelerator":
        msg = (
            f"preload module {module!r} initialized an accelerator context "
            f"({', '.join(status.get('detail', []))}) in the warm-start fork server. Forked "
            "workers cannot use a context created before the fork, so this preload is "
            f"refused. Preload only modules that import without touching the device, "
            f"or use start_method='spawn'."
        )
    elif kind == "import":
        msg = (
            f"preload module {module!r} failed to import in the warm-start fork server, so no "
            f"worker could be started from it.\n{status.get('traceback', '')}"
            "Fix the import or remove it from preload=."
        )
    else:
        msg = (
            f"the warm-start fork server for preload={list(preload)} died while starting: "
            f"{status.get('detail', 'no status was reported')}"
        )
    return PreloadError(msg, stage="preload")


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


def serve(
    listener_fd: int,
    alive_r: int,
    status_fd: int,
    package: str,
    preload: list[str],
    sys_path: list[str],
) -> None:
    """The server's main: arm the guard, preload, report, then run the fork loop."""
    from spawnkit.bootstrap._child import arm_guard

    arm_guard()
    sys.path[:] = sys_path
    status: dict[str, Any] = {"ok": True, "seconds": {}}
    for module in _OWN_PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:  # an optional part missing: the worker imports what it needs
            continue
    _pkg(package, "popen_forkserver")
    for module in preload:
        started = time.perf_counter()
        try:
            importlib.import_module(module)
        except BaseException:
            status = {
                "ok": False,
                "kind": "import",
                "module": module,
                "traceback": traceback.format_exc(),
            }
            break
        status["seconds"][module] = time.perf_counter() - started
        contexts = _accelerator_contexts()
        if contexts:
            status = {"ok": False, "kind": "accelerator", "module": module, "detail": contexts}
            break
    os.write(status_fd, pickle.dumps(status))
    os.close(status_fd)
    if not status["ok"]:
        os._exit(1)
    # Everything preloaded is immortal for the server's children: keep their collector from
    # walking (and so copy-on-write faulting) the preloaded heap, which can cost a forked
    # torch worker more than the fork itself.
    gc.collect()
    gc.freeze()
    _pkg(package, "forkserver").main(listener_fd, alive_r, [], None, None)


# ------------------------------------------------------------------ registry
def server_key(package: str, preload: tuple[str, ...], namespace: Any) -> tuple[Any, ...]:
    return (
        package,
        preload,
        namespace,
        tuple(sys.path),
        os.getcwd(),
        tuple(sorted(os.environ.items())),
        # The interpreter the server is started with (``set_executable()`` changes it).
        os.fsdecode(_pkg(package, "spawn").get_executable()),
    )


def get_server(package: str, preload: tuple[str, ...], namespace: Any) -> WarmServer:
    """The running server for this key, started (and preloaded) on first use."""
    key = server_key(package, preload, namespace)
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and server.alive():
            return server
        if server is not None:
            server.stop(0.5)
        server = WarmServer(package, preload)
        server.start()
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
def launching(server: WarmServer) -> Iterator[None]:
    """Name the server the next ``Process.start()`` on this thread forks from."""
    previous = getattr(_tls, "server", None)
    _tls.server = server
    try:
        yield
    finally:
        _tls.server = previous


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
