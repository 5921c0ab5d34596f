"""What a worker forked from a warm server must not share with its siblings: numpy's global
random state, while nothing but numpy's own import has set it, and every ``random.Random``
the server's plugins, preloads and hook targets seeded from entropy (and each numpy
``Generator`` ``default_rng()`` made without a seed).

CPython reseeds ``random`` in every forked child; numpy does not reseed its legacy global
``RandomState`` (what ``np.random.rand()`` and friends draw from).  A spawned worker imports
numpy itself, so its state comes from fresh entropy; every worker forked from a server that
imported ``numpy.random`` started from that server's one state, on every rank of every launch:
the same "random" numbers everywhere, with nothing said.  The server keeps the state numpy's
import gave (``watch``); when nothing changed it since (``settle``), each forked worker reseeds
from entropy (``forked``), as a spawned one would have.  A plugin that seeded it on purpose is
repeated by every spawned worker, so its state is kept.

The same holds for a ``random.Random()`` a module creates as it is imported (``_rng =
random.Random()`` for jitter, sampling, a port to try): CPython reseeds only the module's own
generator in a forked child.  While the server bootstraps and preloads, ``Random.seed`` and
``Random.setstate`` note which instances were seeded from entropy; each forked worker seeds
those again.  One seeded with a value, or given a state, is left: a spawned worker repeats it.
A numpy ``Generator`` made from entropy while the server bootstraps and preloads (``_rng =
numpy.random.default_rng()`` at import) is shared the same way: ``default_rng`` stands in for
numpy's own meanwhile and notes each one made without a seed; each forked worker gives their
bit generators fresh entropy.  Not covered: a ``Generator`` built by hand around a bit
generator (``Generator(PCG64())``), whose seeding is in C.
"""

from __future__ import annotations

import random
import sys
import weakref
from typing import Any

from spawnkit.hooks import _on_import

__all__ = ["forked", "settle", "watch"]

_MTRAND = "numpy.random.mtrand"  # creates the global RandomState when it is imported
_token: int | None = None
_at_import: tuple[Any, ...] | None = None
_reseed = False
_from_entropy: weakref.WeakSet[random.Random] = weakref.WeakSet()
_noted: tuple[Any, Any] | None = None  # Random's own seed and setstate, while ours stand in
_NP_RANDOM = "numpy.random"
_rng_token: int | None = None
_default_rng: Any = None  # numpy's own default_rng, while ours stands in
_generators: list[Any] = []  # made from entropy meanwhile (Generator takes no weak reference)
_noting = False


def watch() -> None:
    """In the server, before any plugin runs: note the state numpy's import gives, and which
    ``random.Random`` instances are seeded from entropy."""
    global _token, _noted
    if _MTRAND not in sys.modules:  # imported before: no state to compare with, left as it is
        _token = _on_import.watch((_MTRAND,), _imported)
    _noted = random.Random.seed, random.Random.setstate
    random.Random.seed = _seed  # type: ignore[method-assign]
    random.Random.setstate = _setstate  # type: ignore[method-assign]
    _watch_generators()


def _watch_generators() -> None:
    global _rng_token, _noting
    _noting = True
    if _NP_RANDOM in sys.modules:
        _stand_in(_NP_RANDOM)
    else:  # in place before the importing statement goes on (a module's `_rng = ...` line)
        _rng_token = _on_import.watch((_NP_RANDOM,), _stand_in)


def _stand_in(_name: str) -> None:
    global _default_rng
    module = sys.modules.get(_NP_RANDOM)
    own = getattr(module, "default_rng", None)
    if own is None or _default_rng is not None:
        return
    _default_rng = own
    module.default_rng = _noting_default_rng  # type: ignore[union-attr]


def _noting_default_rng(*args: Any, **kwargs: Any) -> Any:
    generator = _default_rng(*args, **kwargs)
    seed = args[0] if args else kwargs.get("seed")
    if seed is None and _noting:  # from entropy, while the server bootstraps
        _generators.append(generator)
    return generator


def _seed(self: random.Random, a: Any = None, version: int = 2) -> None:
    assert _noted is not None
    _noted[0](self, a, version)
    _note(self, a is None)


def _setstate(self: random.Random, state: Any) -> None:
    assert _noted is not None
    _noted[1](self, state)
    _note(self, False)


def _note(rng: random.Random, from_entropy: bool) -> None:
    try:
        if from_entropy:
            _from_entropy.add(rng)
        else:
            _from_entropy.discard(rng)
    except TypeError:  # a subclass with __slots__ and no weak reference: not followed
        pass


def _imported(_name: str) -> None:
    global _at_import
    _at_import = _state()


def settle() -> None:
    """In the server, before it forks: whether its workers reseed (the state is numpy's own)."""
    global _token, _reseed
    if _token is not None:
        _on_import.unwatch(_token)  # the workers do not watch numpy's import
        _token = None
    _settle_generators()
    now = _state()
    _reseed = _at_import is not None and now is not None and _same(now, _at_import)
    if _noted is not None:
        # Put Random's own back, unless a plugin wrapped ours meanwhile (it keeps it).
        if random.Random.seed is _seed:
            random.Random.seed = _noted[0]  # type: ignore[method-assign]
        if random.Random.setstate is _setstate:
            random.Random.setstate = _noted[1]  # type: ignore[method-assign]
    inst = getattr(random, "_inst", None)
    if inst is not None:
        _note(inst, False)  # CPython reseeds the module's own in every forked child


def _settle_generators() -> None:
    global _rng_token, _noting
    _noting = False  # a default_rng bound meanwhile (from numpy.random import ...) stops noting
    if _rng_token is not None:
        _on_import.unwatch(_rng_token)
        _rng_token = None
    module = sys.modules.get(_NP_RANDOM)
    if _default_rng is not None and getattr(module, "default_rng", None) is _noting_default_rng:
        module.default_rng = _default_rng  # type: ignore[union-attr]


def forked(handed: float) -> None:
    """In each forked worker, first: when it got its request (``child.START_MARKS``), and fresh
    entropy for numpy's global random state where the server's was numpy's own."""
    from spawnkit.protocol.child import note_start  # imported by the server (warm_main)

    note_start("handed", handed)
    if _reseed:
        sys.modules[_MTRAND]._rand.seed()
    for rng in list(_from_entropy):
        rng.seed()  # from entropy, as the spawned worker's import would have
    for generator in _generators:
        bits = generator.bit_generator
        try:
            bits.state = type(bits)().state  # a new bit generator of its kind: fresh entropy
        except Exception:  # one that needs arguments: left as it is, as before
            pass


def _state() -> tuple[Any, ...] | None:
    """The global state, or None where this numpy keeps it elsewhere (then nothing reseeds:
    the behaviour before, rather than a server refused over an optional repair)."""
    get_state = getattr(getattr(sys.modules.get(_MTRAND), "_rand", None), "get_state", None)
    state = get_state() if callable(get_state) else None
    return state if isinstance(state, tuple) and len(state) == 5 else None


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    # ('MT19937', keys: a uint32 array, pos, has_gauss, cached_gaussian)
    return a[0] == b[0] and a[1].tobytes() == b[1].tobytes() and a[2:] == b[2:]
