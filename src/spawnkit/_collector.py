"""The cyclic collector's automatic runs paused while a process builds what it keeps for life.

A worker's stages and a warm server's preloads import what the process then holds until it
exits, and the heap is frozen afterwards (``gc.freeze()``): a collection meanwhile only walks
objects about to be exempt (``import torch`` alone runs 328 young, 29 middle and 2 full
collections, ~80 ms of a ~1 s import).  CPython's ``gc`` documentation suggests the same
pause-then-freeze for a process that forks workers.

Paused with a zero first threshold ("setting threshold0 to zero disables collection"), not
``gc.disable()``: code running meanwhile that turns the collector off, or sets thresholds
of its own, keeps its setting.  An explicit ``gc.collect()`` still collects.
"""

from __future__ import annotations

import gc

__all__ = ["pause", "resume"]

Thresholds = tuple[int, int, int]


def pause() -> Thresholds | None:
    """Stop automatic collections; the thresholds to resume with (None: none were running)."""
    before: Thresholds = gc.get_threshold()
    if before[0] == 0:
        return None
    gc.set_threshold(0, *before[1:])
    return before


def resume(before: Thresholds | None) -> None:
    """Put ``before`` back, unless the code that ran meanwhile set thresholds of its own."""
    if before is not None and gc.get_threshold()[0] == 0:
        gc.set_threshold(*before)
