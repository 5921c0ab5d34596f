"""A plain ``multiprocessing.pool.Pool`` on a bootstrapping context: a failed bootstrap ends it.

``ctx.Pool()`` is a ``BootstrapPool``, which stops at a worker whose bootstrap
failed.  A pool built on the context some other way is the standard one:
joblib's ``Parallel(backend=ctx)`` (its ``MemmappingPool``), or
``multiprocessing.pool.Pool(context=ctx)``.  It replaced each worker as it
exited before its target, forever, while ``map()`` and ``Parallel(...)``
waited: a hang, a process spawned and failed every second, unsaid.

Such a pool's workers are noted here per pool (by its task queue, the first of
``multiprocessing.pool.worker``'s arguments, which every worker of one pool
shares).  Once one of them is found to have failed its bootstrap, a worker the
pool starts after it is no process: a thread of this process reads the pool's
task queue as a worker would and answers each task with that failure, so the
pool neither replaces it nor waits, and the caller gets the bootstrap's typed
error.  It ends on the pool's sentinel, as a worker does, at the pool's close
or terminate.
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["start"]

#: Exit status an answering stand-in reports once its pool sent it the sentinel.
_ANSWERED_EXIT = 70


class _Pool:
    """What is known of one plain pool: its workers not yet known to have run their target,
    and the first bootstrap failure among them."""

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.broken: Exception | None = None

    def failure(self) -> Exception | None:
        if self.broken is None:
            alive = []
            for proc in self.started:
                if proc.exitcode is None:
                    alive.append(proc)
                    continue
                err = proc.bootstrap_error()
                if err is not None:
                    self.broken = err
                    break
            self.started = alive  # an exited worker that ran its target says nothing more
        return self.broken


_pools: weakref.WeakKeyDictionary[Any, _Pool] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def start(proc: Any, args: tuple[Any, ...], go: Callable[[], None]) -> None:
    """Start ``proc``, a worker of a plain pool (``args``: ``worker``'s arguments): ``go()``
    unless a worker of the same pool failed its bootstrap, then a thread answering for it."""
    if not args:
        go()
        return
    try:
        with _lock:
            pool = _pools.setdefault(args[0], _Pool())
            err = pool.failure()
    except TypeError:  # a task queue no weak reference can name: the pool as it was
        go()
        return
    if err is None:
        go()
        with _lock:
            pool.started.append(proc)
        return
    proc.__dict__["_spawnkit_error"] = err  # its bootstrap_error(): the pool's failure
    proc._Popen = lambda process: _Answering(err, args[0], args[1])
    package = proc._spawnkit_package
    __import__(f"{package}.process", fromlist=["BaseProcess"]).BaseProcess.start(proc)


class _Answering:
    """Stands as the pool's worker process: a thread that answers each task with ``err``.

    Its sentinel is a pipe's read end, readable once the thread ended (the pool's wait);
    the thread ends on the sentinel the pool sends each worker as it closes or terminates."""

    pid = None
    returncode: int | None = None

    def __init__(self, err: Exception, inqueue: Any, outqueue: Any) -> None:
        self.sentinel, self._ended_w = os.pipe()
        self._closed = False
        self._thread = threading.Thread(
            target=self._answer,
            args=(err, inqueue, outqueue),
            name="spawnkit-failed-pool-worker",
            daemon=True,
        )
        self._thread.start()

    def _answer(self, err: Exception, inqueue: Any, outqueue: Any) -> None:
        try:
            while True:
                task = inqueue.get()
                if task is None:
                    break
                outqueue.put((task[0], task[1], (False, err)))
        except (EOFError, OSError):  # the pool's pipes closed under it: it is over
            pass
        finally:
            if self.returncode is None:
                self.returncode = _ANSWERED_EXIT
            os.close(self._ended_w)

    def poll(self, flag: int = 0) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            self._thread.join(timeout)
        return self.returncode

    def terminate(self) -> None:
        """Ended as a terminated worker is (the pool then leaves it; its ``pid`` is None);
        the thread itself ends on its sentinel, sent as the pool shuts down."""
        if self.returncode is None:
            self.returncode = -signal.SIGTERM

    def kill(self) -> None:
        self.terminate()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.sentinel)
