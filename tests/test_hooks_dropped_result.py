"""An AROUND hook that never returns a value, on a target that returns one, or a plain ``def``
around a coroutine or a guarded one around a generator: said, not hidden.

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


@pytest.mark.parametrize(
    ("which", "said"),
    [("compute", "never returns a value"), ("generate", "plain def around")],
    ids=["return-forgotten", "plain-def-around-a-coroutine"],
)
def test_the_conflict_policy_refuses_or_silences_it(
    mods: Modules, registry: type[HookRegistry], which: str, said: str
) -> None:
    m = mods.load("eng", ENGINE + STREAMS)
    original = getattr(m, which)
    hook = timed if which == "compute" else fallback
    registry.register(mods.name(f"eng.{which}"), hook, HookType.AROUND)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks(conflicts="error", conflicts_var="ENG_HOOK_CONFLICTS")
    assert isinstance(info.value.__cause__, HookConflictError) and said in str(info.value)
    assert getattr(m, which) is original  # refused before anything stayed patched
    assert _apply(registry, conflicts="ignore") == [] and getattr(m, which) is not original


STREAMS = """
import asyncio

async def generate(x):
    await asyncio.sleep(0)
    raise MemoryError("KV cache full")

def stream(n):
    yield 0
    raise MemoryError("KV cache full")

async def astream(n):
    yield 0
    raise MemoryError("KV cache full")
"""


def fallback(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    try:
        return original_fn(*args, **kwargs)  # a coroutine or generator: nothing raised yet
    except MemoryError:
        return "fallback"


def test_a_plain_def_around_a_coroutine_or_generator_is_named_with_the_fix(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """The seed's timer or a fallback ``try``, written as a plain def, on a target that is
    ``async def`` (or a generator): ``original_fn(...)`` returns at once, so the timer read 0
    and the ``except`` never saw the target's error, while ``status()`` said applied."""
    m = mods.load("eng", STREAMS)
    for name in ("generate", "stream", "astream"):
        registry.register(mods.name(f"eng.{name}"), fallback, HookType.AROUND)
    said = sorted(_apply(registry))
    assert len(said) == 3, said
    astream, generate, stream = said
    assert f"target {mods.name('eng.generate')!r}: AROUND hook {__name__}.fallback" in generate
    assert "makes a coroutine" in generate and "return await original_fn(" in generate
    assert "makes a generator" in stream and "yield from original_fn(" in stream
    assert "makes an async generator" in astream and "async for item in" in astream
    with pytest.raises(MemoryError):  # what was named: the hook's except never ran
        asyncio.run(m.generate(1))


def test_an_around_hook_of_the_targets_kind_or_one_mapping_items_says_nothing(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("eng", STREAMS)

    async def afallback(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return await original_fn(*args, **kwargs)
        except MemoryError:
            return "fallback"

    def gfallback(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return (yield from original_fn(*args, **kwargs))
        except MemoryError:
            yield "fallback"

    def tens(original_fn, n):  # type: ignore[no-untyped-def]
        return (x * 10 for x in original_fn(n))  # lazily, item by item: right as it is

    registry.register(mods.name("eng.generate"), afallback, HookType.AROUND)
    registry.register(mods.name("eng.stream"), gfallback, HookType.AROUND)
    registry.register(mods.name("eng.astream"), lambda original_fn, n: original_fn(n),
                      HookType.AROUND)  # fmt: skip
    assert _apply(registry) == []
    assert asyncio.run(m.generate(1)) == "fallback" and list(m.stream(1)) == [0, "fallback"]
    registry.register(mods.name("eng.stream"), tens, HookType.AROUND)
    assert not [said for said in _apply(registry) if "plain def" in said]  # (two AROUNDs: said)


def test_a_comprehension_in_a_plain_def_around_a_generator_is_no_try_block(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """From 3.12 a comprehension is inlined with an exception-table handler of its own: a
    hook filtering its kwargs with one was said to have a try block (a false finding, and
    under <PREFIX>_HOOK_CONFLICTS=error every worker refused) on 3.12 and 3.13 only."""
    m = mods.load("eng", STREAMS)

    def filtering(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        kept = [a for a in args if a is not None]
        return original_fn(*kept, **{k: v for k, v in kwargs.items() if k != "drop"})

    registry.register(mods.name("eng.stream"), filtering, HookType.AROUND)
    assert _apply(registry) == []
    assert next(m.stream(1, drop=True)) == 0


def test_the_opcode_numbers_the_bytecode_readers_use_are_this_pythons() -> None:
    """The readers take their opcode numbers from a table by version, not from ``opcode`` (a
    cold worker's import): the table must be ``opcode.opmap``, name by name, missing included."""
    import opcode

    from spawnkit.hooks import _chain

    mine = _chain._opmap()
    assert {n: mine.get(n) for n in _chain.OPCODE_NAMES} == {
        n: opcode.opmap.get(n) for n in _chain.OPCODE_NAMES
    }
