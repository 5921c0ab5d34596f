"""A warm worker's word that its launcher has its pid, read just before its target.

The server hands a worker its request (a spare) or forks it before it writes the pid to the
launcher.  Killed in between (the OOM killer, or the launcher's own kill of a stuck server),
it left a worker running that its launcher had been told failed to start: a pool's
replacement worker waited for tasks forever, holding the launcher's stdout and its resource
tracker (a CI run hung on it).  So the server writes one byte on the worker's known pipe once
the pid is in the launcher's pipe, which the launcher reads even if the server dies next
(``_fork_loop._reply``), and closes its end; the worker reads it where its start is done
(``child.report_pages``) and exits at EOF.  The byte comes microseconds after the pid and the
worker asks after its bootstrap: no start waits for it.  (Written by the launcher after it
read the pid, a tenth of ``warm_split``'s starts waited 0.5 to 6 ms for the launcher to be
scheduled.)
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["expect", "target_next"]

#: A worker whose launcher never learned its pid: nobody waits for this status.
_NOT_KNOWN_EXIT = 1

#: (this worker's pid, its known pipe) until :func:`target_next` read it.
_known: tuple[int, int] | None = None


def expect(fd: int) -> None:
    """In a warm worker, at its request: ``fd`` is its known pipe's read end."""
    global _known
    _known = (os.getpid(), fd)


def target_next() -> None:
    """Just before a warm worker's target (an entry, a context child's target): it runs only
    if its launcher has its pid; else it exits here, saying so on stderr."""
    global _known
    known, _known = _known, None
    if known is None or known[0] != os.getpid():  # a process the worker forked: not its own
        return
    if _told(known[1]):
        return
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(_NOT_KNOWN_EXIT)  # no launcher listens, and none of its code may run


def _told(fd: int) -> bool:
    """Whether the server wrote its byte on ``fd``; blocks only until the server has answered
    the launcher, or died."""
    try:
        word = os.read(fd, 1)
    except OSError:  # closed by the worker's own code meanwhile: nothing to ask
        return True
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    if word:
        return True
    with contextlib.suppress(OSError):
        os.write(
            2,
            f"spawnkit: warm worker pid {os.getpid()} exits before its target: its launcher "
            "never learned its pid (its warm-start server ended, or was stopped, between "
            "starting it and telling the launcher), so no launcher could wait for, join or "
            "end it.\n".encode(),
        )
    return False
