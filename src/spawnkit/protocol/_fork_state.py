"""What a worker forked from a warm server must not share with its siblings: numpy's global
random state and torch's default CPU generator, while nothing but their own imports has
seeded them, and every ``random.Random`` the server's plugins, preloads and hook targets
seeded from entropy (and each numpy ``Generator`` ``default_rng()`` made without a seed).

CPython reseeds ``random`` in every forked child; numpy does not reseed its legacy global
``RandomState`` (what ``np.random.rand()`` and friends draw from).  A spawned worker imports
numpy itself, so its state comes from fresh entropy; every worker forked from a server that
imported ``numpy.random`` started from that server's one state, on every rank of every launch:
the same "random" numbers everywhere, with nothing said.  The server keeps the state numpy's
import gave (``watch``); when nothing but draws changed it since (``settle``: no ``seed()``
dropped the ``SeedSequence`` its import made, no ``set_state()`` was called), each forked
worker reseeds from entropy (``reseed``), as a spawned one would have.  A plugin that seeded
it on purpose is repeated by every spawned worker, so its state is kept.

The same holds for a ``random.Random()`` a module creates as it is imported (``_rng =
random.Random()`` for jitter, sampling, a port to try): CPython reseeds only the module's own
generator in a forked child.  While the server bootstraps and preloads, ``Random.seed`` and
``Random.setstate`` note which instances were seeded from entropy; each forked worker seeds
those again.  One seeded with a value, or given a state, is left: a spawned worker repeats it.
The reverse holds for ``random``'s own generator: CPython reseeds it from entropy in every
forked child, so a plugin's ``random.seed(42)`` (every spawned worker repeats it: the same
numbers on every rank, run after run) was undone in each warm worker.  While the server
bootstraps, ``random.seed`` and ``random.setstate`` stand in to note such a call; each forked
worker then gets the generator's state as the server's bootstrap left it.
A numpy ``Generator`` made from entropy while the server bootstraps and preloads (``_rng =
numpy.random.default_rng()`` at import) is shared the same way: ``default_rng`` stands in for
numpy's own meanwhile and notes each one made without a seed; each forked worker gives their
bit generators fresh entropy.  Not covered: a ``Generator`` built by hand around a bit
generator (``Generator(PCG64())``), whose seeding is in C.

torch's default CPU generator is numpy's case again: torch seeds it from entropy as it is
imported, keeps it through a fork, and every warm worker drew the server's ``torch.rand``
sequence (and made the same "random" weights) where spawned ones each draw their own.  The
server notes ``torch.initial_seed()`` as torch's import ends; when it is still that seed at
``settle`` (nothing called ``torch.manual_seed`` meanwhile: draws at load do not count, a
spawned worker's come from its own entropy), each forked worker seeds that generator from
entropy again.  Its CUDA generators are left: they are not seeded from entropy (a fixed
default until ``manual_seed``), and the server has none initialised.
"""

from __future__ import annotations

import random
import sys
import weakref
from typing import Any

from spawnkit.hooks import _on_import

__all__ = ["handed_at", "reseed", "settle", "watch"]

_MTRAND = "numpy.random.mtrand"  # creates the global RandomState when it is imported
_token: int | None = None
_at_import: tuple[Any, ...] | None = None
_seq_at_import: Any = None  # the global's SeedSequence, which every seed() call drops
_state_set = False  # numpy.random.set_state() called while the server bootstraps
_set_state: Any = None  # numpy's own set_state, while ours stands in
_reseed = False
_from_entropy: weakref.WeakSet[random.Random] = weakref.WeakSet()
_noted: tuple[Any, Any] | None = None  # Random's own seed and setstate, while ours stand in
_module_own: tuple[Any, Any] | None = None  # random.seed and random.setstate, while ours stand in
_module_given = False  # random.seed(x) or random.setstate() called while the server bootstraps
_module_state: Any = None  # random's own state at settle, when given: every worker's
_NP_RANDOM = "numpy.random"
_rng_token: int | None = None
_default_rng: Any = None  # numpy's own default_rng, while ours stands in
_generators: list[Any] = []  # made from entropy meanwhile (Generator takes no weak reference)
_noting = False
_TORCH = "torch"
_torch_token: int | None = None
_torch_seed: int | None = None  # torch.initial_seed() as torch's import ended
_torch_reseed = False


def watch() -> None:
    """In the server, before any plugin runs: note the state numpy's import gives, and which
    ``random.Random`` instances are seeded from entropy."""
    global _token, _noted, _torch_token, _module_own
    if _MTRAND not in sys.modules:  # imported before: no state to compare with, left as it is
        _token = _on_import.watch((_MTRAND,), _imported)
    _noted = random.Random.seed, random.Random.setstate
    random.Random.seed = _seed  # type: ignore[method-assign]
    random.Random.setstate = _setstate  # type: ignore[method-assign]
    _module_own = random.seed, random.setstate  # bound to random's own instance at its import
    random.seed, random.setstate = _module_seed, _module_setstate
    _watch_generators()
    if _TORCH not in sys.modules:  # imported before: nothing to compare with, left as it is
        _torch_token = _on_import.watch((_TORCH,), _torch_imported)


def _torch_imported(_name: str) -> None:
    global _torch_seed
    _torch_seed = _torch_initial_seed()


def _torch_initial_seed() -> int | None:
    seed = getattr(sys.modules.get(_TORCH), "initial_seed", None)
    try:
        return int(seed()) if callable(seed) else None
    except Exception:  # a torch whose import failed half-way: nothing to reseed
        return None


def _watch_generators() -> None:
    global _rng_token, _noting
    _noting = True
    if _NP_RANDOM in sys.modules:
        _stand_in(_NP_RANDOM)
    else:  # in place before the importing statement goes on (a module's `_rng = ...` line)
        _rng_token = _on_import.watch((_NP_RANDOM,), _stand_in)


def _stand_in(_name: str) -> None:
    global _default_rng, _set_state
    module = sys.modules.get(_NP_RANDOM)
    own = getattr(module, "default_rng", None)
    if own is None or _default_rng is not None:
        return
    _default_rng = own
    module.default_rng = _noting_default_rng  # type: ignore[union-attr]
    _set_state = getattr(module, "set_state", None)
    if _set_state is not None:
        module.set_state = _noting_set_state  # type: ignore[union-attr]


def _noting_set_state(*args: Any, **kwargs: Any) -> Any:
    global _state_set
    _state_set = _state_set or _noting  # a state given on purpose: every spawned worker's too
    return _set_state(*args, **kwargs)


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


def _module_seed(a: Any = None, version: int = 2) -> None:
    global _module_given
    assert _module_own is not None
    _module_own[0](a, version)
    _module_given = a is not None  # seed() with no value: entropy again, as CPython's reseed


def _module_setstate(state: Any) -> None:
    global _module_given
    assert _module_own is not None
    _module_own[1](state)
    _module_given = True


def _note(rng: random.Random, from_entropy: bool) -> None:
    try:
        if from_entropy:
            _from_entropy.add(rng)
        else:
            _from_entropy.discard(rng)
    except TypeError:  # a subclass with __slots__ and no weak reference: not followed
        pass


def _imported(_name: str) -> None:
    global _at_import, _seq_at_import
    _at_import = _state()
    _seq_at_import = _seed_seq()


def _seed_seq() -> Any:
    """The global's ``SeedSequence`` (the entropy numpy's import drew); ``seed()`` drops it."""
    rand = getattr(sys.modules.get(_MTRAND), "_rand", None)
    return getattr(getattr(rand, "_bit_generator", None), "_seed_seq", None)


def settle() -> None:
    """In the server, before it forks: whether its workers reseed (the state is numpy's own)."""
    global _token, _reseed, _torch_token, _torch_reseed
    if _token is not None:
        _on_import.unwatch(_token)  # the workers do not watch numpy's import
        _token = None
    if _torch_token is not None:
        _on_import.unwatch(_torch_token)
        _torch_token = None
    _torch_reseed = _torch_seed is not None and _torch_initial_seed() == _torch_seed
    _settle_generators()
    now = _state()
    # Numpy's own state: unchanged since its import, or only drawn from (no seed() dropped its
    # SeedSequence, no set_state() given): a spawned worker's draws come from its own entropy.
    drawn = not _state_set and _seq_at_import is not None and _seed_seq() is _seq_at_import
    _reseed = _at_import is not None and now is not None and (_same(now, _at_import) or drawn)
    if _noted is not None:
        # Put Random's own back, unless a plugin wrapped ours meanwhile (it keeps it).
        if random.Random.seed is _seed:
            random.Random.seed = _noted[0]  # type: ignore[method-assign]
        if random.Random.setstate is _setstate:
            random.Random.setstate = _noted[1]  # type: ignore[method-assign]
    inst = getattr(random, "_inst", None)
    if inst is not None:
        _note(inst, False)  # CPython reseeds the module's own in every forked child ...
    _settle_module()


def _settle_module() -> None:
    """... which undoes a ``random.seed(42)`` at load: its state is kept to be put back."""
    global _module_state
    if _module_own is None:
        return
    if random.seed is _module_seed:  # a plugin that wrapped ours keeps it
        random.seed = _module_own[0]
    if random.setstate is _module_setstate:
        random.setstate = _module_own[1]
    _module_state = random.getstate() if _module_given else None


def _settle_generators() -> None:
    global _rng_token, _noting
    _noting = False  # a default_rng bound meanwhile (from numpy.random import ...) stops noting
    if _rng_token is not None:
        _on_import.unwatch(_rng_token)
        _rng_token = None
    module = sys.modules.get(_NP_RANDOM)
    if _default_rng is not None and getattr(module, "default_rng", None) is _noting_default_rng:
        module.default_rng = _default_rng  # type: ignore[union-attr]
    if _set_state is not None and getattr(module, "set_state", None) is _noting_set_state:
        module.set_state = _set_state  # type: ignore[union-attr]


def handed_at(handed: float) -> None:
    """In each forked worker: when it got its request (``child.START_MARKS``)."""
    from spawnkit.protocol.child import note_start  # imported by the server (warm_main)

    note_start("handed", handed)


def reseed() -> None:
    """In each forked worker, before any of its code runs: fresh entropy for numpy's global
    random state and torch's CPU generator where the server's were their imports' own, and for
    the generators noted seeded from entropy.  A spare draws it while it waits for its request
    (``_fork_loop``); each spare becomes one worker, so no two workers share a draw."""
    if _reseed:
        sys.modules[_MTRAND]._rand.seed()
    if _torch_reseed:
        sys.modules[_TORCH].default_generator.seed()  # the CPU generator's fresh entropy
    for rng in list(_from_entropy):
        rng.seed()  # from entropy, as the spawned worker's import would have
    if _module_state is not None:
        random.setstate(_module_state)  # after CPython's reseed: as a spawned worker's plugin
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
