"""Finding and rebinding stale ``from X import Y`` bindings across ``sys.modules``.

A module that ran ``from pkg.mod import f`` before the hooks were applied holds
the original ``f`` in its own globals; patching ``pkg.mod.f`` alone leaves
every call through that name unhooked (the hook is "applied" but never runs).
One sweep per apply rebinds all of them at once: for each module, a C-level
set intersection of the ids of its globals with the ids of the originals
finds the (rare) modules that need a closer look, so the cost is one pass
over module dictionaries, not one per target.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__: list[str] = []


class Rebind(NamedTuple):
    """Replace ``old`` by ``new`` in every module except ``excluded`` (the hook modules)."""

    old: Any
    new: Any
    excluded: frozenset[str]
    key: str  # the target this rebind belongs to


#: Never rebound: ``builtins`` holds every builtin function, and hooking a module's
#: alias of one (``length = len``) must not hook the whole interpreter's ``len``.
NEVER_REBOUND = frozenset({"builtins", "sys"})


def _module_dicts() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, module in list(sys.modules.items()):
        if name in NEVER_REBOUND:
            continue
        try:
            namespace = module.__dict__
        except Exception:  # a lazy or broken module object: nothing we may touch
            continue
        if type(namespace) is dict:
            yield name, namespace


def find_holders(
    rebinds: dict[int, Rebind],
    skip: frozenset[tuple[str, str]] = frozenset(),
    clean_modules: frozenset[str] = frozenset(),
) -> list[tuple[str, dict[str, Any], str, Rebind]]:
    """Every (module, globals, name, rebind) whose global ``is`` one of the ``old`` objects.

    ``skip`` holds (module, name) pairs not to report: the targets' own
    attributes, which the registry patches directly.  ``clean_modules`` are
    modules the caller vouches for: the bootstrap passes those that finished
    importing before any target module was imported (the import guard checked
    that), which cannot hold an original; with torch loaded that is most of
    ``sys.modules``, and skipping them is most of the sweep's cost.
    """
    if not rebinds:
        return []
    wanted = rebinds.keys()
    found: list[tuple[str, dict[str, Any], str, Rebind]] = []
    for modname, namespace in _module_dicts():
        if modname in clean_modules:
            continue
        try:
            if wanted.isdisjoint(map(id, namespace.values())):
                continue
            items = list(namespace.items())
        except RuntimeError:  # another thread changed the dict mid-scan: look again
            items = list(dict(namespace).items())
        for name, value in items:
            rebind = rebinds.get(id(value))
            if rebind is None or value is not rebind.old:
                continue
            if modname in rebind.excluded or (modname, name) in skip:
                continue
            found.append((modname, namespace, name, rebind))
    return found
