"""The warm server's fork loop: the standard forkserver's protocol, with workers forked ahead.

The launcher's half is the package's own (``WarmServer.connect_to_new_process`` and the
package's forkserver ``Popen``): connect, pass the child's pipes, read a pid, later an exit
status.  The standard loop forks when a request arrives, so every warm start waits for a
``fork()`` of the whole server: 0.9 ms for a 28 MB server, 3.9 ms for one holding torch (the
2-core machine).  This loop forks *spares* while it is idle.  A spare is a forked copy of
the server, blocked on a socket; a request hands it the request's descriptors and it runs
exactly what a child forked on request runs (``_fork_child.serve``: the package's child path,
less what the spare did while it waited)::

    launcher ──connect, fds──▶ server ──fds (SCM_RIGHTS)──▶ spare ──_fork_child──▶ worker
        ◀────────── pid ────────┘  at once (the fork happened while the server was idle):
                                   after the spare is handed a burst's first request,
                                   before it is handed the rest of a burst (``_serve``)

A request with no spare ready (a burst larger than the pool, a spare that died) is forked on
request, as before: a spare never makes a start slower, only earlier.  A spare also takes,
while it waits, the pages a worker will write (``_prefault``: learned from the server's first
worker that reaches its entry), so the copy-on-write faults of its start are paid ahead too;
and the server, whose own pages each fork leaves shared, takes back those it writes between
two forks while it idles (``_prefault.OwnPages``), not on the next request's way to a spare.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import selectors
import signal
import socket
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any, NoReturn

from spawnkit.bootstrap import _parent_death
from spawnkit.protocol import _fork_child, _prefault

__all__ = ["SPARE_NAME", "SPARES_VAR", "most_spares", "reap_within", "serve_forever"]

SPARES_VAR = "SPAWNKIT_WARM_SPARES"
"""The most spares one warm server keeps (default 8; ``0``: fork every worker on request)."""

SPARE_NAME = "skspare"
"""An idle spare's process name (``comm``) is this plus its server's pid; a worker that was a
spare gets the server's name back before anything of it runs."""

_MOST_SPARES = 8
_IDLE_S = 0.005
"""Spares are forked only after this long without a request: a burst is served first."""
_BURST_GAP_S = 0.05
_REAP_S = 1.0
_MOST_LOST = 3


def most_spares(environ: Mapping[str, str] | None = None, where: str = "") -> int:
    """``SPAWNKIT_WARM_SPARES`` as read by a server (from ``environ``, the environment it is
    started with; ``where`` says where it was given); a value that is not a count is refused."""
    raw = (os.environ if environ is None else environ).get(SPARES_VAR, "").strip()
    if not raw:
        return _MOST_SPARES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        from spawnkit.errors import ConfigError

        raise ConfigError(
            f"{SPARES_VAR}={raw!r}{where} is not a count. It sets how many workers a "
            "warm-start fork server forks ahead of requests. Set it to 0 (fork every worker "
            "on request) or a positive number, or unset it for the default of 8.",
            setting=SPARES_VAR,
        )
    return value


def serve_forever(package: str, listener_fd: int, alive_r: int, most: int) -> NoReturn:
    """The server's last call: serve fork requests until every launcher and worker is gone."""
    loop = _Loop(package, listener_fd, alive_r, most)
    try:
        loop.run()
    finally:
        _retire_spares(loop)


def _sigchld(*_unused: object) -> None:
    """Does nothing: SIGCHLD only has to wake the selector through the wakeup fd."""


#: What a worker sends its parent to say it failed (SGLang's scheduler: SIGQUIT to
#: ``psutil.Process().parent()``; vLLM's engine core has used SIGUSR1): a spawned worker's
#: parent is the launcher, whose handler tears the engine down; a warm worker's is this
#: server, which each of these would kill (their default action) with the launcher none the
#: wiser.  The server passes them on to the launcher that started it, while it lives.
_FOR_THE_LAUNCHER = ("SIGQUIT", "SIGUSR1", "SIGUSR2")


def _answer_ahead() -> None:
    """Before the first fork: the ABC question every worker's ``arm_parent_death`` asks
    (``os.environ.update(rank_env(spec))``: is a dict a ``Mapping``?), answered once here.
    ``abc`` caches an answer per process, and nothing in a server had asked this one: each
    worker walked ``Mapping``'s registry for it (two ``__subclasscheck__`` calls, ~10 us of
    a warm start on the 2-core machine)."""
    isinstance({}, Mapping)


def _passer(launcher: int) -> Any:
    def pass_on(signum: int, _frame: object) -> None:
        if os.getppid() == launcher:  # not to whoever adopted the server after the launcher
            with contextlib.suppress(ProcessLookupError):
                os.kill(launcher, signum)

    return pass_on


class _Loop:
    """The server's state between requests; everything a child must close is kept here."""

    def __init__(self, package: str, listener_fd: int, alive_r: int, most: int) -> None:
        self.forkserver: Any = importlib.import_module(f"{package}.forkserver")
        self.reduction: Any = importlib.import_module(f"{package}.reduction")
        self.util: Any = importlib.import_module(f"{package}.util")
        self.listener_fd, self.alive_r, self.most = listener_fd, alive_r, most
        self.pid_to_fd: dict[int, int] = {}  # a started worker -> its launcher's status pipe
        self.spares: list[tuple[int, socket.socket]] = []  # oldest first
        self.retired: set[int] = set()  # spares that died or were let go, not yet reaped
        self.let_go: set[int] = set()  # spares let go on purpose, not yet reaped: no loss
        self.target = min(1, most)  # grows to the largest burst served, up to ``most``
        self.burst, self.last_request = 0, 0.0  # requests in the current burst; the last one
        self.settled = False  # idle for _IDLE_S since the last request: refill back to back
        self.lost = 0  # spares in a row that ended before a request reached them
        self.learner = _prefault.Learner()  # the pages a worker writes, for spares to take
        self.own = _prefault.OwnPages()  # the pages the server writes, taken back after forks
        try:
            with open("/proc/self/comm", "rb") as f:
                self.comm: bytes | None = f.read().rstrip(b"\n")
        except OSError:
            self.comm = None

    def run(self) -> NoReturn:
        """Serve until the alive pipe reads EOF (``SystemExit``) or serving itself fails;
        stdin was closed before the bootstrap (``warm_main._as_its_workers``)."""
        self.sig_r, self.sig_w = os.pipe()
        os.set_blocking(self.sig_r, False)
        os.set_blocking(self.sig_w, False)
        handlers: dict[signal.Signals, Any] = {
            signal.SIGCHLD: _sigchld,
            signal.SIGINT: signal.SIG_IGN,  # a Ctrl-C is the launcher's to handle
        }
        pass_on = _passer(os.getppid())
        for name in _FOR_THE_LAUNCHER:  # a worker's signal to its parent (each worker resets)
            if hasattr(signal, name):
                handlers[getattr(signal, name)] = pass_on
        self.old_handlers = {sig: signal.signal(sig, val) for sig, val in handlers.items()}
        _answer_ahead()
        signal.set_wakeup_fd(self.sig_w)  # os.write() in a Python signal handler races
        with (
            socket.socket(socket.AF_UNIX, fileno=self.listener_fd) as self.listener,
            selectors.DefaultSelector() as self.selector,
        ):
            # A worker starting processes of its own reaches this same server.
            self.forkserver._forkserver._forkserver_address = self.listener.getsockname()
            for fileobj in (self.listener, self.alive_r, self.sig_r):
                self.selector.register(fileobj, selectors.EVENT_READ)
            while True:
                try:
                    self._one_round()
                except OSError as exc:
                    if exc.errno != errno.ECONNABORTED:
                        raise

    def _one_round(self) -> None:
        wait = None if len(self.spares) >= self.target else (0 if self.settled else _IDLE_S)
        if wait is None and self.most:
            self.own.settle(self.learner.pages is not None and self.learner.fd is None)
        ready = [key.fileobj for key, _events in self.selector.select(wait)]
        if not ready:  # idle: a burst (if any) is over; fork one spare, then look again
            self.settled = True
            self.own.idle()
            if len(self.spares) < self.target:
                self._add_spare()
            return
        self.settled = False
        if self.alive_r in ready:  # EOF: no launcher and no worker holds the alive pipe
            os.read(self.alive_r, 1)
            # The last workers closed theirs by exiting, a moment before they can be reaped:
            # their statuses go out first, or a launcher still waiting reads none (255).
            self._reap(_REAP_S)
            raise SystemExit
        if self.sig_r in ready:
            self._reap()
        if self.learner.fd is not None and self.learner.fd in ready:
            self._learn(self.learner.fd)
        if self.listener in ready:
            self._serve()

    # ----------------------------------------------------------------- requests
    def _serve(self) -> None:
        with self.listener.accept()[0] as conn:
            fds = self.reduction.recvfds(conn, self.forkserver.MAXFDS_TO_SEND + 1)
        if len(fds) > self.forkserver.MAXFDS_TO_SEND:
            raise RuntimeError(f"Too many ({len(fds)}) fds to send")
        child_r, child_w, *fds = fds
        # A group's ranks arrive one after another, a launcher's per-rank work apart (more on a
        # loaded machine than the idle wait): requests closer than _BURST_GAP_S are one burst.
        now = time.monotonic()
        self.burst = self.burst + 1 if now - self.last_request < _BURST_GAP_S else 1
        self.last_request = now
        self.target = min(self.most, max(self.target, self.burst))
        spare = self._live_spare()
        learn_w = self._learner()
        # The worker's word that its launcher has its pid, written only once it does: the
        # worker runs its target only after reading it (``_known.target_next``).
        known_r, known_w = os.pipe()
        handed = [*fds, learn_w, known_r] if learn_w is not None else [*fds, known_r]
        self.own.served = True
        try:
            if spare is None:
                pid = os.fork()
                if pid == 0:
                    os.close(known_w)  # or it would hold its own word's pipe open
                    self._child(child_r, fds, child_w, learn_w, time.monotonic(), False, known_r)
                self.own.forked = True
            else:
                pid = spare[0]
            _reply(self, spare, pid, child_r, child_w, handed, learn_w, known_w)
        finally:
            os.close(known_w)  # killed before this, the worker reads EOF and exits
        os.close(child_r)
        for fd in handed:
            os.close(fd)

    def _hand(
        self, spare: tuple[int, socket.socket], child_r: int, fds: list[int], learn_w: int | None
    ) -> None:
        go = b"go" if learn_w is None else b"gl"
        try:
            with spare[1]:
                socket.send_fds(spare[1], [go], [child_r, *fds])
            self.lost = 0
        except OSError:  # it died since the check: the launcher gets its exit status
            pass

    def _learner(self) -> int | None:
        """The write end of a learn pipe for this request's worker, if it is to learn."""
        pipe = self.learner.start() if self.most else None
        if pipe is None:
            return None
        self.selector.register(pipe[0], selectors.EVENT_READ)
        return pipe[1]

    def _learn(self, fd: int) -> None:
        if not self.learner.read(fd):
            return
        self.selector.unregister(fd)
        if self.learner.finish():  # the spares forked before would start without the pages
            for pid, sock in self.spares:
                sock.close()
                self.let_go.add(pid)
            self.spares.clear()

    def _live_spare(self) -> tuple[int, socket.socket] | None:
        """The oldest spare still alive (its socket not at EOF), or None: fork on request."""
        while self.spares:
            pid, sock = self.spares.pop(0)
            if _alive(sock):
                return pid, sock
            sock.close()
            self.retired.add(pid)  # reaped as a retired spare when its SIGCHLD comes
        return None

    def _reap(self, wait_s: float = 0.0) -> None:
        """Send each ended worker's status; ``wait_s``: how long to wait for the rest."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.sig_r, 65536)  # exhaust the wakeups
        deadline = time.monotonic() + wait_s
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                if not self.pid_to_fd or time.monotonic() >= deadline:
                    return
                time.sleep(0.002)
                continue
            child_w = self.pid_to_fd.pop(pid, None)
            if child_w is not None:
                with contextlib.suppress(BrokenPipeError):
                    self.forkserver.write_signed(child_w, os.waitstatus_to_exitcode(status))
                os.close(child_w)
            elif not self.own.reaped(pid) and not self._forget_spare(pid):
                warnings.warn(f"forkserver: waitpid returned unexpected pid {pid}", stacklevel=1)

    def _forget_spare(self, pid: int) -> bool:
        """A spare that ended before any request reached it (killed, or let go): forget it.

        Spares that keep dying (something kills them, an at-fork handler fails) would be forked
        again every few milliseconds, forever, with nobody told: after _MOST_LOST in a row the
        server forks on request only, where a failing fork reaches a launcher.
        """
        if pid in self.let_go:
            self.let_go.discard(pid)
            return True
        if pid in self.retired:
            self.retired.discard(pid)
        else:
            found = [i for i, (spare, _sock) in enumerate(self.spares) if spare == pid]
            if not found:
                return False
            self.spares.pop(found[0])[1].close()
        self.lost += 1
        if self.lost >= _MOST_LOST:
            self.most = self.target = 0
        return True

    # ------------------------------------------------------------------- spares
    def _add_spare(self) -> None:
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            self.most = self.target = 0  # out of descriptors: fork on request from now on
            return
        try:
            pid = os.fork()
        except OSError:  # out of processes or memory: a request's own fork says so, typed
            ours.close()
            theirs.close()
            self.most = self.target = 0
            return
        if pid == 0:
            ours.close()
            self._spare(theirs)
        self.own.forked = True
        theirs.close()
        self.spares.append((pid, ours))

    def _spare(self, sock: socket.socket) -> NoReturn:
        """A spare's life: close the server's descriptors, wait for a request, become its worker.

        Nothing may raise out of here: it would unwind into the server's loop, in this process.
        """
        fds: list[int] = []
        try:
            signal.set_wakeup_fd(-1)  # first: the wakeup fd is closed next, its number reused
            _close_server_fds(self)
            _rename(f"{SPARE_NAME}{os.getppid()}".encode()[:15])
            _prefault.populate(self.learner.pages or [])  # while idle: the pages its worker writes
            _parent_death.watch_ahead()  # and the thread that arm_parent_death starts
            ahead = _ahead(self.util, self.old_handlers)  # its worker's first steps: no request
            msg = b""
            with contextlib.suppress(OSError):  # EOF or an error: the server let it go, or died
                msg, fds, _flags, _addr = socket.recv_fds(
                    sock, 16, self.forkserver.MAXFDS_TO_SEND + 2
                )
            handed = time.monotonic()
            sock.close()
            _rename(self.comm)
        except BaseException:
            with contextlib.suppress(BaseException):
                sys.excepthook(*sys.exc_info())
                sys.stderr.flush()
            os._exit(1)  # a request it took reads this status from the server
        if not fds:
            os._exit(0)
        child_r, *rest = fds
        known_r = rest.pop()  # the known pipe goes last, the learn pipe before it
        learn_w = rest.pop() if msg == b"gl" else None
        self._child(child_r, rest, None, learn_w, handed, ahead, known_r)

    def _child(
        self,
        child_r: int,
        fds: list[int],
        child_w: int | None,
        learn_w: int | None,
        handed: float,
        ahead: bool,
        known_r: int,
    ) -> NoReturn:
        """What a worker runs, forked on request (``child_w``: the server's end of its status
        pipe) or a spare handed a request (``ahead``: its first steps taken while it waited):
        what the package's own loop runs, every descriptor of the server closed."""
        code = 1
        try:
            from spawnkit.protocol import _fork_state  # imported by warm_main

            _fork_state.handed_at(handed)  # when it got the request (a trace's)
            if not ahead:  # forked on request, or its spare's _ahead raised: reported here
                _first_steps(self.util._exit_function)
            if child_w is not None:  # forked just now: the server's descriptors are open here
                signal.set_wakeup_fd(-1)
                _close_server_fds(self)
                os.close(child_w)
            if learn_w is not None:
                _prefault.arm(learn_w)
            code = _fork_child.serve(self.forkserver, child_r, fds, self.old_handlers, known_r)
        except Exception:
            sys.excepthook(*sys.exc_info())
            sys.stderr.flush()
        finally:
            try:
                from spawnkit.protocol import _fork_exit

                _fork_exit.run()  # what a spawned worker's interpreter would call as it exits
            finally:
                os._exit(code)  # whatever that raised: a worker never returns into the loop


def _reply(
    loop: _Loop,
    spare: tuple[int, socket.socket] | None,
    pid: int,
    child_r: int,
    child_w: int,
    handed: list[int],
    learn_w: int | None,
    known_w: int,
) -> None:
    """The pid to the launcher, the request to the spare (if one takes it), and then the
    worker's word that its launcher has its pid."""
    # Each write below wakes a process, which may take this CPU from the server before its
    # next line (0.17 ms each, 2 cores).  A burst's first request (a lone worker, a group's
    # rank 0) hands the spare first: its start-up is what the caller waits for.  Within a
    # burst the pid goes first: a woken spare may take this CPU for its whole start-up
    # while the launcher waits for the pid before it can send the next rank's request.
    first = spare if loop.burst == 1 else None
    if first is not None:
        loop._hand(first, child_r, handed, learn_w)
    told = False
    with contextlib.suppress(BrokenPipeError):  # the launcher vanished
        loop.forkserver.write_signed(child_w, pid)
        told = True
    loop.pid_to_fd[pid] = child_w  # set before the next round reaps: no status is lost
    if told:  # in the launcher's pipe now, which it reads even if this server dies next
        with contextlib.suppress(OSError):
            os.write(known_w, b"k")  # before a later hand: its spare never waits for it
    if spare is not None and first is None:
        loop._hand(spare, child_r, handed, learn_w)


def _close_server_fds(loop: _Loop) -> None:
    """In a child: the listener, the selector, the alive and signal pipes, every started
    worker's status pipe and every spare's socket.  A spare's socket left open here would
    keep that spare from reading its server's death as EOF."""
    loop.listener.close()
    loop.selector.close()
    for _pid, sock in loop.spares:
        sock.close()
    # the learn pipe, and its witness's (which reads EOF only once no child holds it either)
    learning = [fd for fd in (loop.learner.fd, loop.own.pipe) if fd is not None]
    for fd in (loop.alive_r, loop.sig_r, loop.sig_w, *learning, *loop.pid_to_fd.values()):
        with contextlib.suppress(OSError):
            os.close(fd)


def _ahead(util: Any, handlers: dict[Any, Any]) -> bool:
    """In a spare, before its request: its worker's first steps, which depend on nothing the
    request brings (0.07 ms of a trivial warm start, now paid while idle), and the part of
    multiprocessing's child start that does not either (``_fork_child.ahead``).  Whether the
    first steps were done: where they raised, they run again after the request, whose
    launcher hears of it."""
    with contextlib.suppress(Exception):  # what raised there is done after the request
        _fork_child.ahead(util.__name__.rpartition(".")[0], handlers)
    try:
        _first_steps(util._exit_function)
    except Exception:
        return False
    return True


def _first_steps(exit_function: Any) -> None:
    """A worker's fresh entropy and its exit list (``_fork_state``, ``_fork_exit``), before
    any of its code runs."""
    from spawnkit.protocol import _fork_exit, _fork_state  # imported by warm_main

    _fork_state.reseed()
    _fork_exit.forked(exit_function)  # on every Python (see _fork_exit)


# -------------------------------------------------------------------- server exit
def _retire_spares(loop: _Loop) -> None:
    """Let every spare go (EOF on its socket) and reap it: none outlives its server."""
    loop.own.stop()
    spares = [pid for pid, _sock in loop.spares] + sorted(loop.let_go)  # let go, not reaped
    for _pid, sock in loop.spares:
        sock.close()
    loop.spares.clear()
    deadline = time.monotonic() + _REAP_S
    for pid in spares:
        if reap_within(pid, deadline - time.monotonic()) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _rename(name: bytes | None) -> None:
    if name is None:
        return
    try:  # no file object: this runs on a worker's start, after its request
        fd = os.open("/proc/self/comm", os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, name)
    except OSError:
        pass
    finally:
        os.close(fd)


def _alive(sock: socket.socket) -> bool:
    """Whether an idle spare still holds its end: nothing to read, not EOF.

    A peek, not ``select()``: a busy server's descriptors pass ``FD_SETSIZE`` (1024)."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False  # EOF (or stray data): the spare is gone


def reap_within(pid: int, timeout: float) -> int | None:
    """The exit code of child ``pid`` once it ended (0: not a child of this process), or None
    when it still runs after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)
