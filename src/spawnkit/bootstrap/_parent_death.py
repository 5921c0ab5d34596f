"""A worker and its whole process tree end when their launcher dies, however it died.

See docs/architecture.md ("parent death").  Two subtleties drive the shape:

* the death-pipe thread snapshots the worker's children before ending it: once the worker is
  gone they are re-parented and no walk finds them;
* a worker whose main thread holds the GIL in native code cannot run that thread, so on Linux a
  guardian process (forked while the worker is single-threaded; only ``os`` calls afterwards)
  waits on the pipe and a pidfd of the launcher.  ``PR_SET_PDEATHSIG`` on the worker itself was
  dropped: it killed the worker before its children could be ended.

A launcher that died before any of this was armed is caught by comparing the recorded parent pid
with ``getppid()`` (spawn only; never compared with 1, a legitimate parent in containers).
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PARENT_DIED_EXIT_CODE",
    "PROCESS_ENV",
    "RUN_ID_VAR",
    "arm",
    "reap_guardian",
    "start_server_guardian",
]

RUN_ID_VAR = "SPAWNKIT_RUN_ID"
"""Environment variable carrying the group's run id, inherited by a worker's own children,
so that :func:`spawnkit.cleanup` finds orphans."""

PROCESS_ENV = (RUN_ID_VAR,)
"""This module's process-wide variables, for the launcher's environment check."""

PARENT_DIED_EXIT_CODE = 1

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_GUARDIAN_GRACE_S = 0.5
"""How long the guardian lets a worker end its own tree before it does (well under 2 s)."""
_lock = threading.Lock()
_armed_conn: Any = None
_server_guarded = False
"""True in a warm-start fork server (and so in its workers) once the server's guardian runs."""


def arm(run_id: str | None, conn: Any, rank: int, parent_pid: int | None, pdeathsig: bool) -> None:
    """Start watching for the launcher's death; idempotent, cheap, imports nothing heavy.

    Takes the spec's fields, not the spec: nothing here may reach the payload.
    """
    global _armed_conn
    if run_id:
        os.environ[RUN_ID_VAR] = run_id
    if conn is None:
        return
    with _lock:
        if _armed_conn is conn:
            return
        _armed_conn = conn
    launcher_is_parent = pdeathsig and isinstance(parent_pid, int)
    if launcher_is_parent and os.getppid() != parent_pid:
        _die(rank, parent_pid, "it was already re-parented when it armed its watch")
    if isinstance(parent_pid, int) and sys.platform.startswith("linux") and not _server_guarded:
        # Forked before the watcher thread starts, while this process has one thread.  A warm
        # worker skips it: its fork server's guardian covers it (a fork of a torch-sized
        # worker costs ~5 ms, a fifth of a warm start).
        _start_guardian(conn.fileno(), parent_pid)
    # A bare thread, not threading.Thread: Thread.start() waits until the new thread runs,
    # 1-3 ms in a freshly forked worker on a busy machine (a seventh of a warm start), and the
    # watch need not have begun by then: a closed pipe still reads as EOF when it does.  Like a
    # daemon thread it never delays exit; threading.enumerate() does not list it.  That wait
    # is made at exit instead (``_let_watcher_start``), where it costs nothing.
    started = _start_watch((conn, rank, parent_pid, _identity(conn.fileno())))
    import atexit  # built in, and imported already by the package's util: free

    atexit.register(_let_watcher_start, started, os.getpid())


_ahead: list[Any] | None = None
"""A watcher thread started ahead in this process (:func:`watch_ahead`):
[lock it waits on, the watch's arguments, pid, lock it releases as it runs]."""


def watch_ahead() -> None:
    """In a warm server's spare, while it waits for a request: the watcher thread, started and
    parked, so that :func:`arm` only hands it the pipe.  Starting a thread costs a freshly forked
    worker ~0.1 ms (the clone, its stack's first pages), a twentieth of a warm start: a spare
    pays it while idle.  Only where the server's guardian covers its workers: ``arm`` then forks
    no guardian of its own, which it must not do with a second thread in the process."""
    global _ahead
    if not _server_guarded:
        return
    go, started = _thread.allocate_lock(), _thread.allocate_lock()
    go.acquire()
    started.acquire()
    slot: list[Any] = [go, None, os.getpid(), started]
    _thread.start_new_thread(_parked, (slot,))
    _ahead = slot


def _parked(slot: list[Any]) -> None:
    slot[3].release()  # it runs (see _let_watcher_start)
    slot[0].acquire()  # released by _start_watch, with the watch's arguments; or never
    _watch(*slot[1])


def _start_watch(args: tuple[Any, int, int | None, tuple[int, int] | None]) -> Any:
    """Start the watch (hand it to the parked thread, where there is one); the lock its
    thread releases as it first runs."""
    global _ahead
    slot, _ahead = _ahead, None
    ran = _thread.allocate_lock()
    ran.acquire()
    if slot is not None and slot[2] == os.getpid():  # not a fork of the spare that started it
        slot[1] = (*args, ran)
        slot[0].release()
        return slot[3]
    _thread.start_new_thread(_watch, (*args, ran))
    return ran


_WATCHER_START_WAIT_S = 5.0
"""The most an exiting worker waits for a watcher thread that has not run yet."""


def _let_watcher_start(started: Any, pid: int) -> None:
    """At exit, before the interpreter finalizes: let a watcher that has not run yet start.

    A worker whose entry returns within milliseconds can reach ``Py_FinalizeEx`` before the
    scheduler ever ran its new watcher thread.  The interpreter then frees that thread's
    state, and on CPython 3.10 (and 3.11 before 3.11.6, 3.12.0: CPython gh-108987) the thread,
    when it does run, initializes itself on the freed memory: the worker dies of SIGSEGV after
    its result was sent, and the group fails.  Waiting on the lock the thread releases first
    gives up the GIL until it has started; a started thread blocked in ``read()`` is one the
    interpreter ends safely.  In a process forked from the worker, there is no thread to wait
    for.
    """
    if os.getpid() == pid:
        started.acquire(timeout=_WATCHER_START_WAIT_S)


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _watch(
    conn: Any, rank: int, parent_pid: int | None, ident: tuple[int, int] | None, started: Any
) -> None:
    """Block until the launcher's end closes; the launcher never writes to this pipe."""
    started.release()  # it runs: the interpreter may finalize under it from now on
    try:
        while True:
            conn.recv_bytes()
    except (EOFError, OSError):
        pass
    # The entry may have closed the descriptor itself (a daemonizing library's
    # os.closerange(3, ...)) before this thread first read it, and its number may hold a file
    # of the entry's now: that is no launcher's death, and ending the worker "because its
    # launcher died" would be false.  Only the pipe itself at EOF says so.
    if ident is None or _identity(conn.fileno()) != ident:
        return
    _die(rank, parent_pid, "its death pipe closed")


def _start_guardian(death_fd: int, launcher_pid: int) -> None:
    """Start the guardian: via ``clone(CLONE_PARENT)`` the launcher's child, so a worker's
    ``os.wait()`` never waits for it and the launcher reaps it; else the worker's child (PDEATHSIG).
    """
    if threading.active_count() > 1:
        return  # forking a multi-threaded process is unsafe; the watcher thread still covers
    try:
        launcher = os.pidfd_open(launcher_pid)
    except (AttributeError, OSError):
        launcher = -1  # old kernel, or the launcher is already gone: the pipe still covers
    worker = os.getpid()
    try:
        worker_fd = os.pidfd_open(worker)
    except (AttributeError, OSError):
        worker_fd = -1
    pid = _fork_beside() if worker_fd >= 0 else -1
    beside = pid >= 0
    if not beside:
        try:
            pid = os.fork()
        except OSError:
            pid = -1
    if pid == 0:
        try:
            _guard(worker, death_fd, launcher, worker_fd=worker_fd if beside else -1)
        finally:
            os._exit(0)
    for fd in (launcher, worker_fd):
        if fd >= 0:
            os.close(fd)


_CLONE_PARENT = 0x00008000
_SYS_CLONE = {"x86_64": 56, "aarch64": 220, "ppc64le": 120, "s390x": 120}
_GUARDIAN_NAME = b"skguard"
"""The guardian's process name (``comm``) is this plus its worker's pid: the launcher finds
and reaps it by that name (15 bytes at most)."""


def _fork_beside() -> int:
    """``fork()`` whose child's parent is this process's parent; -1 where it cannot be done.

    Only called while single-threaded: the child runs nothing but ``os`` calls.
    """
    if not sys.platform.startswith("linux"):
        return -1
    # os.uname(), not platform.machine(): the same string on Linux, without importing
    # platform (~4 ms of a cold worker's start)
    machine = os.uname().machine
    number = _SYS_CLONE.get(machine)
    if number is None:
        return -1
    try:
        syscall = _libc("syscall", "l")
        flags = _CLONE_PARENT | int(signal.SIGCHLD)
        if machine == "s390x":  # stack first, then flags
            pid = int(syscall(number, 0, flags, 0, 0, 0))
        else:
            pid = int(syscall(number, flags, 0, 0, 0, 0))
    except (OSError, AttributeError, TypeError, ImportError):  # _ctypes is private: any change
        return -1
    return pid if pid >= 0 else -1


def _libc(name: str, result: str) -> Any:
    """``ctypes.CDLL(None, use_errno=True)[name]`` returning the C type ``result`` (a struct
    code: ``"l"`` long, ``"i"`` int), built from ``_ctypes`` alone, as ``ctypes`` builds it.

    A cold worker makes one such call (``clone``) before its watcher thread starts; the
    ``ctypes`` package over ``_ctypes`` (``ctypes``, ``ctypes._endian``) cost it ~0.8 ms to
    import, and nothing else in a worker needs it.  Arguments are passed as ctypes passes
    them without ``argtypes``: a Python int as a C int, bytes as ``char *``.
    """
    import _ctypes

    class Result(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = result

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Result

    class Library:  # what a function pointer is looked up in: the process's own symbols
        # None: the program and what it linked (libc), as CDLL(None); RTLD_LOCAL: ctypes'
        # DEFAULT_MODE on Linux.  (The stubs know neither None here nor a library but CDLL.)
        _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]

    return Function((name, Library()))  # type: ignore[arg-type]


def reap_guardian(worker_pid: int) -> None:
    """In the launcher, once ``worker_pid`` has exited: kill and reap its guardian (bounded)."""
    name = _GUARDIAN_NAME + str(worker_pid).encode()
    for pid in _own_children():
        try:
            with open(f"/proc/{pid}/comm", "rb") as f:
                if f.read().strip() != name:
                    continue
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # our own child, just SIGKILLed: returns promptly
        except (OSError, ChildProcessError):
            continue


def _own_children() -> list[int]:
    """This process's children, from ``/proc`` (every thread's list)."""
    found: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                found += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return found


def start_server_guardian() -> None:
    """In a warm-start fork server, before its preloads: one guardian for all its workers."""
    global _server_guarded
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return
    try:
        launcher = os.pidfd_open(os.getppid())
    except (AttributeError, OSError):
        return  # workers then fork their own guardians
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            _guard(server, -1, launcher, whole_tree=True)
        finally:
            os._exit(0)
    os.close(launcher)
    _server_guarded = True


def _guard(
    worker: int, death_fd: int, launcher: int, *, whole_tree: bool = False, worker_fd: int = -1
) -> None:
    """The guardian's whole life; ``worker_fd`` is the worker's pidfd (sibling) or -1 (child)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the launcher's to handle
    keep = {2, death_fd, launcher, worker_fd}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    if not _bind_to_worker(worker, worker_fd):
        return
    import select

    while True:
        watched = [fd for fd in (death_fd, launcher, worker_fd) if fd >= 0]
        try:
            ready, _, _ = select.select(watched, [], [])
        except InterruptedError:
            continue
        if worker_fd >= 0 and worker_fd in ready:
            return  # the worker ended: nothing left to guard
        if launcher in ready:
            break
        try:
            if not os.read(death_fd, 4096):
                break
        except OSError:
            break
    # The worker's own watcher normally ends the tree (and this guardian) right away.
    time.sleep(_GUARDIAN_GRACE_S)
    if worker_fd >= 0 and select.select([worker_fd], [], [], 0)[0]:
        return  # it did: its pid may already be another process's
    me = os.getpid()
    tree = [p for p in _descendants(worker) if p != me]
    if whole_tree and not tree:
        return  # a fork server whose workers all ended themselves: it exits on its own
    what = "warm-start server" if whole_tree else "worker"
    try:
        os.write(
            2,
            (
                f"spawnkit: {what} pid {worker} did not end its tree within {_GUARDIAN_GRACE_S} "
                f"s of its launcher's death; killing it and its {len(tree)} descendant(s)\n"
            ).encode(),
        )
    except OSError:
        pass
    for pid in (*tree, worker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _bind_to_worker(worker: int, worker_fd: int) -> bool:
    """Name the guardian (the launcher reaps it by name) and, as the worker's child, tie it
    to the worker with PDEATHSIG; False when it must not run (it could outlive the worker)."""
    try:
        prctl = _libc("prctl", "i")
        if worker_fd < 0:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        prctl(_PR_SET_NAME, _GUARDIAN_NAME + str(worker).encode(), 0, 0, 0)
    except (OSError, AttributeError, TypeError, ImportError):  # _ctypes is private (_libc)
        return False
    return worker_fd >= 0 or os.getppid() == worker


def _descendants(root: int) -> list[int]:
    """Every descendant of ``root``, from one read of ``/proc`` (no psutil in the guardian)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _die(rank: int, parent_pid: int | None, why: str) -> None:
    """End this worker and its own children: nobody is left to collect their results."""
    try:
        os.write(
            2,
            (
                f"spawnkit: worker rank {rank} (pid {os.getpid()}) exits because its launcher "
                f"(pid {parent_pid}) died: {why}\n"
            ).encode(),
        )
    except OSError:
        pass
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
    except Exception:
        pass
    os._exit(PARENT_DIED_EXIT_CODE)
