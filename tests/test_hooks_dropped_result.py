"""An AROUND hook that never returns a value, on a target that returns one: said, not hidden.

``def timed(original_fn, *a, **kw): original_fn(*a, **kw)`` (the ``return`` forgotten) made
every caller get None while ``status()`` said applied.  Told from the bytecode of the hook and
of the target (no ``dis``), once per process, as a ``HookConflictWarning`` that
``<PREFIX>_HOOK_CONFLICTS`` / ``-W`` escalate or silence.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from spawnkit.errors import HookApplyError, HookConflictError, HookConflictWarning
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

ENGINE = """
def compute(x):
    return x * 2

def step(x):
    x.append(1)

async def fetch(x):
    return [x]
"""


def timed(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    original_fn(*args, **kwargs)  # the return forgotten


def guarded(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    if not args:
        return None
    return original_fn(*args, **kwargs)


async def atimed(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    await original_fn(*args, **kwargs)


def _apply(registry: type[HookRegistry], **options: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry.apply_hooks(**options)
    return [str(w.message) for w in caught if issubclass(w.category, HookConflictWarning)]


def test_an_around_hook_that_drops_the_result_is_named_with_the_fix(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("eng", ENGINE)
    registry.register(mods.name("eng.compute"), timed, HookType.AROUND)
    registry.register(mods.name("eng.step"), timed, HookType.AROUND)  # returns None: fine
    registry.register(mods.name("eng.fetch"), atimed, HookType.AROUND)
    said = _apply(registry)
    assert len(said) == 2, said
    compute, fetch = sorted(said)
    assert f"target {mods.name('eng.compute')!r}: AROUND hook {__name__}.timed" in compute
    assert "never returns a value" in compute and "return original_fn(*args, **kwargs)" in fetch
    assert f"target {mods.name('eng.fetch')!r}" in fetch
    assert m.compute(2) is None and asyncio.run(m.fetch(1)) is None  # said, and left as written
    registry.register(mods.name("eng.compute"), guarded, HookType.BEFORE)
    assert _apply(registry) == []  # once per process


def test_a_hook_that_returns_on_some_path_says_nothing(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("eng", ENGINE)
    registry.register(mods.name("eng.compute"), guarded, HookType.AROUND)
    assert _apply(registry) == [] and m.compute(2) == 4


def test_the_conflict_policy_refuses_or_silences_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("eng", ENGINE)
    original = m.compute
    registry.register(mods.name("eng.compute"), timed, HookType.AROUND)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks(conflicts="error", conflicts_var="ENG_HOOK_CONFLICTS")
    assert isinstance(info.value.__cause__, HookConflictError)
    assert m.compute is original  # refused before anything stayed patched
    assert _apply(registry, conflicts="ignore") == [] and m.compute(2) is None
