"""Telling registries when a watched module's first import has finished (``on_import=True``).

A finder, not a poll: the hook must be in place before the importing statement goes on, so its
``from mod import f`` binds the hooked object. The real loader is put back before the module
runs, and the finder leaves ``sys.meta_path`` with the last watch, so idle imports pay nothing.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__: list[str] = []

Callback = Callable[[str], None]

_lock = threading.Lock()
# module name -> {watch token: callback}; a token is one pending target of one registry
_watched: dict[str, dict[int, Callback]] = {}
_tokens: dict[int, tuple[str, ...]] = {}
_next_token = 0


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
        self._loader.exec_module(module)
        notify(spec.name if spec is not None else module.__name__)


class _Finder:
    """Finds nothing itself: wraps the real spec of a watched module so its import reports back."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _watched:
            return None
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
        return f"<spawnkit on-import hook finder watching {sorted(_watched)}>"


_finder = _Finder()


def watch(names: Iterable[str], callback: Callback) -> int:
    """Call ``callback(name)`` after the import of any of ``names`` finishes; returns a token."""
    global _next_token
    with _lock:
        _next_token += 1
        token = _next_token
        names = tuple(names)
        _tokens[token] = names
        for name in names:
            _watched.setdefault(name, {})[token] = callback
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    return token


def unwatch(token: int) -> None:
    """Stop the watch ``token``; the finder leaves ``sys.meta_path`` when nothing is watched."""
    with _lock:
        for name in _tokens.pop(token, ()):
            callbacks = _watched.get(name)
            if callbacks is not None:
                callbacks.pop(token, None)
                if not callbacks:
                    del _watched[name]
        if not _watched and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


def installed() -> bool:
    return _finder in sys.meta_path


def notify(name: str) -> None:
    """Run the watchers of ``name``; an exception (a strict failure) propagates to the import."""
    with _lock:
        callbacks = list(dict.fromkeys(_watched.get(name, {}).values()))
    for callback in callbacks:
        callback(name)
