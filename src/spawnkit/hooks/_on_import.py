"""Telling registries when a watched module has run: its first import (``on_import=True``),
or a patched module running again (``importlib.reload()``, or an import after it left
``sys.modules``), whose new objects carry no hooks until the registry patches them again.

A finder, not a poll: the hook must be in place before the importing statement goes on, so its
``from mod import f`` binds the hooked object. The real loader is put back before the module
runs.  The finder leaves ``sys.meta_path`` when nothing is watched; while a module is patched
it stays, and an import it does not watch costs it one dict lookup.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from spawnkit._compat import TYPE_CHECKING
from spawnkit.hooks._slots import atexit_kept

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

Callback = Callable[[str], None]

_lock = threading.Lock()
# module name -> {watch token: callback}; a token is one pending target of one registry
_watched: dict[str, dict[int, Callback]] = {}
_tokens: dict[int, tuple[str, ...]] = {}
_next_token = 0
_no_hook: set[int] = set()  # tokens that await no hook target (a stand-in of spawnkit's own)
# module name -> {id(registry): its callback, weakly}: the modules each registry has patched.
# A registry dropped without unapply() leaves its patches, and no callback to repeat them.
_patched: dict[str, dict[int, weakref.WeakMethod[Callback]]] = {}


class _Loader:
    """The real loader, plus a call to the watchers once the module has run."""

    def __init__(self, loader: Any, finder: _Finder) -> None:
        self._loader = loader
        self._finder = finder

    def __getattr__(self, name: str) -> Any:  # get_data, is_package, resource readers...
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        module.__loader__ = self._loader
        if spec is not None:
            spec.loader = self._loader
        with atexit_kept:  # its `@atexit.register` stays rebindable by the apply that follows
            self._loader.exec_module(module)
        notify(spec.name if spec is not None else module.__name__)


class _Finder:
    """Finds nothing itself: wraps the real spec of a watched module so its import reports back."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _watched and fullname not in _patched:
            return None  # find_spec is asked only for modules not in sys.modules (or reloaded)
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, self)
        return spec  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return (
            f"<spawnkit on-import hook finder watching {sorted(_watched)}, "
            f"following the patched {sorted(_patched)}>"
        )


_finder = _Finder()


def watch(names: Iterable[str], callback: Callback, *, hook: bool = True) -> int:
    """Call ``callback(name)`` after the import of any of ``names`` finishes; returns a token.
    ``hook=False``: it awaits no hook target, so :func:`waiting` leaves it out (the watch for
    ``multiprocess`` a launcher keeps until something imports it is no pending hook)."""
    global _next_token
    with _lock:
        _next_token += 1
        token = _next_token
        names = tuple(names)
        _tokens[token] = names
        if not hook:
            _no_hook.add(token)
        for name in names:
            _watched.setdefault(name, {})[token] = callback
        _place()
    return token


def follow(owner: object, names: Iterable[str], callback: Callback) -> None:
    """Call ``callback(name)`` after any of ``names`` runs again; ``names`` replaces what
    ``owner`` (a registry, by identity) followed before, so an empty one stops it."""
    key, names = id(owner), set(names)
    with _lock:
        for name in [n for n, owners in _patched.items() if key in owners and n not in names]:
            del _patched[name][key]
            if not _patched[name]:
                del _patched[name]
        for name in names:
            _patched.setdefault(name, {})[key] = weakref.WeakMethod(callback)
        _place()


def _place() -> None:
    """The finder on ``sys.meta_path`` exactly while something is watched (under ``_lock``)."""
    wanted = bool(_watched or _patched)
    if wanted and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    elif not wanted and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def unwatch(token: int) -> None:
    """Stop the watch ``token``; the finder leaves ``sys.meta_path`` when nothing is watched."""
    with _lock:
        _no_hook.discard(token)
        for name in _tokens.pop(token, ()):
            callbacks = _watched.get(name)
            if callbacks is not None:
                callbacks.pop(token, None)
                if not callbacks:
                    del _watched[name]
        _place()


def installed() -> bool:
    return _finder in sys.meta_path


def waiting() -> bool:
    """Whether some first import is awaited (``on_import`` targets not applied yet)."""
    with _lock:
        return any(t not in _no_hook for callbacks in _watched.values() for t in callbacks)


def followed() -> list[str]:
    """The patched modules whose next run is followed, sorted."""
    with _lock:
        return sorted(_patched)


def notify(name: str) -> None:
    """Run the watchers of ``name``; an exception (a strict failure) propagates to the import."""
    with _lock:
        callbacks = list(dict.fromkeys(_watched.get(name, {}).values()))
        refs = list(_patched.get(name, {}).values())
    for ref in refs:
        method = ref()
        if method is not None and method not in callbacks:
            callbacks.append(method)
    for callback in callbacks:
        callback(name)
