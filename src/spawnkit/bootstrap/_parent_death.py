"""A worker ends itself when its launcher dies, however the launcher died.

Primary mechanism, armed first by the bootstrap: the launcher holds the write
end of a pipe per rank and never writes to it; a daemon thread in the worker
blocks reading the other end and gets EOF the moment the launcher's process
is gone (exit, crash or SIGKILL), because the kernel closes its descriptors.
That works on every POSIX system, needs no polling and reacts in
milliseconds.  Only that worker holds its read end: spawn and forkserver
children inherit no other rank's descriptors (the fork-inherited write ends
that kept vLLM's EOF from arriving, vllm#28053, cannot happen here).

``PR_SET_PDEATHSIG`` is an extra on Linux for workers whose interpreter can no
longer run the thread (native code holding the GIL).  Two known traps are
avoided: it fires when the creating *thread* exits, so the launcher asks for
it only when it starts workers from its main thread; and a launcher that died
before ``prctl`` ran would never trigger it, so the parent pid recorded by the
launcher is compared with ``getppid()`` after arming (never with 1, which is a
legitimate parent in containers).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from spawnkit.spec import ProcessSpec

__all__ = ["PARENT_DIED_EXIT_CODE", "PARENT_PID_KEY", "PDEATHSIG_KEY", "RUN_ID_VAR", "arm"]

RUN_ID_VAR = "SPAWNKIT_RUN_ID"
"""Environment variable carrying the group's run id, inherited by a worker's own children,
so that :func:`spawnkit.cleanup` finds orphans."""

PARENT_PID_KEY = "parent_pid"
PDEATHSIG_KEY = "pdeathsig"
PARENT_DIED_EXIT_CODE = 1

_PR_SET_PDEATHSIG = 1
_lock = threading.Lock()
_armed_conn: Any = None


def arm(spec: ProcessSpec) -> None:
    """Start watching for the launcher's death; idempotent, cheap, imports nothing heavy."""
    global _armed_conn
    if spec.run_id:
        os.environ[RUN_ID_VAR] = spec.run_id
    conn = spec.death_conn
    if conn is None:
        return
    with _lock:
        if _armed_conn is conn:
            return
        _armed_conn = conn
    parent_pid = spec.extra.get(PARENT_PID_KEY)
    watcher = threading.Thread(
        target=_watch,
        args=(conn, spec.rank, parent_pid),
        name=f"spawnkit-parent-death-rank{spec.rank}",
        daemon=True,
    )
    watcher.start()
    if spec.extra.get(PDEATHSIG_KEY) and isinstance(parent_pid, int):
        _arm_pdeathsig(parent_pid, spec.rank)


def _watch(conn: Any, rank: int, parent_pid: int | None) -> None:
    """Block until the launcher's end closes; the launcher never writes to this pipe."""
    try:
        while True:
            conn.recv_bytes()
    except (EOFError, OSError):
        pass
    _die(rank, parent_pid, "its death pipe closed")


def _arm_pdeathsig(parent_pid: int, rank: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    if os.getppid() != parent_pid:
        _die(rank, parent_pid, "it was already re-parented before PR_SET_PDEATHSIG was armed")
    try:
        import ctypes  # only where PDEATHSIG is armed

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return  # the death pipe still covers this worker
    # The launcher may have died between the check above and prctl(): then the signal
    # will never come, so look again now that it is armed.
    if os.getppid() != parent_pid:
        _die(rank, parent_pid, "it was re-parented while PR_SET_PDEATHSIG was being armed")


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
