"""The record of every change the engine makes, so that each can be undone exactly.

Three kinds of change exist: an attribute set on a target's owner (a module or
a class), a global rebound in some other module's ``__dict__`` (stale
binding propagation) and a ``sys.modules`` entry (``provide_module``).  Each
records the raw value that was there before, or
that there was none (an inherited method, a name the module did not have), so
undoing restores the very object that was in ``__dict__``, not an equal one,
and deletes what was added instead of shadowing the base class's attribute.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__: list[str] = []

ABSENT: Any = object()


def item_of(container: Any, key: Any) -> Any:
    """``container[key]`` of a list, a dict or a class's ``ClassAttrs``; ``ABSENT`` if none."""
    if isinstance(container, list):
        return container[key] if -len(container) <= key < len(container) else ABSENT
    return container.get(key, ABSENT)


def put_attr(owner: Any, attr: str, value: Any) -> None:
    """Set ``owner.attr``; ``ABSENT`` deletes it from the owner's own ``__dict__``."""
    if value is ABSENT:
        if attr in vars(owner):
            delattr(owner, attr)
    else:
        setattr(owner, attr, value)


@dataclass
class AttrChange:
    """``owner.attr`` went from ``before`` (``ABSENT``: not in its ``__dict__``) to ``after``."""

    owner: Any
    attr: str
    before: Any
    after: Any

    def redo(self) -> None:
        put_attr(self.owner, self.attr, self.after)

    def undo(self) -> None:
        put_attr(self.owner, self.attr, self.before)


@dataclass
class BindingChange:
    """``namespace[name]`` (a propagated ``from X import Y`` binding): ``before`` -> ``after``.

    ``namespace`` may also be a module-level dict or list holding the target
    (``TABLE["tok"]``, ``HANDLERS[2]``), ``name`` then being its key or index,
    or a class's attributes (``_propagate.ClassAttrs``: ``Engine.tokfn``).

    Undo only touches the name if it still holds what we put there: a module
    that rebound its own global since then made a decision we must not revert.
    """

    module: str
    namespace: Any  # a dict, a list, or a ClassAttrs
    name: Any
    before: Any
    after: Any

    def redo(self) -> None:
        self.namespace[self.name] = self.after

    def undo(self) -> None:
        if item_of(self.namespace, self.name) is not self.after:
            return
        if self.before is ABSENT:
            del self.namespace[self.name]
        else:
            self.namespace[self.name] = self.before


@dataclass
class ModuleChange:
    """``sys.modules[name]`` went from ``before`` (``ABSENT``: no entry) to ``after``.

    Written by ``provide_module``; undo leaves an entry alone that someone
    replaced since, for the same reason as :class:`BindingChange`.
    """

    name: str
    before: Any
    after: Any

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
        """Set (or, with ``ABSENT``, delete) ``owner.attr`` and journal what was there."""
        change = AttrChange(owner, attr, vars(owner).get(attr, ABSENT), value)
        change.redo()
        self.changes.append(change)

    def rebind(self, module: str, namespace: Any, name: Any, value: Any) -> None:
        change = BindingChange(module, namespace, name, item_of(namespace, name), value)
        change.redo()
        self.changes.append(change)

    def put_module(self, name: str, module: Any) -> None:
        """Place ``module`` in ``sys.modules`` under ``name`` and journal what was there."""
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
