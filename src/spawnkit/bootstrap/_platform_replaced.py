"""A class REPLACE of the platform class, which the worker's platform never becomes.

A worker builds its ``current_platform`` in stage ``initialize_platform``, before any plugin
is loaded: ``init_backend()`` registers kernels and imports the runtime the plugins' hooks
then see.  A general plugin's REPLACE of that class (``spawnkit.platforms.builtin.CpuPlatform``,
or a platform plugin's own class) puts the replacement in the class's module, while the one
instance the engine asks, built from the original, keeps the original's methods: the
replacement never runs while ``status()`` says applied.  The instance is not rebuilt: its
``init_backend()`` ran, and what it registered holds the original.  Only the worker knows its
hooks, so it names the conflict once they are applied; asked only where a class is replaced.
A warm-start server's workers are left alone: each builds its platform after the fork (every
``Once`` starts over in a forked child), from the class its module holds then, the replacement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace

__all__ = ["left_behind"]

Replaced = tuple[str, Any, Any, tuple[Any, ...]]  # target, original, replacement, registrations


def left_behind(namespace: Namespace, replaced: list[Replaced]) -> tuple[list[str], str]:
    """One line per class REPLACE the current platform (built already) does not get, and the
    fix; nothing where the platform is not built or is of none of the replaced classes."""
    platform = namespace.platforms.built()
    if platform is None:
        return [], ""
    cls = type(platform)
    lines: list[str] = []
    fixes: list[str] = []
    for target, original, replacement, regs in replaced:
        if not isinstance(original, type) or original not in cls.__mro__:
            continue
        if isinstance(replacement, type) and isinstance(platform, replacement):
            continue
        who = ", ".join(dict.fromkeys(str(reg.source) for reg in regs))
        name = getattr(replacement, "__qualname__", repr(replacement))
        where = "" if cls is original else f", a subclass of {target}"
        lines.append(
            f"target {target!r}: current_platform of namespace {namespace.name!r} is the "
            f"{cls.__module__}.{cls.__qualname__} built in stage 'initialize_platform'{where}, "
            f"before plugins loaded; the class REPLACE by {who} put {name} in its module "
            f"afterwards, so current_platform never runs {name}'s methods"
            f"{_changed(original, replacement)}; a worker forked from a warm-start server "
            "builds its platform after the fork, from the replacement"
        )
        fixes.append(_fix(namespace, target, original, replacement))
    return lines, "\n".join(dict.fromkeys(fixes))


def _overrides(original: type, replacement: Any) -> list[str]:
    if not isinstance(replacement, type):
        return []
    return sorted(
        attr
        for attr in vars(replacement)
        if not attr.startswith("_") and callable(getattr(original, attr, None))
    )


def _changed(original: type, replacement: Any) -> str:
    names = _overrides(original, replacement)
    if not names:
        return ""
    return f" (the original's {', '.join(names)} run{'s' if len(names) == 1 else ''})"


def _fix(namespace: Namespace, target: str, original: type, replacement: Any) -> str:
    names = _overrides(original, replacement)
    example = f"'{target}.{names[0] if names else '<method>'}'"
    config = namespace.config
    return (
        f"Fix: ship the class as a platform plugin (an entry point in group "
        f"{config.platform_group!r} whose activate() returns it), which the worker builds as "
        f"its platform; or hook the platform's methods instead of replacing its class (AROUND "
        f"or REPLACE on {example}: a method is looked up on the class at each call, so the "
        "instance already built runs it; its init_backend() has run already)."
    )
