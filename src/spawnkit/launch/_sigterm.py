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
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

__all__ = ["Terminated", "unwatch", "watch", "watching"]


class Terminated(SystemExit):
    """SIGTERM reached the launcher while a worker group ran; leaving with exit code 143."""


_fired = False
#: The ``Terminated`` raised, which the groups torn down at exit are stopped by (their trace).
raised: Terminated | None = None


def _on_sigterm(signum: int, frame: Any) -> None:
    global _fired, raised
    if _fired:
        return  # the teardown the first one started is running: let it finish
    _fired = True
    sys.stderr.write(
        "spawnkit: SIGTERM: stopping the worker group(s) (SIGTERM to each rank, its "
        "grace_period, then SIGKILL); exiting with 143\n"
    )
    raised = Terminated(128 + signum)
    raise raised


def watching() -> bool:
    """Whether SIGTERM is this module's (``launch._interrupt.held`` defers it too)."""
    return signal.getsignal(signal.SIGTERM) is _on_sigterm


def watch() -> None:
    """A group is starting: take SIGTERM, if the launcher left it at its default."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def unwatch() -> None:
    """No group is left running: give SIGTERM back its default (unless someone took it since)."""
    if threading.current_thread() is threading.main_thread() and watching():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
