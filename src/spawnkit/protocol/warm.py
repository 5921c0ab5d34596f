"""Warm start: a fork server per configuration, bootstrapped once, that forks ready workers.

The standard library keeps one forkserver per process, configured by a global
preload list that silently skips modules failing to import.  spawnkit keeps
one server per *key* (everything that decides a bootstrap's outcome: package,
preload list, namespace, platform, plugins, entry-point rows, environment,
guard policy, ``sys.path`` and what is installed on it, working directory and
interpreter), because a worker forked from a server inherits all of those
from the moment the server started: a later group whose key differs must not
be served by a stale one.

This module is the launcher's handle on a server: its start (a ``-c``
statement running :func:`spawnkit.protocol.warm_main.serve`, which bootstraps
once, preloads and checks fork safety), the worker-protocol messages it reads
back within the launch's ``ready_timeout``, the error each failure becomes,
and the per-key registry.  With ``SPAWNKIT_WARM_BOOTSTRAP=worker`` the server
only preloads and each worker runs every stage itself.  Servers stop when the launcher exits
(``atexit``) or on :func:`shutdown_forkservers`; one that died is replaced on
the next launch, and a launch that races its death fails with
``ForkServerError`` instead of waiting.  One that a new server replaced because the environment
changed (the launcher's, or the launch's ``env=``) is let go once no launch or context holds a
:class:`Lease` on it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import signal
import socket
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection
from typing import Any

from spawnkit import _steps, _waits
from spawnkit._log import LazyLogger
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import ConfigError, ForkServerError
from spawnkit.platforms.discovery import env_applied
from spawnkit.protocol import _fork_loop, _main_code, _shadows, _sources, failure
from spawnkit.protocol import messages as proto
from spawnkit.protocol.child import send_start_data
from spawnkit.protocol.failure import Exited, Failed

__all__ = [
    "MODE_VAR",
    "PROCESS_ENV",
    "SPARES_VAR",
    "Lease",
    "WarmServer",
    "bootstrap_mode",
    "current_server",
    "for_context",
    "get_server",
    "launcher_modules",
    "launching",
    "server_key",
    "shutdown_forkservers",
]

MODE_VAR = "SPAWNKIT_WARM_BOOTSTRAP"
"""``server`` (default): bootstrap once in the server; ``worker``: every worker bootstraps."""

SPARES_VAR = _fork_loop.SPARES_VAR
"""How many workers a server forks ahead of requests: read by the server itself, as it starts."""

PROCESS_ENV = (MODE_VAR, SPARES_VAR)
"""This module's process-wide variables, for the launcher's environment check."""

_START_TIMEOUT = 120.0
_FORK_TIMEOUT = 30.0
_DUMP_WAIT = 0.5
_STOP_TIMEOUT = 5.0
_LET_GO_WAIT = 1.0  # for a superseded idle server to exit once let go (never killed)
#: For a server seen ending (a pipe or socket of its closed) to become reapable: SIGKILL is
#: asynchronous, its descriptors close a moment before waitpid sees it exit (microseconds, a
#: few milliseconds on a loaded machine); past this it is said to be still running.
_ENDING_WAIT = 2.0

_servers: dict[tuple[Any, ...], WarmServer] = {}
_servers_lock = threading.Lock()
#: servers let go while workers of theirs may still run (their code changed): reaped later
_retired: list[WarmServer] = []
_log = LazyLogger("spawnkit.warm")  # logging is imported only if a record is emitted
_tls = threading.local()
_TIMED_OUT = object()  # the last "message" of a server that did not finish starting in time


def _pkg(name: str, sub: str) -> Any:
    return importlib.import_module(f"{name}.{sub}")


def bootstrap_mode(env: Mapping[str, str] | None = None) -> str:
    """``server`` or ``worker``, as the launch's workers see :data:`MODE_VAR`: ``env=`` wins
    over the launcher's own, as for a namespace's variables.  Read from ``os.environ`` alone,
    ``env={MODE_VAR: "worker"}`` left every worker forked from a server that had run the
    plugins once, for no rank, while each worker's environment said ``worker``."""
    given = env is not None and MODE_VAR in env
    raw = env[MODE_VAR] if env is not None and given else os.environ.get(MODE_VAR, "")
    mode = raw.strip().lower() or "server"
    if mode not in ("server", "worker"):
        raise ConfigError(
            f"{MODE_VAR}={raw!r}{' (in env=)' if given else ''}: use 'server' (bootstrap once "
            "in the warm-start server, the default) or 'worker' (every worker runs its own "
            "bootstrap)",
            setting=MODE_VAR,
        )
    return mode


def server_reads(env: Mapping[str, str]) -> dict[str, str]:
    """The launch's ``env=`` entries the server itself reads as it starts (``SPARES_VAR``)
    that this process's environment lacks or has otherwise: the server is started with them,
    so they are part of its key.  Applied only in its workers, ``env={SPARES_VAR: "0"}`` never
    reached the server, which kept forking spares while the workers' environment said 0."""
    environ = os.environ
    return {k: env[k] for k in (SPARES_VAR,) if k in env and environ.get(k) != env[k]}


class Lease:
    """One launch's or context's use of a server, held for as long as it may start workers
    from it: a server with a lease is never let go for a changed environment (a group still
    starting or running its ranks, a ``get_context("forkserver")`` context asking for more).
    Dropping the last reference ends it (the server holds leases weakly)."""

    __slots__ = ("__weakref__",)


class WarmServer:
    """One running fork server: its address, its "alive" pipe, its pid and what it did at start."""

    def __init__(
        self,
        package: str,
        preload: tuple[str, ...],
        boot: Any = None,
        exec_env: dict[str, str] | None = None,
    ) -> None:
        self.package = package
        self.preload = preload
        self.boot = boot
        #: env= entries read only as a process starts, or by the server: it is exec'd with them
        self.exec_env = exec_env or {}
        self.let_go_why = ""  # why a later launch left it for a new server (let_go)
        self.edited = False  # let go because a file its workers run changed (_as_found)
        #: the leases of those that may still start workers from it (see Lease)
        self.holders: weakref.WeakSet[Lease] = weakref.WeakSet()
        self.pid: int | None = None
        self.last_pid: int | None = None  # kept once stop() cleared pid: its errors name it
        self.ended_code: int | None = None  # its exit, where it ended before stop() asked
        self.address: Any = None
        self.fork_timeout = _FORK_TIMEOUT
        self._alive_w: int | None = None
        self._fault_r: int | None = None
        self._lock = threading.Lock()
        self.started_at = 0.0
        self.start_timeout = _START_TIMEOUT
        #: (step, plugin) of each current_spec() call its bootstrap answered with None
        self.rankless: list[tuple[str, str]] = []
        #: the files its workers run the code of, as it found them when ready (_sources)
        self.sources: list[_sources.Source] = []
        #: the sys.path directories where a new module would shadow one it imported (_shadows)
        self.shadows: list[_shadows.Shadow] = []
        #: (step, CLOCK_MONOTONIC its STARTED was read, seconds it took): a start-up trace's
        self.steps: list[tuple[str, float, float]] = []
        self.start_window = (0.0, 0.0)  # CLOCK_MONOTONIC around start()

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = _START_TIMEOUT) -> None:
        util = _pkg(self.package, "util")
        spawn = _pkg(self.package, "spawn")
        connection = _pkg(self.package, "connection")
        _pkg(self.package, "resource_tracker").ensure_running()
        modules = launcher_modules() if self.boot is not None else []
        boot = pickle.dumps((self.boot, modules, _main_code.describe(self.package), sys.argv))
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
                    # A server that cannot import spawnkit (another PYTHONPATH, a broken
                    # install) has no status pipe yet: its traceback goes to the fault pipe,
                    # which the error below quotes, instead of only to a stderr nobody reads.
                    "try:\n"
                    "    from spawnkit.protocol.warm_main import serve\n"
                    "except BaseException:\n"
                    "    import os, traceback\n"
                    f"    os.write({fault_w}, traceback.format_exc().encode('utf-8', 'replace'))\n"
                    "    raise\n"
                    f"serve({listener.fileno()}, {alive_r}, {status_w}, {fault_w}, {boot_r}, "
                    f"{self.package!r}, {list(self.preload)!r}, {list(sys.path)!r})"
                )
                exe = spawn.get_executable()
                args = [exe, *util._args_from_interpreter_flags(), "-c", cmd]
                with env_applied(self.exec_env):  # its workers are its forks: set at its start
                    pid = util.spawnv_passfds(exe, args, child_fds)
            except BaseException:
                for fd in (alive_w, status_r, fault_r, boot_w):
                    os.close(fd)
                raise
            finally:
                for fd in child_fds[1:]:
                    os.close(fd)
        self.pid, self.address, self._alive_w, self._fault_r = pid, address, alive_w, fault_r
        os.set_blocking(fault_r, False)
        # Never blocking: the server reads the spec first thing, but one that died before
        # reading must not block this launch (its death is reported below).
        try:
            send_start_data(boot_w, boot)
        finally:
            os.close(boot_w)
        self.start_timeout = timeout
        with Connection(status_r, writable=False) as conn:
            final, step = self._read_status(conn, timeout)
        if not isinstance(final, proto.Ready):
            err = _start_error(final, step, self, self._read_fault())
            self.stop(0.5)
            raise err
        self.fork_timeout = max(timeout, 1.0)
        _took(self, final.report)

    def _read_status(self, conn: Any, timeout: float) -> tuple[Any, str]:
        """The server's last message (``Ready``, ``Failed``, ``Exited``; None: it died or hung)
        and the step it announced last; stage and preload times are kept on the way."""
        deadline = time.monotonic() + timeout
        step = "startup"
        seen: dict[str, float] = {}
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if self.pid is not None:  # faulthandler: the stuck server's stack
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGUSR1)
                    time.sleep(_DUMP_WAIT)
                return _TIMED_OUT, step
            # poll-based: select() refuses descriptors above 1024, which a serving
            # process with many sockets open hands out.
            if not _waits.wait([conn], left):
                continue
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return None, step
            if isinstance(msg, proto.StageStarted):
                step, seen[msg.stage] = msg.stage, time.monotonic()
            elif isinstance(msg, proto.StageFinished):
                began = seen.get(msg.stage, time.monotonic() - msg.seconds)
                self.steps.append((msg.stage, began, msg.seconds))
            else:
                return msg, step

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
        return self._code_text(code)

    @staticmethod
    def _code_text(code: int) -> str:
        if code < 0:
            try:
                return f"it was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"it was killed by signal {-code}"
        return f"it exited with code {code}"

    def _reap(self, timeout: float) -> int | None:
        if self.pid is None or self.ended_code is not None:  # reaped: a new waitpid says 0
            return None if self.pid is None else self.ended_code
        return _fork_loop.reap_within(self.pid, timeout)

    def alive(self) -> bool:
        """Reaps one that ended, keeping how (its workers were told "exited with code 0")."""
        if self.pid is None or self.ended_code is not None:
            return False
        self.ended_code = _fork_loop.reap_within(self.pid, 0.0)
        return self.ended_code is None

    def let_go(self, why: str = "") -> None:
        """Serve no new launch: close the alive pipe, and the server exits once the workers
        it forked are gone (a group still running keeps its exit statuses); reaped later.
        ``why`` is said to whoever still holds it (a context's pool asking for a worker)."""
        self.let_go_why = why
        with self._lock:
            for fd in (self._alive_w, self._fault_r):
                if fd is not None:
                    os.close(fd)
            self._alive_w = self._fault_r = None

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Close the alive pipe (the server exits once its workers are gone); bounded, then kill."""
        with self._lock:
            if self.pid is not None and self.ended_code is None:
                # died on its own (killed): its workers' deaths are told as its (gone_error)
                self.ended_code = self._reap(0.0)
            if self._alive_w is not None:
                os.close(self._alive_w)
                self._alive_w = None
            if self._fault_r is not None:
                os.close(self._fault_r)
                self._fault_r = None
            if self.pid is not None:
                # The server also exits when its last worker closes its copy of the alive
                # pipe; a worker still running would keep it waiting, so bound the wait.
                code = self._reap(timeout)
                if code is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGKILL)
                    self._reap(timeout)
                elif self.ended_code is None and code != 0:  # let go, it exits 0: a SIGKILL
                    self.ended_code = code  # on its way as stop() began (see gone_error)
                self.last_pid, self.pid = self.pid, None
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
            why = self.let_go_why
            raise ForkServerError(
                "the warm-start fork server was shut down"
                + (
                    f" ({why}, so a later launch left it for a new one): a context made "
                    "before that keeps it; make a new one with spawnkit.get_context(...)"
                    if why
                    else ""
                ),
                stage="preload",
            )
        client = socket.socket(socket.AF_UNIX)
        try:
            client.connect(self.address)
        except OSError as exc:
            client.close()
            raise self._gone(f"connecting to it failed ({exc})", ending=True) from exc
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
                    raise self._gone(f"sending it the request failed ({exc})", ending=True) from exc
                raise
            finally:
                os.close(child_r)
                os.close(child_w)

    def read_child_pid(self, sentinel: int) -> int:
        """The forked worker's pid, which the server writes first; bounded (see ``launching``)."""
        timeout = getattr(_tls, "timeout", None) or self.fork_timeout
        if not _waits.wait([sentinel], timeout):
            raise self._gone(
                f"it did not fork a worker within {timeout:.0f} s (stopped or stuck), so the "
                "launcher killed it",
                kill=True,
            )
        try:
            pid: int = _pkg(self.package, "forkserver").read_signed(sentinel)
        except (EOFError, OSError) as exc:
            raise self._gone(
                "it closed the connection before telling the launcher the pid of the worker it "
                "was starting (a worker it forked or handed the request exits without running "
                "its target)",
                ending=True,
            ) from exc
        return pid

    def gone_error(self, what: str, *, ending: bool = False) -> ForkServerError | None:
        """``_gone``'s error if this server has exited by now (a worker of it that died with no
        word died of that: the server's death is the cause to name), else None.  ``ending``:
        the caller saw it end (it closed a worker's status pipe unwritten), so it is waited
        for, bounded (``_ENDING_WAIT``): checked at once, a killed server was found running."""
        # replaced since (get_server stops a dead one): what it had ended with
        wait = _ENDING_WAIT if ending else 0.0
        code = self._reap(wait) if self.pid is not None else self.ended_code
        if code is None:
            return None
        return self._gone(what, state=self._code_text(code))

    def _gone(
        self, what: str, *, kill: bool = False, state: str = "", ending: bool = False
    ) -> ForkServerError:
        """The typed error of a launch that raced the server's death (or found it stuck);
        ``ending``: what it did (a closed socket or pipe) says it is ending (``gone_error``)."""
        pid = self.pid if self.pid is not None else self.last_pid  # stopped since: named still
        if kill and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        wait = 1.0 if kill else _ENDING_WAIT if ending else 0.0
        state = state or self._exit_text(wait, running="it is still running")
        err = ForkServerError(
            f"the warm-start fork server (pid {pid}) could not start a worker: {what}; {state}. "
            "Effect: this launch started no further worker and is being torn down. The next "
            "launch starts a new server; retry it.",
            stage=Stage.ARM_PARENT_DEATH.value,
        )
        err.server_pid = pid
        return err


def launcher_modules() -> list[str]:
    """The standard library's and spawnkit's modules this launcher has imported.

    Never one that would bring a third-party package into the server: a spawnkit module that
    holds one (``platforms.custom_op`` holds torch; ``testing.plugin``, pytest), or that holds
    such a spawnkit module, is left to the worker.  Only ``preload=`` puts a third-party package
    in a server: importing torch there unasked cost seconds of every server start (more than a
    4 s ready_timeout on a GPU machine whose torch compiles its bytecode at import).
    """
    stdlib = sys.stdlib_module_names - _NOT_PRELOADED
    own = {"spawnkit", "builtins", "__main__", "__mp_main__"}
    names = [
        name
        for name in list(sys.modules)
        if name.partition(".")[0] in stdlib or name.startswith("spawnkit.")
    ]
    ours = {name: sys.modules.get(name) for name in names if name.startswith("spawnkit.")}
    allowed = stdlib | own
    heavy: set[str] = set()
    while True:  # to a fixed point: a module holding a heavy spawnkit module is heavy too
        grown = {
            name
            for name, module in ours.items()
            if name not in heavy and _holds_foreign(module, allowed, heavy)
        }
        if not grown:
            break
        heavy |= grown
    return [name for name in names if name not in heavy]


def _holds_foreign(module: Any, allowed: frozenset[str] | set[str], heavy: set[str]) -> bool:
    """Whether a module's globals hold a module, class or function of a third-party package
    (its top-level name not in ``allowed``) or of one of the ``heavy`` modules."""
    try:
        values = list(vars(module).values())
        inside = module.__name__ + "."
    except Exception:  # a lazy or broken module: not worth the server's time
        return True
    for value in values:
        where = value.__name__ if isinstance(value, types.ModuleType) else None
        if where is not None and where.startswith(inside):
            continue  # a package's own submodule: judged by itself, imported after it anyway
        if where is None:
            where = getattr(value, "__module__", None) if callable(value) else None
        if isinstance(where, str) and (where.partition(".")[0] not in allowed or where in heavy):
            return True
    return False


#: Standard modules whose import acts (prints, opens a window or a browser, takes the terminal).
_NOT_PRELOADED = frozenset({"this", "antigravity", "idlelib", "tkinter", "turtle", "readline"})


def _step_text(step: str) -> str:
    kind, name = _steps.split_step(step)
    if step == _steps.LAUNCHER_MODULES:
        return (
            "importing the launcher's own modules (the standard-library and spawnkit modules "
            "it had imported, which the server imports once so that no worker re-imports them)"
        )
    if kind == _steps.PRELOAD:
        return f"importing preload module {name!r}"
    if kind == _steps.PLUGIN:
        return f"loading plugin {name!r} (stage 'load_plugins')"
    return f"running stage {step!r}" if step != "startup" else "starting up"


def _warn_rankless(reads: list[tuple[str, str]], server: WarmServer) -> None:
    """One warning per place a new server's code asked ``current_spec()`` for a rank it lacks.

    In a worker that bootstraps itself the same call returns that worker's spec: a plugin that
    registers hooks for rank 0 only gets them there, and from this server on no rank (None),
    or every rank, without a word.  Said once, when the server starts, at the launch line.
    """
    from spawnkit._warnopts import user_stacklevel
    from spawnkit.errors import WarmServerWarning

    for step, source in reads:
        plugin = source and _steps.split_step(step)[0] == _steps.PLUGIN  # the step names it
        where = "" if plugin else f" while {_step_text(step)}"
        instead = (
            f"set {MODE_VAR}=worker (exported, or in env=) so that each worker runs it itself"
            if _bootstraps(step)
            else "import it in the entry instead of preload= (a preload is imported in the "
            f"server whatever {MODE_VAR} says)"
        )
        warnings.warn(
            f"{source or 'code'} called spawnkit.bootstrap.current_spec(){where} in the "
            f"warm-start server (pid {server.pid}) and got None: the server bootstraps once for "
            "every rank, so it has none, and whatever the code decided from that (hooks it "
            "registered or skipped) holds for every worker forked from it, where a worker "
            f"that bootstraps itself gets its own spec. Read the rank at hook call time, or "
            f"{instead}.",
            WarmServerWarning,
            stacklevel=user_stacklevel(),
        )


def _bootstraps(step: str) -> bool:
    """Whether ``step`` is one a worker runs itself under ``MODE_VAR=worker``: a stage or a
    plugin; a preload (the launcher's modules too) is imported in the server either way, so
    advising the mode there sent the user to a setting that changes nothing for it."""
    return step != _steps.STARTUP and _steps.split_step(step)[0] != _steps.PRELOAD


def _start_error(final: Any, step: str, server: WarmServer, fault: str) -> ForkServerError:
    """The parent's typed error for a server that refused to serve or could not start."""
    pid = server.pid
    if isinstance(final, Failed):
        cause = failure.load_exception(final.exc_bytes)
        if isinstance(cause, ForkServerError):  # a refusal: the server's own typed error
            cause.traceback_text = cause.traceback_text or final.traceback_text
            cause.server_pid = pid
            return cause
        err = ForkServerError(
            f"the warm-start fork server (pid {pid}) failed in stage {final.stage!r}, which it "
            f"runs once for every worker it will fork: {final.message}\n"
            f"Effect: no worker was started. Fix the cause; set {MODE_VAR}=worker to run this "
            "stage in each worker instead, or use start_method='spawn'.\n"
            f"Server traceback (pid {pid}):\n{final.traceback_text.rstrip()}",
            stage=final.stage,
            traceback_text=final.traceback_text,
        )
        err.cause = cause
    else:
        err = ForkServerError(
            _start_failure_text(final, step, server, fault),
            stage=_steps.stage_of(step),
            traceback_text=fault if fault.startswith("Traceback") else "",
        )
    err.server_pid = pid
    return err


def _start_failure_text(final: Any, step: str, server: WarmServer, fault: str) -> str:
    """Why a server that raised nothing could not start: it exited, hung or died."""
    pid = server.pid
    what = "traceback" if fault.startswith("Traceback") else "fault dump"  # see start()'s -c
    dump = f"\nServer {what} (pid {pid}):\n{fault.rstrip()}" if fault.strip() else ""
    if isinstance(final, Exited):
        return (
            f"the warm-start fork server (pid {pid}) called sys.exit({final.said or final.code}) "
            "while "
            f"{_step_text(step)}, so it cannot serve workers. Effect: no worker was started. "
            "Remove the exit from that code (a plugin or module must not end the process)"
            + (f", or set {MODE_VAR}=worker" if _bootstraps(step) else "")
            + f".\n{final.traceback_text}".rstrip()
        )
    if final is _TIMED_OUT:
        return (
            f"the warm-start fork server (pid {pid}) did not finish starting within "
            f"{server.start_timeout:.0f} s: it is stuck {_step_text(step)} (stack below). "
            "Effect: no worker was started; the server was killed. Fix the hang, or raise "
            f"ready_timeout if that step is just slow.{dump}"
        )
    return (
        f"the warm-start fork server (pid {pid}) for preload={list(server.preload)} died while "
        f"{_step_text(step)}: {server._exit_text()}. Effect: no worker was started.{dump}"
    )


# ------------------------------------------------------------------ registry
def server_key(
    package: str,
    preload: tuple[str, ...],
    namespace: Any,
    boot: Any = None,
    exec_env: dict[str, str] | None = None,
) -> tuple[Any, ...]:
    from spawnkit import _metadata

    identity: tuple[Any, ...] | None = None
    boot_env: tuple[Any, ...] = ()
    if boot is not None:
        from spawnkit.bootstrap.process import boot_identity

        *fixed, boot_env = boot_identity(boot)
        identity = tuple(fixed)
    return (
        package,
        preload,
        namespace,
        identity,
        tuple(sys.path),
        # What is installed on sys.path: a pip install or uninstall changes a directory.
        _metadata.path_fingerprint(),
        os.getcwd(),
        tuple(sys.argv),  # what the server's plugins and preloads see as the command line
        # The interpreter the server is started with (``set_executable()`` changes it).
        os.fsdecode(_pkg(package, "spawn").get_executable()),
        _inherited(),
        # Last, the environment (_ENV_FIELDS): a server that differs only there is let go
        # by the one that replaces it (_supersede).
        tuple(sorted((exec_env or {}).items())),  # env= it starts with (bootstrap in workers too)
        boot_env,  # env= its bootstrap ran with (a pre-bootstrapped server's)
        # The bytes view where there is one: the same variables, without decoding each.
        tuple(sorted((os.environb if os.supports_bytes_environ else os.environ).items())),
    )


#: Limits a worker inherits from the process that started it, read by the engines that set
#: them in the launcher (SGLang's ``set_ulimit()`` raises NOFILE; RDMA needs MEMLOCK)
_LIMITS = ("RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_NPROC")


def _inherited() -> tuple[Any, ...]:
    """What a process inherits besides its environment: resource limits, CPU affinity, the
    umask.  A warm worker is a fork of its server, which inherited them when it started: a
    launcher that set them later (``setrlimit``, ``sched_setaffinity``, ``umask``) got a
    server from before, and workers with the old values, where a spawned one had the new."""
    import resource

    limits = tuple(
        resource.getrlimit(getattr(resource, name)) for name in _LIMITS if hasattr(resource, name)
    )
    affinity = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    umask = ""
    try:  # read, not set and put back: another thread creating a file meanwhile got umask 0
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            umask = next((line for line in status if line.startswith("Umask:")), "")
    except OSError:
        pass
    return limits, affinity, umask


def get_server(
    package: str,
    preload: tuple[str, ...],
    namespace: Any,
    boot: Any = None,
    timeout: float | None = None,
    exec_env: dict[str, str] | None = None,
    holder: Lease | None = None,
) -> WarmServer:
    """The running server for this key, started (bootstrapped, preloaded) on first use;
    ``exec_env``: the launch's ``env=`` entries read only at start (``spawnkit._environ``)
    and those the server reads itself (:func:`server_reads`); ``holder``: the caller's lease,
    taken under the registry's lock so that no other launch lets the server go meanwhile."""
    key = server_key(package, preload, namespace, boot, exec_env)
    with _servers_lock:
        for old in [s for s in _retired if not s.alive()]:  # its workers ended: reaped
            _retired.remove(old)
            old.stop(0)  # its socket's file, where it has one
        server = _servers.get(key)
        if server is not None and server.alive():
            if _as_found(server):
                if holder is not None:
                    server.holders.add(holder)
                return server
            del _servers[key]
        elif server is not None:
            server.stop(0.5)  # it died: replace it
            del _servers[key]
        # a bad SPAWNKIT_WARM_SPARES is refused before a server starts, the value it will read
        started_with = exec_env or {}
        given = " (in env=)" if SPARES_VAR in started_with else ""
        _fork_loop.most_spares({**os.environ, **started_with}, given)
        server = WarmServer(package, preload, boot, exec_env)
        began = time.monotonic()
        server.start(_START_TIMEOUT if timeout is None else timeout)
        server.start_window = (began, time.monotonic())
        try:
            _warn_rankless(server.rankless, server)
        except BaseException:  # -W error::spawnkit.WarmServerWarning: no server left behind
            server.stop(0.5)
            raise
        if holder is not None:
            server.holders.add(holder)
        _servers[key] = server
        _warn_cold(_supersede(key, server))  # escalated: the launch raises, the server kept
        return server


#: How many fields at the end of a server's key are its environment (server_key): the
#: launch's ``env=`` (read at start; the bootstrap's) and the launcher's own.
_ENV_FIELDS = 3

#: Servers let go because a later launch's environment differed, and whether this launcher
#: was told that its warm starts are cold (_warn_cold): once, at the second.
_let_go_for_env = 0
_cold_told = False


def _supersede(key: tuple[Any, ...], new: WarmServer) -> list[str]:
    """Let go the idle servers that ``new`` (just started for ``key``) replaces: those whose
    key differs only in the environment, the launcher's or the launch's ``env=``.  A launcher
    that changes ``os.environ`` between launches (a request id, a port) or passes a changing
    ``env=`` (``{"STEP": str(i)}``) got a new server each time, cold, and kept every earlier
    one (a whole torch process each, with ``preload=("torch",)``) until it exited, unsaid.
    One still held (a running group, a context) is kept and said so.  Returns why each one
    let go was (for :func:`_warn_cold`)."""
    rest = key[:-_ENV_FIELDS]
    advice = (
        "a server's environment (the launcher's and the launch's env=) is part of its key, "
        "so this launch started a new one, cold, as every launch that changes them will; to "
        "keep warm starts warm, set such variables once before the first launch (the same "
        "env= every launch) and pass per-launch values in the payload or rank_extra"
    )
    let_go = []
    for old_key, old in list(_servers.items()):
        if old is new or old_key[:-_ENV_FIELDS] != rest:
            continue
        why = _env_change(old_key, key)
        if old.holders:
            _log.info(
                "warm-start server pid %s kept while a group or context still uses it: %s; %s",
                old.pid, why, advice,
            )  # fmt: skip
            continue
        del _servers[old_key]
        old.let_go(why)
        let_go.append(why)
        _log.info("warm-start server pid %s let go: %s; %s", old.pid, why, advice)
        if old._reap(_LET_GO_WAIT) is None:  # workers of its own still ending: reaped later
            _retired.append(old)
        else:
            old.stop(0)  # its socket's file, where it has one
    return let_go


def _env_change(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    """How two keys that differ only in their environment differ: the names, never values."""
    old_env, new_env = before[-_ENV_FIELDS:], after[-_ENV_FIELDS:]
    parts = []
    if old_env[-1] != new_env[-1]:
        changed = _env_diff(old_env[-1], new_env[-1])
        parts.append(f"the environment changed since it started ({changed})")
    # env= as the server had it: its bootstrap's entries, and those it was started with
    old_launch, new_launch = ({**dict(env[1]), **dict(env[0])} for env in (old_env, new_env))
    if old_launch != new_launch:
        changed = _env_diff(tuple(old_launch.items()), tuple(new_launch.items()))
        parts.append(f"this launch's env= differs from the one it started with ({changed})")
    return "; and ".join(parts)


def _warn_cold(let_go: list[str]) -> None:
    """Once per launcher, at the second server let go for its environment: the INFO records
    went unseen where logging is not set up, and a launcher changing a variable every launch
    (a request id, a step in ``env=``) pays a cold server start at each "warm" one.  Never at
    the first: one change (a notebook's next setting) costs one cold start, said at INFO."""
    global _let_go_for_env, _cold_told
    _let_go_for_env += len(let_go)
    if not let_go or _cold_told or _let_go_for_env < 2:
        return
    _cold_told = True
    from spawnkit._warnopts import user_stacklevel
    from spawnkit.errors import WarmServerWarning

    warnings.warn(
        f"warm starts from this launcher are cold: {_let_go_for_env} warm-start servers "
        "were let go because a later launch's environment differed from theirs, the last "
        f"because {let_go[-1]}; each such launch starts a new server (platform, plugins, "
        "hooks and preloads again), which costs what a spawned start does, or more. A "
        "server's environment (the "
        "launcher's and env=) is part of its key: set such variables once before the first "
        "launch (the same env= every launch) and pass per-launch values in the payload or "
        "rank_extra. Said once per launcher; each server let go is logged at INFO on "
        "spawnkit.warm.",
        WarmServerWarning,
        stacklevel=user_stacklevel(),
    )


def _env_diff(before: tuple[Any, ...], after: tuple[Any, ...], most: int = 8) -> str:
    """The names of the variables set, unset or changed between two keys' environments;
    never their values (a token, a password)."""
    old, new = dict(before), dict(after)
    parts = []
    for what, names in (
        ("changed", [k for k in new if k in old and old[k] != new[k]]),
        ("set", [k for k in new if k not in old]),
        ("unset", [k for k in old if k not in new]),
    ):
        if names:
            shown = sorted(os.fsdecode(k) for k in names)
            more = f" and {len(shown) - most} more" if len(shown) > most else ""
            parts.append(f"{what}: {', '.join(shown[:most])}{more}")
    return "; ".join(parts)


def _took(server: WarmServer, report: dict[str, Any]) -> None:
    """What the server's READY says: its start, who asked for a rank, the files it ran and
    where a module made since would be imported in place of one it imported."""
    server.started_at = float(report.get("started", time.time()))
    server.rankless = list(report.get("rankless", ()))
    server.sources = list(report.get("sources", ()))
    server.shadows = list(report.get("shadows", ()))


def _changed(server: WarmServer) -> list[str]:
    """The files changed since the server found them, and those made since that a fresh
    import would take in place of one it imported."""
    return _sources.changed(server.sources) + _shadows.shadowed(server.shadows)


def _as_found(server: WarmServer) -> bool:
    """Whether every file the server's workers run the code of is as the server found it;
    if not, the server is let go: its workers would run the code as it was, where a spawned
    worker runs the file's."""
    edited = _changed(server)
    if not edited:
        return True
    _log.info(
        "warm-start server pid %s let go: %s changed since it started (%d file(s) in all); "
        "a new server runs this launch with the code as it is now",
        server.pid,
        edited[0],
        len(edited),
    )
    server.let_go(f"{edited[0]} changed since it started ({len(edited)} file(s) in all)")
    server.edited = True
    _retired.append(server)
    return False


def for_context(server: WarmServer, namespace: Any, holder: Lease | None) -> WarmServer:
    """The server a ``get_context("forkserver")`` context's next child forks from: ``server``
    while every file its workers run is as it found it, else one started for the same
    selection now, as the next launch gets (:func:`_as_found`).

    A context keeps its server for its life (a pool replacing workers, an engine making its
    processes from one module-level context): a plugin or hook target edited since ran as it
    was in every later child, where a ``"spawn"`` context's ran the edit, unsaid; and a child
    started after some launch had let that server go for the edit failed instead.  The same
    ``stat`` per listed file as a launch's look."""
    if not server.edited and not _changed(server):
        return server
    if holder is not None:  # no longer this context's: let go by the new one's start
        server.holders.discard(holder)
    return get_server(
        server.package,
        server.preload,
        namespace,
        server.boot,
        server.start_timeout,
        server.exec_env,
        holder,
    )


def shutdown_forkservers(timeout: float = _STOP_TIMEOUT) -> int:
    """Stop every warm-start server of this process; returns how many were running."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
        retired = list(_retired)
        _retired.clear()
    for server in [*servers, *retired]:
        server.stop(timeout)
    return len(servers)


@contextlib.contextmanager
def launching(server: WarmServer, timeout: float | None = None) -> Iterator[None]:
    """Name the server the next ``Process.start()`` on this thread forks from."""
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
    _retired.clear()


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
