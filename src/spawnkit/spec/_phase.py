"""This process's phase, readable without importing anything: not a worker, a worker before
hooks are applied, a worker after. (The finer stage is the guard's *step*.)

Payloads and the lazy proxy refuse to run before hooks *in a worker* only. The bootstrap flips
these flags with a worker's first statement, before anything is unpickled, and resets them in
a forked child, which inherits the parent's.
"""

from __future__ import annotations

from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

_in_worker = False
#: Bumped each time a hook target's owner changes (a patch installed or undone): a lazy proxy
#: looks its object up again when this moved since it last did.
patches = 0
_hooks_applied = False
_worker_namespace: Any = None
#: By name, each namespace whose plugin hooks this process applied, and how to ask its ledger
#: (live: hooks undone since are gone) which applied targets an object built now runs hooked.
_applied_by: dict[str, Callable[[], list[str]]] = {}
#: Told ``(owner, attr, before)`` at each such change: what keeps a choice made from a target
#: (``CustomOp``'s pinned kernels) drops it then, instead of checking at each call.
_watchers: list[Callable[[Any, str, Any], None]] = []


def enter_worker(namespace: Any = None) -> None:
    """Mark this process as a bootstrapping worker of ``namespace``, hooks not yet applied."""
    global _in_worker, _hooks_applied, _worker_namespace
    _in_worker = True
    _hooks_applied = False
    _worker_namespace = namespace


def worker_namespace() -> Any:
    """The namespace of this worker's spec; ``None`` outside a bootstrapped worker."""
    return _worker_namespace


def mark_hooks_applied(
    namespace: str = "", built_hooked: Callable[[], list[str]] | None = None
) -> None:
    """Note that hooks are applied; with ``built_hooked``, that ``namespace``'s were: a payload
    captured later asks it which constructors ran hooked, for that namespace's workers only."""
    global _hooks_applied
    _hooks_applied = True
    if built_hooked is not None:
        _applied_by[namespace] = built_hooked


def built_hooked() -> tuple[tuple[str, str], ...]:
    """``(namespace, target)`` of each constructor or class REPLACE this process has applied now:
    an object built now ran those hooks (an empty tuple where none: most launchers)."""
    return tuple((ns, target) for ns, ask in _applied_by.items() for target in ask())


def patched(owner: Any, attr: str, before: Any) -> None:
    """``owner.attr`` was ``before`` (the raw value, or the journal's ``ABSENT``) and changed."""
    global patches
    patches += 1
    for watcher in _watchers:
        watcher(owner, attr, before)


def watch_patches(watcher: Callable[[Any, str, Any], None]) -> None:
    """Call ``watcher(owner, attr, before)`` after each change of a hook target's owner.

    A module above the hook engine that keeps what it resolved from a target learns of the
    change here, without the engine importing it (a ``CustomOp`` kernel pinned at an op's first
    call; the engine imports no torch).  A watcher must not raise: the engine is mid-apply.
    """
    if watcher not in _watchers:
        _watchers.append(watcher)


def hooks_applied() -> bool:
    """Whether this process applied plugin hooks (a worker past ``apply_hooks``, or a launcher
    that called ``apply_plugin_hooks()``): objects it builds now ran hooked constructors."""
    return _hooks_applied


def leave_worker() -> None:
    global _in_worker, _hooks_applied, _worker_namespace
    _in_worker = False
    _hooks_applied = False
    _worker_namespace = None


def snapshot() -> tuple[bool, bool, Any]:
    """The phase as it is, for :func:`restore` (``spawnkit.testing`` puts it back after a test)."""
    return _in_worker, _hooks_applied, _worker_namespace


def restore(state: tuple[bool, bool, Any]) -> None:
    """Put back a :func:`snapshot`: the flags are written here only, never from outside."""
    global _in_worker, _hooks_applied, _worker_namespace
    _in_worker, _hooks_applied, _worker_namespace = state


def too_early() -> bool:
    """True inside a worker whose bootstrap has not applied hooks yet."""
    return _in_worker and not _hooks_applied
