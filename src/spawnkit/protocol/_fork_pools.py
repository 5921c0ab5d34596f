"""A native thread pool that does not survive a fork, started while the warm server bootstrapped.

GNU OpenMP (libgomp; torch's CPU wheels bundle it for their intra-op parallelism) starts its
pool at the first parallel region and has no fork handler: a forked child believes the pool's
threads are there and waits for them at its first parallel region, forever.  A plugin or
preload that runs one parallel operation as it loads (a warm-up, a capability probe on a large
tensor) would leave every warm worker hanging at its first; a spawned worker starts its own
pool.  The Python-thread check cannot see these threads.  Other pools reset themselves in a
forked child (OpenBLAS, which numpy's import starts; LLVM's and Intel's OpenMP) and are left
alone.

A pool thread is told by where it is: while it waits (or spins) its program counter, the last
field of ``/proc/self/task/<tid>/syscall``, lies in libgomp's code.  The threads that appeared
since the last look are examined after each plugin and preload, so the refusal names who
started the pool; where ``/proc`` cannot tell, nothing is refused.
"""

from __future__ import annotations

import os
import threading
import time

from spawnkit.protocol import failure

__all__ = ["Pools"]

#: How long a pool thread may still be spinning (its state "running", no counter to read)
#: after the parallel region that started it: GNU OpenMP spins a while before it sleeps.
_SETTLE_S = 0.2


def _tids() -> set[int]:
    try:
        return {int(name) for name in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()


def _gomp_code() -> list[tuple[int, int]]:
    """The address ranges of libgomp's executable code in this process (none: not loaded)."""
    ranges = []
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                fields = line.split()
                gomp = len(fields) > 5 and os.path.basename(fields[5]).startswith("libgomp")
                if gomp and "x" in fields[1]:  # its code, not its data
                    low, high = fields[0].split("-")
                    ranges.append((int(low, 16), int(high, 16)))
    except OSError:
        return []
    return ranges


def _counter(tid: int) -> int | None:
    """The program counter of a waiting thread; None while it runs (or when it is gone)."""
    try:
        with open(f"/proc/self/task/{tid}/syscall", encoding="ascii") as f:
            fields = f.read().split()
    except OSError:
        return None
    return int(fields[-1], 16) if len(fields) >= 3 else None


def _gomp_threads(tids: set[int]) -> set[int]:
    code = _gomp_code()
    if not code:
        return set()
    found: set[int] = set()
    waiting = set(tids)
    deadline = time.monotonic() + _SETTLE_S
    while waiting:
        for tid in list(waiting):
            pc = _counter(tid)
            if pc is None:
                continue  # running: look again, until the deadline
            waiting.discard(tid)
            if any(low <= pc < high for low, high in code):
                found.add(tid)
        if not waiting or time.monotonic() > deadline:
            return found
        time.sleep(0.005)
    return found


class Pools:
    """The native threads the server has, looked at after each step that may start a pool."""

    def __init__(self) -> None:
        self.known = _tids()

    def after(self, culprit: str, stage: str) -> None:
        """Refuse if ``culprit`` (a plugin, a preload; "" unknown) started GNU OpenMP's pool."""
        tids = _tids()
        new, self.known = tids - self.known - {threading.get_native_id()}, tids
        pool = _gomp_threads(new) if new else set()
        if not pool:
            return
        raise failure.fork_refusal(
            f"GNU OpenMP's thread pool ({len(pool)} thread(s) in libgomp: a parallel torch or "
            "numpy operation)",
            culprit,
            stage,
            "started",
            "running",
            "GNU OpenMP does not survive a fork: every forked worker would wait forever at its "
            "first parallel operation",
            "Run such operations at hook call time or in the entry (plugin callbacks and "
            "preloads run once per server)",
        )
