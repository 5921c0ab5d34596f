"""A process the warm-start server started while it bootstrapped and left running: refused.

A plugin or preload that starts a helper as it loads (a metrics sidecar, a profiler attached
to its own pid, a license daemon) gives every spawned worker a helper of its own.  Started in
the warm server, there is one, the server's: no forked worker has it (nor can wait for it),
and one attached to the server's pid watches a process that runs no rank.  Which step started
each is noted by standing in for ``subprocess.Popen`` while the server bootstraps; which are
still running is read from ``/proc`` afterwards (a helper that ran and exited, as
``subprocess.run`` waits for, is no one's concern).  The hooks apply inside the block, and
with them ``bootstrap/_plain_children``'s lasting stand-in for ``Popen.__init__``, which calls
through its ``__wrapped__``: the block's end points that past its own.  Where ``/proc`` cannot
tell, nothing is refused.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from spawnkit import _steps
from spawnkit.protocol import failure

__all__ = ["Children"]


def _children() -> set[int]:
    """This process's children, from every thread's ``children`` list; empty where unlisted."""
    found: set[int] = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                found.update(int(pid) for pid in f.read().split())
    except (OSError, ValueError):
        return set()
    return found


def _running(pid: int) -> str | None:
    """The command line of a child still running; None once it exited (a zombie) or left."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[0]
        if state in ("Z", "X"):
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except (OSError, IndexError):
        return None
    return " ".join(os.fsdecode(a) for a in argv if a)[:200]


class Children:
    """The processes started during the block, and the step that started each."""

    def __enter__(self) -> Children:
        self.before = _children()
        self.origins: dict[int, str] = {}
        self._saved = start = subprocess.Popen.__init__
        origins = self.origins

        def noted_init(popen: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
            start(popen, *args, **kwargs)
            origins[popen.pid] = _steps.current_step()

        self._ours = noted_init
        subprocess.Popen.__init__ = noted_init  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        init: Any = subprocess.Popen.__init__
        if init is self._ours:  # a plugin's wrapper of ours is kept
            subprocess.Popen.__init__ = self._saved  # type: ignore[method-assign]
        elif getattr(init, "_spawnkit_python_children", False) and init.__wrapped__ is self._ours:
            init.__wrapped__ = self._saved  # armed as the hooks applied: it stays, past ours

    def check(self) -> None:
        for pid in sorted(_children() - self.before):
            command = _running(pid)
            if command is None:
                continue
            raise failure.fork_refusal(
                f"process {pid} ({command!r})",
                *_steps.blame(self.origins.get(pid, "")),
                "started",
                "running",
                "A forked worker would not have it (each spawned worker starts its own) nor "
                "could wait for it, and one watching the pid it was started from watches the "
                "server, which runs no rank",
                "Start it at hook call time or in the entry (plugin callbacks run once per "
                "server), or wait for it before the plugin returns",
            )
