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

import sys
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
    return found + _instances({original, *subs}, own, original.__module__.partition(".")[0])


#: The last scan, kept while neither the classes asked for nor ``sys.modules`` changed: a
#: worker asks twice (its conflict check, its report), and a scan reads every module.
_last: tuple[Any, list[str]] = (None, [])


def _instances(kinds: set[type], own: frozenset[str], package: str) -> list[str]:
    """Module globals whose type is one of ``kinds``: one name per object, in import order,
    from the first module of the classes' top-level ``package`` on (a module imported before
    it began, torch's thousand, built nothing from them as it ran)."""
    global _last
    names = list(sys.modules)
    mark = (frozenset(map(id, kinds)), own, len(names), names[-1] if names else None)
    if _last[0] == mark:
        return list(_last[1])
    first = next((i for i, n in enumerate(names) if n.partition(".")[0] == package), 0)
    after = frozenset(names[first:])
    out: list[str] = []
    seen: set[int] = set()
    for name, namespace in _module_dicts():
        if name in own or name not in after:
            continue
        try:
            if kinds.isdisjoint(map(type, namespace.values())):
                continue  # most modules: one C-level pass over the live dict
        except RuntimeError:  # another thread imported into it meanwhile: read a copy
            pass
        for attr, value in list(dict(namespace).items()):
            if type(value) in kinds and id(value) not in seen:
                seen.add(id(value))
                out.append(f"{name}.{attr} (an instance)")
    _last = mark, out
    return list(out)


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

