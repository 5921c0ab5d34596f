"""One target two registries hook: the later one's chain wraps the earlier one's.

``bootstrap_here(A)`` then ``bootstrap_here(B)``, both hooking ``pkg.mod.func``: B's chain is
built on A's (both run).  Undoing A put A's original back over B's chain, and rebuilding A's
(a hook registered later, an ``on_import`` one) put A's new chain there: B's hooks stopped
running, unsaid.  Those paths ask :func:`above` for the other registries' chains stacked on
theirs (only when something else stands at the target: never on the common path), and
``_apply.rebase_layers`` builds each again, bottom up, on what stands there then, rebinding
what held the old one.  A class REPLACE above cannot be rebuilt (its class derives from the
one below): :func:`refuse` names it instead.  Imported only on those paths.

The two registries may spell the target differently (``eng.run`` and ``eng.impl.run``, one
function re-exported): A's chain at ``eng.run`` was propagated to ``eng.impl.run``, where B
built its chain on it, and B's sweep then put B's chain at ``eng.run``.  The stack is found by
the chains themselves (each one spawnkit made is its own object), not by the target's name,
and a layer whose target is not the one under it is rebuilt on what stands at that one's
place now (``_apply.rebase_layers``): undoing A once left ``eng.run`` bare and A's hook
running at ``eng.impl.run``, where B's chain still stood on it.
"""

from __future__ import annotations

from typing import Any

from spawnkit.errors import HookError
from spawnkit.hooks import _resolve, _state
from spawnkit.hooks._journal import ABSENT
from spawnkit.hooks._state import Record

__all__: list[str] = []

# (the registry, its record of the target, the record its chain stands on when that one's
# target is another name of the object: None where both are at one place)
Layer = tuple[Any, Record, "Record | None"]

_MOST = 16  # registries stacked on one target, at most followed


def above(rec: Record) -> list[Layer]:
    """The other registries' records whose chains stand on ``rec``'s at its target, bottom up;
    empty when ``rec``'s own chain stands there, or something that is no registry's does."""
    owner, attr = rec.res.owner, rec.res.attr
    current = _raw(owner, attr)
    found: list[Layer] = []
    while current is not rec.installed_raw and len(found) < _MOST:
        layer = _installing(rec.key, owner, attr, current) or _spelt_apart(current)
        if layer is None:
            return []  # someone's own object: their decision (_decide.displaced_by)
        found.append(layer)
        current = layer[1].before
    if current is not rec.installed_raw:
        return []
    found.reverse()
    stack: list[Layer] = []
    under = rec
    for registry, upper, _ in found:
        apart = upper.res.owner is not under.res.owner or upper.res.attr != under.res.attr
        stack.append((registry, upper, under if apart else None))
        under = upper
    return stack


def _raw(owner: Any, attr: str) -> Any:
    try:
        return vars(owner).get(attr, ABSENT)
    except TypeError:
        return ABSENT


def _installing(key: str, owner: Any, attr: str, raw: Any) -> Layer | None:
    for registry in list(_state.REGISTRIES):
        rec = registry._state.applied.get(key)
        if rec is not None and rec.installed_raw is raw and rec.res.owner is owner:
            return (registry, rec, None) if rec.res.attr == attr else None
    return None


def _spelt_apart(raw: Any, own: Any = None) -> Layer | None:
    """The record of another name whose chain ``raw`` is: its registry's sweep put it here
    (``eng.run`` holding the chain B installed at ``eng.impl.run``), that registry not the one
    of state ``own``.  Every applied record is read: only on the rare paths, where something
    else stands at a target, or a REPLACE is built over what may be another's chain."""
    for registry in list(_state.REGISTRIES):
        if registry._state is own:
            continue
        for rec in registry._state.applied.values():
            if rec.installed_raw is raw:
                return (registry, rec, None)
    return None


def chains_of_others(own: Any) -> dict[int, tuple[str, Record]]:
    """id of each chain another registry than state ``own``'s installed (its raw object in
    the owner's ``__dict__``) -> that namespace's name and record: a target of ``own``'s whose
    original is one of them wraps that namespace's hooks (``bootstrap_here(A)`` then
    ``bootstrap_here(B)``).  Read on the rare paths only: a count left unexplained, a stale
    holder reported."""
    found: dict[int, tuple[str, Record]] = {}
    for registry in list(_state.REGISTRIES):
        if registry._state is not own:
            for rec in registry._state.applied.values():
                found[id(rec.installed_raw)] = (registry.name, rec)
    return found


def held_by_record(rec: Record, raw: Any) -> int:
    """References ``rec`` (another registry's record of the chain ``raw``) holds to what a
    count of ``raw`` takes in (``_propagate.other_references``: the function, or a
    ``staticmethod``'s and the function inside it): its ``installed_raw`` and ``installed``."""
    inner = raw.__func__ if type(raw) in (staticmethod, classmethod) else raw
    return sum(v is raw or v is inner for v in (rec.installed_raw, rec.installed))


def base_of(upper: Record, under: Record) -> Any:
    """What ``upper``'s chain is to be built on, its target another name of ``under``'s: what
    stands at ``under``'s place now (the original ``under``'s undoing put back, or its new
    chain), which is what ``under``'s sweep would have left at ``upper``'s place."""
    now = _raw(under.res.owner, under.res.attr)
    return under.original if now is ABSENT else now


def refuse(rec: Record, layers: list[Layer], undoing: bool) -> None:
    """A class REPLACE of another namespace stands on ``rec``'s target: its class derives from
    the one ``rec`` installed, so that one cannot leave without it."""
    classes = [(reg, r) for reg, r, _ in layers if r.kind == _resolve.CLASS]
    if not classes:
        return
    reg, upper = classes[0]
    verb = "undone" if undoing else "rebuilt"
    spelt = "" if upper.display == rec.display else f" (as {upper.display!r}, the same class)"
    raise HookError(
        f"hook target {rec.display!r} cannot be {verb}: namespace {reg.name!r} replaced "
        f"it{spelt} since with {upper.regs[-1].describe()}, a class derived from the one "
        f"these hooks installed, so it would keep what they made. Left as it is (both "
        f"registries' hooks stay in effect). Fix: unapply {reg.name!r}'s hooks first (its "
        "registry's unapply()), then these."
    )


def hides(
    key: str,
    display: str,
    owner: Any,
    attr: str,
    before: Any,
    installed: Any,
    replacer: str,
    own: Any,
) -> str | None:
    """What a REPLACE built now over another registry's chain (``before``) hides: that
    namespace's hooks never run, while its ``status()`` says applied.  Registered on one
    namespace, the other hooks would wrap the replacement (``_conflicts``); across two, the
    later one's REPLACE stands in for the other's whole chain.  A class REPLACE deriving from
    the other's replacement class keeps it (no message).  The other may have hooked another
    name of the object (``eng.run``, this one ``eng.impl.run``), its chain propagated here.
    ``own``: the applying registry's state, whose chains under other names are its own."""
    found = _installing(key, owner, attr, before)
    if found is None and len(_state.REGISTRIES) > 1:
        found = _spelt_apart(before, own)
    if found is None:
        return None
    registry, rec, _ = found
    if isinstance(installed, type) and isinstance(rec.installed, type) and issubclass(
        installed, rec.installed
    ):
        return None
    hooks = ", ".join(r.describe() for r in rec.regs)
    there = "there" if rec.display == display else f"at {rec.display!r}, the same object"
    return (
        f"target {display!r}: {replacer} is applied over what namespace "
        f"{registry.name!r}'s hooks installed {there} ({hooks}), so those never run while its "
        f"status() says applied. Fix: hook it with AROUND and call original_fn to keep "
        f"{registry.name!r}'s hooks running, or leave the target to one namespace"
    )
