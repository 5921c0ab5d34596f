"""One target two registries hook: the later one's chain wraps the earlier one's.

``bootstrap_here(A)`` then ``bootstrap_here(B)``, both hooking ``pkg.mod.func``: B's chain is
built on A's (both run).  Undoing A put A's original back over B's chain, and rebuilding A's
(a hook registered later, an ``on_import`` one) put A's new chain there: B's hooks stopped
running, unsaid.  Those paths ask :func:`above` for the other registries' chains stacked on
theirs (only when something else stands at the target: never on the common path), and
``_apply.rebase_layers`` builds each again, bottom up, on what stands there then, rebinding
what held the old one.  A class REPLACE above cannot be rebuilt (its class derives from the
one below): :func:`refuse` names it instead.  Imported only on those paths.
"""

from __future__ import annotations

from typing import Any

from spawnkit.errors import HookError
from spawnkit.hooks import _resolve, _state
from spawnkit.hooks._journal import ABSENT
from spawnkit.hooks._state import Record

__all__: list[str] = []

Layer = tuple[Any, Record]  # (the registry, its record of the target)

_MOST = 16  # registries stacked on one target, at most followed


def above(rec: Record) -> list[Layer]:
    """The other registries' records whose chains stand on ``rec``'s at its target, bottom up;
    empty when ``rec``'s own chain stands there, or something that is no registry's does."""
    owner, attr = rec.res.owner, rec.res.attr
    current = _raw(owner, attr)
    stack: list[Layer] = []
    while current is not rec.installed_raw and len(stack) < _MOST:
        found = _installing(rec.key, owner, attr, current)
        if found is None:
            return []  # someone's own object: their decision (_decide.displaced_by)
        stack.append(found)
        current = found[1].before
    stack.reverse()
    return stack if current is rec.installed_raw else []


def _raw(owner: Any, attr: str) -> Any:
    try:
        return vars(owner).get(attr, ABSENT)
    except TypeError:
        return ABSENT


def _installing(key: str, owner: Any, attr: str, raw: Any) -> Layer | None:
    for registry in list(_state.REGISTRIES):
        rec = registry._state.applied.get(key)
        if rec is not None and rec.installed_raw is raw and rec.res.owner is owner:
            return (registry, rec) if rec.res.attr == attr else None
    return None


def refuse(rec: Record, layers: list[Layer], undoing: bool) -> None:
    """A class REPLACE of another namespace stands on ``rec``'s target: its class derives from
    the one ``rec`` installed, so that one cannot leave without it."""
    classes = [(reg, r) for reg, r in layers if r.kind == _resolve.CLASS]
    if not classes:
        return
    reg, upper = classes[0]
    verb = "undone" if undoing else "rebuilt"
    raise HookError(
        f"hook target {rec.display!r} cannot be {verb}: namespace {reg.name!r} replaced it "
        f"since with {upper.regs[-1].describe()}, a class derived from the one these hooks "
        f"installed, so it would keep what they made. Left as it is (both registries' hooks "
        f"stay in effect). Fix: unapply {reg.name!r}'s hooks first (its "
        "registry's unapply()), then these."
    )


def hides(
    key: str, display: str, owner: Any, attr: str, before: Any, installed: Any, replacer: str
) -> str | None:
    """What a REPLACE built now over another registry's chain (``before``) hides: that
    namespace's hooks never run, while its ``status()`` says applied.  Registered on one
    namespace, the other hooks would wrap the replacement (``_conflicts``); across two, the
    later one's REPLACE stands in for the other's whole chain.  A class REPLACE deriving from
    the other's replacement class keeps it (no message)."""
    found = _installing(key, owner, attr, before)
    if found is None:
        return None
    registry, rec = found
    if isinstance(installed, type) and isinstance(rec.installed, type) and issubclass(
        installed, rec.installed
    ):
        return None
    hooks = ", ".join(r.describe() for r in rec.regs)
    return (
        f"target {display!r}: {replacer} is applied over what namespace "
        f"{registry.name!r}'s hooks installed there ({hooks}), so those never run while its "
        f"status() says applied. Fix: hook it with AROUND and call original_fn to keep "
        f"{registry.name!r}'s hooks running, or leave the target to one namespace"
    )
