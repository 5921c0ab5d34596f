"""A ``spawn`` multiprocessing context whose children arm the import guard first.

A stock spawned child runs ``spawn_main`` from its command line, and
``spawn_main`` re-executes the launching script and unpickles the Process
object (and with it the target's arguments) before any of our code runs.
Those are exactly the imports the guard must see, so the child's command line
here arms the guard and only then hands the same arguments to
``multiprocessing.spawn.spawn_main``.  Everything else (preparation data,
pipes, the resource tracker, sentinels) is the standard library's own.

POSIX only.  The launcher extends this module for forkserver and for the
``multiprocess`` package.
"""

from __future__ import annotations

import io
import os
from multiprocessing import context, popen_spawn_posix, process, reduction, spawn, util
from typing import Any

__all__ = ["GuardedSpawnContext", "GuardedSpawnProcess", "child_main", "get_context"]

#: What the child runs: arm the guard (stdlib-only import), then the standard spawn main.
_CHILD_PROG = (
    "from spawnkit.bootstrap import guard as _g; _g.arm(); "
    "from spawnkit.bootstrap._spawn import child_main; child_main({kwargs})"
)


def child_command_line(**kwds: Any) -> list[str]:
    """The stdlib's spawn command line with its ``-c`` program replaced by ours."""
    cmd = spawn.get_command_line(**kwds)
    if "-c" not in cmd:  # frozen executables have no -c; fall back to the stock path
        return cmd
    at = cmd.index("-c") + 1
    cmd[at] = _CHILD_PROG.format(kwargs=", ".join(f"{k}={v!r}" for k, v in kwds.items()))
    return cmd


def child_main(**kwds: Any) -> None:
    """Entry of a guarded child: the guard is armed (again, idempotently), then spawn runs."""
    from spawnkit.bootstrap import guard

    guard.arm()
    spawn.spawn_main(**kwds)


class _GuardedSpawnPopen(popen_spawn_posix.Popen):
    """``popen_spawn_posix.Popen`` with our command line; the rest mirrors the stdlib."""

    method = "spawn"
    _fds: list[int]

    def _launch(self, process_obj: Any) -> None:
        from multiprocessing import resource_tracker

        tracker_fd: Any = resource_tracker.getfd()
        self._fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)

        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            cmd = child_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            self._fds.extend([child_r, child_w])
            exe: Any = spawn.get_executable()
            self.pid = util.spawnv_passfds(exe, cmd, self._fds)
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as f:
                f.write(buf.getbuffer())
        finally:
            to_close = [fd for fd in (parent_r, parent_w) if fd is not None]
            close_fds: Any = util.close_fds  # type: ignore[attr-defined]
            self.finalizer = util.Finalize(self, close_fds, to_close)
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


class GuardedSpawnProcess(process.BaseProcess):
    """``multiprocessing`` Process started through :class:`_GuardedSpawnPopen`."""

    _start_method = "spawn"

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _GuardedSpawnPopen(process_obj)

    @staticmethod
    def _after_fork() -> None:
        return None


class GuardedSpawnContext(context.SpawnContext):
    """``multiprocessing.get_context("spawn")`` whose ``Process`` arms the guard in the child."""

    _name = "spawn"
    Process = GuardedSpawnProcess  # type: ignore[assignment]


_CONTEXTS: dict[str, GuardedSpawnContext] = {}


def get_context(start_method: str = "spawn") -> GuardedSpawnContext:
    """The guarded context for ``start_method``; only ``spawn`` so far."""
    if start_method != "spawn":
        raise ValueError(
            f"spawnkit's guarded context supports start_method='spawn' here, not "
            f"{start_method!r}; fork would inherit the parent's imports and defeat the guard"
        )
    ctx = _CONTEXTS.get(start_method)
    if ctx is None:
        ctx = _CONTEXTS[start_method] = GuardedSpawnContext()
    return ctx
