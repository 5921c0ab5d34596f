"""SIGTERM to the launcher: the workers get the teardown a Ctrl-C gives them.

``docker stop``, ``kubectl delete pod``, systemd, SLURM and ``timeout`` stop a process with
SIGTERM.  A launcher that kept the default disposition died at once, and each worker, seeing
its launcher gone, ended with ``os._exit``: no rank ran its own SIGTERM handler (a
checkpoint), its ``finally`` or its exit callbacks, and nothing was printed anywhere.  While
a group runs, a launcher that left SIGTERM at its default raises :class:`Terminated` (a
``SystemExit`` with code 143) in its main thread instead: the group's ``with`` block, or the
exit handler for groups left running, tears the group down (SIGTERM to each rank,
``grace_period``, SIGKILL), and the launcher then exits 143.  A handler of the launcher's own
is left alone.  Signal dispositions belong to the main thread; from any other, nothing is set.

Python runs a signal's handler between two bytecodes of whatever the main thread runs, a
finalizer included (a ``__del__``: multiprocessing's ``Connection.__del__`` as the launcher drops
a started rank's pipe ends; a weakref or garbage-collector callback), and swallows what a
finalizer raises ("Exception ignored in ...").  A ``Terminated`` raised there never reached the
teardown, and the launcher waited on with every later SIGTERM ignored as "already handled".
While a group runs, ``sys.unraisablehook`` is watched for it: a swallowed ``Terminated`` is
sent again as a fresh SIGTERM to the main thread, from a helper thread, so that it is raised
where the launcher is once the finalizer is over.  One swallowed by an exit handler is left
so: the launcher is exiting, and the exit handler for live groups tears them down.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["Terminated", "unwatch", "watch", "watching"]


class Terminated(SystemExit):
    """SIGTERM reached the launcher while a worker group ran; leaving with exit code 143."""


_fired = False  # a Terminated is on its way up: its teardown runs, a later SIGTERM waits for it
_told = False  # the line on stderr is said once, however often a swallowed one is sent again
_previous_hook: Any = None  # sys.unraisablehook before ours (watch())
#: What a SIGTERM ended the launch with, for the groups torn down at exit (their trace's
#: status): a Terminated of the same code, never the one raised, whose traceback holds the
#: frames it passed through, and with them a starting rank's pipe ends.
raised: Terminated | None = None


def _on_sigterm(signum: int, frame: Any) -> None:
    global _fired, _told, raised
    if _fired:
        return  # the teardown the first one started is running: let it finish
    _fired = True
    if not _told:
        _told = True
        sys.stderr.write(
            "spawnkit: SIGTERM: stopping the worker group(s) (SIGTERM to each rank, its "
            "grace_period, then SIGKILL); exiting with 143\n"
        )
    raised = Terminated(128 + signum)  # never raised: no traceback
    raise Terminated(128 + signum)  # never kept here: its traceback holds the frames' pipes


def _on_unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a group runs: see the module's docstring."""
    global _fired
    ours = _fired and isinstance(unraisable.exc_value, Terminated)
    if ours and "atexit" not in str(unraisable.err_msg or ""):
        _fired = False  # nothing is on its way up: the next SIGTERM must raise again
        _send_again()
        return
    (_previous_hook or sys.__unraisablehook__)(unraisable)


def _send_again() -> None:
    """SIGTERM to the main thread from a new thread: it wakes a blocked wait (EINTR) and is
    handled after the finalizer that swallowed the last one has returned (a new thread first
    needs the GIL the main thread holds until then, or until its switch interval)."""
    main = threading.main_thread().ident
    if sys.is_finalizing():
        return  # a thread started now may run on freed interpreter state (CPython gh-108987)
    try:
        if hasattr(signal, "pthread_kill") and main is not None:
            _thread.start_new_thread(signal.pthread_kill, (main, signal.SIGTERM))
        else:
            _thread.start_new_thread(os.kill, (os.getpid(), signal.SIGTERM))
    except RuntimeError:  # no thread can start (the interpreter is shutting down)
        pass


def watching() -> bool:
    """Whether SIGTERM is this module's (``launch._interrupt.held`` defers it too)."""
    return signal.getsignal(signal.SIGTERM) is _on_sigterm


def watch() -> None:
    """A group is starting: take SIGTERM, if the launcher left it at its default."""
    global _previous_hook
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    if watching() and sys.unraisablehook is not _on_unraisable:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _on_unraisable


def unwatch() -> None:
    """No group is left running: give SIGTERM back its default (unless someone took it since),
    and ``sys.unraisablehook`` its own.  A later group's SIGTERM is raised afresh: a launcher
    that caught the ``Terminated`` and started another group had every later SIGTERM ignored."""
    global _fired, _previous_hook, raised
    if threading.current_thread() is not threading.main_thread():
        return
    if watching():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.unraisablehook is _on_unraisable:
        sys.unraisablehook = _previous_hook or sys.__unraisablehook__
    _previous_hook = None
    _fired = False
    raised = None
