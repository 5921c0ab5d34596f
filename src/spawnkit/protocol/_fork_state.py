"""What a worker forked from a warm server must not share with its siblings: numpy's global
random state, while nothing but numpy's own import has set it.

CPython reseeds ``random`` in every forked child; numpy does not reseed its legacy global
``RandomState`` (what ``np.random.rand()`` and friends draw from).  A spawned worker imports
numpy itself, so its state comes from fresh entropy; every worker forked from a server that
imported ``numpy.random`` started from that server's one state, on every rank of every launch:
the same "random" numbers everywhere, with nothing said.  The server keeps the state numpy's
import gave (``watch``); when nothing changed it since (``settle``), each forked worker reseeds
from entropy (``forked``), as a spawned one would have.  A plugin that seeded it on purpose is
repeated by every spawned worker, so its state is kept.
"""

from __future__ import annotations

import sys
from typing import Any

from spawnkit.hooks import _on_import

__all__ = ["forked", "settle", "watch"]

_MTRAND = "numpy.random.mtrand"  # creates the global RandomState when it is imported
_token: int | None = None
_at_import: tuple[Any, ...] | None = None
_reseed = False


def watch() -> None:
    """In the server, before any plugin runs: note the state numpy's import gives."""
    global _token
    if _MTRAND not in sys.modules:  # imported before: no state to compare with, left as it is
        _token = _on_import.watch((_MTRAND,), _imported)


def _imported(_name: str) -> None:
    global _at_import
    _at_import = _state()


def settle() -> None:
    """In the server, before it forks: whether its workers reseed (the state is numpy's own)."""
    global _token, _reseed
    if _token is not None:
        _on_import.unwatch(_token)  # no finder left on sys.meta_path for the workers
        _token = None
    now = _state()
    _reseed = _at_import is not None and now is not None and _same(now, _at_import)


def forked(handed: float) -> None:
    """In each forked worker, first: when it got its request (``child.START_MARKS``), and fresh
    entropy for numpy's global random state where the server's was numpy's own."""
    from spawnkit.protocol.child import note_start  # imported by the server (warm_main)

    note_start("handed", handed)
    if _reseed:
        sys.modules[_MTRAND]._rand.seed()


def _state() -> tuple[Any, ...] | None:
    """The global state, or None where this numpy keeps it elsewhere (then nothing reseeds:
    the behaviour before, rather than a server refused over an optional repair)."""
    get_state = getattr(getattr(sys.modules.get(_MTRAND), "_rand", None), "get_state", None)
    state = get_state() if callable(get_state) else None
    return state if isinstance(state, tuple) and len(state) == 5 else None


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    # ('MT19937', keys: a uint32 array, pos, has_gauss, cached_gaussian)
    return a[0] == b[0] and a[1].tobytes() == b[1].tobytes() and a[2:] == b[2:]
