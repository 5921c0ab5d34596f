"""Waiting, bounded, for the machine to go quiet before the next benchmark starts.

A benchmark that starts while the previous one's processes still run (a Ray
cluster shutting down, a warm server's spares exiting) measures them too:
right after ``spawn_latency``'s Ray rows, ``hook_overhead``'s fresh
interpreters took twice their solo time (``apply_hooks`` 17.5 ms against 8.3).
Each benchmark's ratios compare runs taken back to back, so they hold
on a steadily busy machine; what skews them is load that changes while they
run.  So ``spawnkit bench`` waits, at most ``max_s``, for two quiet samples in
a row and says how long it waited, or that it gave up and on what load.
"""

from __future__ import annotations

import time

from spawnkit._namedtuple import NamedTuple

__all__ = ["Settled", "settle"]

#: Busy share of all CPUs that still counts as quiet: one busy core of two is 50 %.
QUIET_PERCENT = 20.0
#: Seconds per CPU sample: long enough to average out a scheduler tick, short enough to
#: cost little when the machine is already quiet (two samples: half a second).
SAMPLE_S = 0.25


class Settled(NamedTuple):
    """How the wait ended: ``quiet`` or not after ``waited_s``, at ``cpu_percent`` busy."""

    quiet: bool
    waited_s: float
    cpu_percent: float

    def describe(self) -> str:
        if self.quiet:
            return f"machine quiet after {self.waited_s:.1f} s (cpu {self.cpu_percent:.0f}%)"
        return (
            f"machine still busy after {self.waited_s:.1f} s (cpu {self.cpu_percent:.0f}%): "
            "the figures below were taken under that load"
        )


def settle(
    max_s: float, quiet_percent: float = QUIET_PERCENT, sample_s: float = SAMPLE_S
) -> Settled:
    """Sample system-wide CPU use until two samples in a row are at most ``quiet_percent``.

    Never waits longer than ``max_s`` plus one sample.
    """
    import psutil

    start = time.monotonic()
    quiet_in_a_row = 0
    while True:
        busy = float(psutil.cpu_percent(interval=sample_s))
        quiet_in_a_row = quiet_in_a_row + 1 if busy <= quiet_percent else 0
        waited = time.monotonic() - start
        if quiet_in_a_row >= 2:
            return Settled(True, waited, busy)
        if waited >= max_s:
            return Settled(False, waited, busy)
