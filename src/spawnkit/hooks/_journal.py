"""The record of every change the engine makes, so that each can be undone exactly.

Each change keeps the raw value that was there, or ``ABSENT``, so undo restores the very
object (not an equal one) and deletes what was added instead of shadowing a base class's.
"""

from __future__ import annotations

import sys
from collections import deque

from spawnkit._compat import TYPE_CHECKING
from spawnkit._plain import Plain
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

ABSENT: Any = object()


def item_of(container: Any, key: Any) -> Any:
    if isinstance(container, list | deque):
        return container[key] if -len(container) <= key < len(container) else ABSENT
    if isinstance(container, dict):  # a registry subclass's own get() may refuse or import
        return dict.get(container, key, ABSENT)
    return container.get(key, ABSENT)


def put_item(container: Any, key: Any, value: Any) -> None:
    """``container[key] = value`` through the built-in type's own method where it is a dict or
    list: an engine's registry subclass refuses a name registered twice in its ``__setitem__``
    (``"'tok' is already registered"``), and the item set here is the one it registered."""
    if isinstance(container, dict):
        dict.__setitem__(container, key, value)
    elif isinstance(container, list):
        list.__setitem__(container, key, value)
    else:
        container[key] = value


def put_attr(owner: Any, attr: str, value: Any) -> None:
    before = vars(owner).get(attr, ABSENT)
    if value is ABSENT:
        if attr in vars(owner):
            delattr(owner, attr)
    else:
        setattr(owner, attr, value)
    _phase.patched(owner, attr, before)  # a lazy proxy, a pinned kernel: look again


# The records below are Plain, not dataclasses: each change class a worker defines would
# cost it ~1 ms of generated code (spawnkit._plain).
class AttrChange(Plain):
    """``owner.attr`` went from ``before`` (``ABSENT``: not in its ``__dict__``) to ``after``."""

    _fields = ("owner", "attr", "before", "after")
    __slots__ = _fields  # a holder of originals the reference search stops at (hooks/_hidden)

    def __init__(self, owner: Any, attr: str, before: Any, after: Any) -> None:
        self.owner, self.attr, self.before, self.after = owner, attr, before, after

    def redo(self) -> None:
        put_attr(self.owner, self.attr, self.after)

    def undo(self) -> None:
        put_attr(self.owner, self.attr, self.before)


class BindingChange(Plain):
    """``namespace[name]`` (a module's globals, a dict, a list or ``ClassAttrs``) rebound.

    Undo leaves a name alone that no longer holds what we put there: a module that rebound
    its own global since made a decision we must not revert.
    """

    _fields = ("module", "namespace", "name", "before", "after")
    __slots__ = _fields
    # a dict, a list, or a ClassAttrs; kept out of the repr a failed undo is reported with: a
    # module's globals would print every one of its names
    _hidden = frozenset({"namespace"})

    def __init__(self, module: str, namespace: Any, name: Any, before: Any, after: Any) -> None:
        self.module, self.namespace, self.name = module, namespace, name
        self.before, self.after = before, after

    def redo(self) -> None:
        put_item(self.namespace, self.name, self.after)

    def undo(self) -> None:
        if item_of(self.namespace, self.name) is not self.after:
            return
        if self.before is ABSENT:
            del self.namespace[self.name]
        else:
            put_item(self.namespace, self.name, self.before)


class ModuleChange(Plain):
    """``sys.modules[name]`` set by ``provide_module``; undo as :class:`BindingChange`'s."""

    _fields = ("name", "before", "after")
    __slots__ = _fields

    def __init__(self, name: str, before: Any, after: Any) -> None:
        self.name, self.before, self.after = name, before, after

    def redo(self) -> None:
        sys.modules[self.name] = self.after

    def undo(self) -> None:
        if sys.modules.get(self.name, ABSENT) is not self.after:
            return
        if self.before is ABSENT:
            del sys.modules[self.name]
        else:
            sys.modules[self.name] = self.before


Change = AttrChange | BindingChange | ModuleChange


class Journal:
    """Changes made by one ``apply_hooks()`` call, undone in reverse on a strict failure."""

    __slots__ = ("changes",)

    def __init__(self) -> None:
        self.changes: list[Change] = []

    def put(self, owner: Any, attr: str, value: Any) -> None:
        before = vars(owner).get(attr, ABSENT)
        if value is ABSENT:
            put_attr(owner, attr, value)
        else:  # ``AttrChange.redo``, spelled out: one per patched target
            setattr(owner, attr, value)
            _phase.patched(owner, attr, before)
        self.changes.append(AttrChange(owner, attr, before, value))

    def rebind(self, module: str, namespace: Any, name: Any, value: Any) -> None:
        change = BindingChange(module, namespace, name, item_of(namespace, name), value)
        change.redo()
        self.changes.append(change)

    def put_module(self, name: str, module: Any) -> None:
        change = ModuleChange(name, sys.modules.get(name, ABSENT), module)
        change.redo()
        self.changes.append(change)

    def rollback(self) -> list[str]:
        """Undo everything, newest first; returns descriptions of undo steps that failed."""
        problems: list[str] = []
        for change in reversed(self.changes):
            try:
                change.undo()
            except Exception as exc:  # keep undoing the rest; report every step that failed
                problems.append(f"{change!r}: {type(exc).__name__}: {exc}")
        self.changes.clear()
        return problems
