"""A hook target module imported a second time under another name: the hooks patch one copy.

A folder on ``sys.path`` twice over (the package's own folder beside its parent's: a
``sys.path.insert(0, os.path.dirname(__file__))`` in an engine, a test's ``rootdir``, ``src/``
as a package) makes one file two modules, ``eng.ops`` and ``ops`` (or ``src.eng.ops``), each
with functions of its own.  The hooks patch the target's module; code that imported the
other name calls its own objects, which no hook and no sweep reaches (the sweep follows
the original object, and the twin's is another).  Found by name, cheaply: a twin ends in the
same last component, and only names that do have their files compared.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from itertools import compress, repeat
from operator import itemgetter, methodcaller

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["fix", "reason", "twins", "twins_of"]

_last = itemgetter(2)
_split = methodcaller("rpartition", ".")
_more_than_one = (1).__lt__
#: per sys.modules state: (mark, names by a last component two or more share (None until a
#: name outside the found ones is asked for), found twins)
_seen: tuple[Any, dict[str, list[str]] | None, dict[str, list[str]]] = (None, None, {})


def _state() -> tuple[Any, dict[str, list[str]] | None, dict[str, list[str]]]:
    global _seen
    mark = (len(sys.modules), next(reversed(sys.modules), None))  # O(1): no copy of the names
    if _seen[0] != mark:
        _seen = (mark, None, {})
    return _seen


def twins(module_name: str) -> list[str]:
    """The other names in ``sys.modules`` whose module is ``module_name``'s file (a worker
    asks for each target module twice: kept per state of ``sys.modules``)."""
    global _seen
    mark, shared, found = _state()
    names = found.get(module_name)
    if names is None:
        if shared is None:
            shared = _shared(list(sys.modules))
            _seen = (mark, shared, found)
        names = found[module_name] = _scan(module_name, shared)
    return list(names) if names else []


def twins_of(modules: set[str]) -> dict[str, list[str]]:
    """:func:`twins` of each of ``modules`` that has any.

    Once per worker, over its hundred targets' modules: the names ending as one of them
    does, by C-level passes over ``sys.modules`` (the whole table by last component, which
    ``twins`` builds, cost a worker's resolve stage 0.1 ms), each module then scanned as
    ``twins`` scans it."""
    _mark, shared, found = _state()
    asked = [m for m in modules if m not in found]
    if asked and shared is None:
        shared = _ending_as(asked)
    for module in asked:
        names = shared.get(module.rpartition(".")[2]) if shared else None
        # no other name ends as it does (the usual case): no twin, and nothing to read
        found[module] = [] if not names or names == [module] else _scan(module, shared or {})
    return {module: list(found[module]) for module in modules if found[module]}


def _ending_as(modules: list[str]) -> dict[str, list[str]]:
    """The names in ``sys.modules`` by last component, for the last components of
    ``modules`` only: all a scan of those reads (a name alone in ending so is no twin).
    One C-level ``endswith`` per name, called unbound (a ``methodcaller`` looked the method up
    on each name: a third of the pass): the table's other names are never split."""
    wanted = {module.rpartition(".")[2] for module in modules}
    names = list(sys.modules)
    endings = repeat(tuple("." + w for w in wanted))
    found = list(compress(names, map(str.endswith, names, endings)))
    found += [last for last in wanted if last in sys.modules]  # a top-level name
    shared: dict[str, list[str]] = {}
    for name in found:
        shared.setdefault(name.rpartition(".")[2], []).append(name)
    return shared


def _shared(names: list[str]) -> dict[str, list[str]]:
    """``names`` by last component, for the components two or more end in (a twin ends as
    its module does): C-level passes, then a loop over those few."""
    lasts = list(map(_last, map(_split, names)))
    counts = Counter(lasts)
    shared: dict[str, list[str]] = {}
    for last, name in compress(
        zip(lasts, names, strict=True), map(_more_than_one, map(counts.__getitem__, lasts))
    ):
        shared.setdefault(last, []).append(name)
    return shared


def _scan(module_name: str, shared: dict[str, list[str]]) -> list[str]:
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return []
    out = []
    ours: Any = None  # the file's identity, read at the first candidate that needs it
    for name in shared.get(module_name.rpartition(".")[2], ()):
        other = sys.modules.get(name)
        if name == module_name or other is None or other is module:
            continue
        path = getattr(other, "__file__", None)
        if not isinstance(path, str):
            continue
        if path != file:
            ours = _identity(file) if ours is None else ours
            if ours is False or _identity(path) != ours:
                continue
        out.append(name)
    return sorted(out)


def _identity(path: str) -> Any:
    """(device, inode) of ``path``; False where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino)


def reason(module: str, names: list[str]) -> str:
    return (
        f"its module {module!r} is also imported as {', '.join(map(repr, names))} (the same "
        "file on sys.path twice): code that imported that name runs its own copy, without "
        "the hooks"
    )


def fix(names: list[str]) -> str:
    return (
        f"Fix: import the module by one name only: take the folder that makes {names[0]!r} "
        "importable off sys.path (a sys.path.insert of a package's own folder), and import "
        "it through its package."
    )
