"""An ``lru_cache`` that answered before the hooks: its results are the originals'.

``@lru_cache def is_flashinfer_available(): return is_cuda()`` (SGLang's utils), called by a
plugin's register function or as a module was imported, before another plugin's REPLACE of
``is_cuda`` was applied: the cache keeps the original's answer for the whole process, while
``is_cuda()`` answers the hook's and ``status()`` says applied.  No rebind reaches a result,
and clearing a cache could run again what it ran once (an ``lru_cache`` is also Python's
"call once"), so it is named: a cache defined in a module of a target's own package that was
imported before the apply, holding results, whose code names a target the apply hooked for
the first time (by name, or as an attribute of the target's module or class).  One level:
a cached function that reaches the target through another function is not read.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from spawnkit.hooks._stale import FILLED, LRU_CACHE, StaleHolder

__all__ = ["filled_caches"]

#: (key, original, installed, attribute) of a target an apply hooked for the first time
Target = tuple[str, Any, Any, str]


def filled_caches(modules: list[str], targets: list[Target]) -> list[StaleHolder]:
    """``targets``: (key, original, installed, attribute) of each fresh target; ``modules``:
    the modules imported before the apply, in the targets' packages, in import order."""
    out: list[StaleHolder] = []
    for modname in modules:
        namespace = getattr(sys.modules.get(modname), "__dict__", None)
        if type(namespace) is not dict:
            continue
        for name, value in list(namespace.items()):
            if type(value) is not LRU_CACHE:
                continue
            func = getattr(value, "__wrapped__", None)
            if type(func) is not types.FunctionType or func.__globals__ is not namespace:
                continue  # defined elsewhere: read in its own module
            for key in _named(func, namespace, targets):
                if value.cache_info().currsize:
                    out.append(StaleHolder(modname, name, FILLED, key))
    return out


def _named(func: types.FunctionType, namespace: dict[str, Any], targets: list[Target]) -> list[str]:
    """The targets ``func``'s own code calls: a global bound to the target (the original, or
    the hooked object the sweep put there), or to its module or class, with its name."""
    used = func.__code__.co_names
    found: list[str] = []
    for key, original, installed, attr in targets:
        if attr not in used:
            continue
        direct = namespace.get(attr)
        if direct is original or direct is installed:
            found.append(key)
            continue
        for name in used:
            owner = namespace.get(name)
            if isinstance(owner, (type, types.ModuleType)):
                held = vars(owner).get(attr)
                if held is original or held is installed:
                    found.append(key)
                    break
    return found
