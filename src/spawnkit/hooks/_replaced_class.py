"""What a class REPLACE cannot reach: what was built from the original class before it.

Replacing ``eng.sched.Scheduler`` puts the replacement in the module (and in every binding
the sweep finds), so ``Scheduler()`` and a subclass defined afterwards get it.  A subclass
defined before (``class GpuScheduler(Scheduler)`` beside it, made as the target module was
imported to be patched) keeps the original as its base, and a module-level instance
(``current_platform = CudaPlatform()``) stays of the original class: neither ever runs the
replacement's methods, while ``status()`` says applied.  A method hook has no such gap (a
method is looked up on the class at each call), which is the fix this names.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from spawnkit.hooks._propagate import _module_dicts

__all__ = ["fix", "left_behind", "reason"]


def left_behind(rec: Any) -> list[str]:
    """The subclasses (``module.Class``) and module-level instances (``module.name``) of
    ``rec``'s original class that do not get its replacement's methods."""
    original, replacement = rec.original, rec.installed
    if not isinstance(original, type) or not isinstance(replacement, type):
        return []
    own = rec.hook_modules  # a plugin's own subclasses are its business
    bases = set(replacement.__mro__)
    subs: list[type] = []
    stack: list[type] = type.__subclasses__(original)
    while stack:
        sub = stack.pop()
        if issubclass(sub, replacement) or sub in subs:
            continue  # made from the replacement: it has its methods
        stack.extend(type.__subclasses__(sub))
        if sub not in bases and sub.__module__ not in own:
            subs.append(sub)
    found = sorted(f"{sub.__module__}.{sub.__qualname__}" for sub in subs)
    return found + _instances({original, *subs}, own)


def _instances(kinds: set[type], own: frozenset[str]) -> list[str]:
    """Module globals whose type is one of ``kinds``: one name per object, in import order."""
    out: list[str] = []
    seen: set[int] = set()
    for name, namespace in _module_dicts():
        if name in own:
            continue
        items = list(dict(namespace).items())  # a copy: another thread may import meanwhile
        if kinds.isdisjoint(map(type, map(itemgetter(1), items))):
            continue  # most modules: one C-level pass
        for attr, value in items:
            if type(value) in kinds and id(value) not in seen:
                seen.add(id(value))
                out.append(f"{name}.{attr} (an instance)")
    return out


def reason(replacement: str, names: list[str]) -> str:
    return (
        f"{len(names)} subclass(es) or module-level instance(s) of the original class were "
        f"made before it was replaced, and do not get {replacement}'s methods: "
        f"{', '.join(names)}"
    )


def fix(rec: Any) -> str:
    """Hook the methods the replacement overrides, on the original class."""
    original, replacement = rec.original, rec.installed
    changed = sorted(
        attr
        for attr in vars(replacement)
        if not attr.startswith("__") and callable(getattr(original, attr, None))
    )
    example = f"'{rec.display}.{changed[0] if changed else '<method>'}'"
    return (
        f"Fix: hook the methods the replacement changes (AROUND or REPLACE on {example}) "
        "instead of replacing the class: a method hook reaches every subclass and every "
        "instance already made; or check that those are not what the engine runs."
    )

