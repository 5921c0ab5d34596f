"""What a plugin's code changed outside the hook registry while it loaded (hand patches, modules
put into ``sys.modules``), so the report lists what no ledger or rollback covers.

Cheap: values are kept as lists (a replaced value cannot pass as a new object reusing its id)
and one C-level identity pass says whether anything changed at all. Not seen: the standard
library, class and instance attributes, container contents, modules first imported by the same
callback, and another thread's changes (listed as the plugin's).
"""

from __future__ import annotations

import sys
from itertools import chain, repeat
from operator import is_

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

_NOISE = frozenset({"__warningregistry__"})


class _Entry(NamedTuple):
    namespace: dict[str, Any]
    keys: list[str]
    values: list[Any]


def _entry(namespace: dict[str, Any]) -> _Entry:
    return _Entry(namespace, list(namespace), list(namespace.values()))


#: Unwatched: it makes the check ten times dearer, and plugins patch engines, not ``json``.
_STDLIB = frozenset(sys.stdlib_module_names) - {"__main__"}
#: ... nor spawnkit, whose own bookkeeping changes as a matter of course: by top-level name,
#: one set lookup for each of the hundreds of modules a watch starts from.
_UNWATCHED = _STDLIB | {"spawnkit"}


def _namespace_of(module: Any) -> dict[str, Any] | None:
    try:
        namespace = module.__dict__
    except Exception:  # a lazy or broken module object
        return None
    return namespace if type(namespace) is dict else None


class OutsideWatch:
    """Snapshots of the imported modules' globals, compared after each plugin callback.

    Once a plugin has imported torch the watch holds ~35,000 globals and every later plugin
    pays for a look at them (2.4 ms a plugin when each look built and compared lists of all
    keys and values, and rebuilt them for each new module): one streaming identity pass over
    the values, each module's last key, and a new module appended to the flat snapshot.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        # The flat snapshot holds each namespace once: a module under two names (``__main__``
        # and ``__mp_main__``, a fifth of a worker's watched values) is looked at once a
        # callback; a change found is then said under each of its names (``changes``).
        self._spaces: list[dict[str, Any]] = []
        self._flat: set[int] = set()  # id() of each of _spaces: the entries keep them alive
        self._values: list[Any] = []
        self._last: list[Any] = []
        self._add(list(sys.modules.items()))

    def _add(self, items: list[tuple[str, Any]]) -> None:
        for name, module in items:
            if name.partition(".")[0] in _UNWATCHED:
                continue  # (no call for it: a watch starts from the hundreds of such modules)
            namespace = _namespace_of(module)
            if namespace is None:
                continue
            known = name in self._entries
            entry = self._entries[name] = _entry(namespace)
            if known:  # a module placed again under a name already watched
                self._flatten()
            elif id(namespace) not in self._flat:  # the flat snapshot follows _entries' order
                self._flat.add(id(namespace))
                self._spaces.append(namespace)
                self._values += entry.values
                self._last.append(entry.keys[-1] if entry.keys else _ABSENT)

    def _flatten(self) -> None:
        self._flat = set()
        entries = []
        for e in self._entries.values():  # each namespace once, at its first name
            if id(e.namespace) not in self._flat:
                self._flat.add(id(e.namespace))
                entries.append(e)
        self._spaces = [e.namespace for e in entries]
        self._values = [v for e in entries for v in e.values]
        self._last = [e.keys[-1] if e.keys else _ABSENT for e in entries]

    def _unchanged(self) -> bool:
        # Same sizes and the same value objects in order: a key renamed, added or deleted
        # moves every value after it (inserts go last), unless it is the last key, checked too.
        spaces = self._spaces
        return (
            sum(map(len, spaces)) == len(self._values)
            and all(map(is_, chain.from_iterable(map(dict.values, spaces)), self._values))
            and all(map(is_, map(next, map(reversed, spaces), repeat(_ABSENT)), self._last))
        )

    def changes(self, new_modules: list[str]) -> list[str]:
        """``module:attr`` changed since the last call, and ``sys.modules:name`` placed directly."""
        found: list[str] = []
        if not self._unchanged():
            for name, entry in list(self._entries.items()):
                namespace = entry.namespace
                same = len(namespace) == len(entry.values) and all(
                    map(is_, entry.values, namespace.values())
                )
                if same and list(namespace) == entry.keys:
                    continue
                found.extend(_differences(name, entry, namespace))
                self._entries[name] = _entry(namespace)
            self._flatten()
        found.extend(f"sys.modules:{name}" for name in placed_directly(new_modules))
        if found or new_modules:
            self._add([(n, sys.modules[n]) for n in new_modules if n in sys.modules])
        return found


def _differences(name: str, entry: _Entry, namespace: dict[str, Any]) -> list[str]:
    before = dict(zip(entry.keys, entry.values, strict=True))
    out: list[str] = []
    for attr, value in list(namespace.items()):
        old = before.pop(attr, _ABSENT)
        if old is value or attr in _NOISE:
            continue
        if old is _ABSENT and _is_submodule(name, attr, value):
            continue  # the import system binds a package's submodule when it is imported
        out.append(f"{name}:{attr}")
    out.extend(f"{name}:{attr}" for attr in before if attr not in _NOISE)  # deleted
    return out


_ABSENT: Any = object()


def _is_submodule(package: str, attr: str, value: Any) -> bool:
    return sys.modules.get(f"{package}.{attr}") is value


def placed_directly(names: list[str]) -> list[str]:
    """Of ``names`` (new in ``sys.modules``), those put there without the import system.

    No ``__spec__`` of its own name means placed directly, unless a package above it was
    imported meanwhile (torch aliases its own submodules while importing).
    """
    specs = [getattr(getattr(sys.modules.get(n), "__spec__", None), "name", None) for n in names]
    imported = {n for n, s in zip(names, specs, strict=True) if n == s}
    out: list[str] = []
    for name, spec in zip(names, specs, strict=True):
        if spec == name or name.partition(".")[0] in _STDLIB:
            continue
        parts = name.split(".")
        if any(".".join(parts[:i]) in imported for i in range(1, len(parts))):
            continue
        out.append(name)
    return out
