"""A hooked generator function is still one, to ``inspect`` and to those who ask it.

The chain was a plain function returning the generator: ``inspect.isgeneratorfunction`` said
False, so FastAPI took a hooked ``yield`` dependency for a plain one and torch's ``no_grad()``
applied afterwards guarded the call and not the body, with ``status()`` saying applied.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

import pytest

from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

GENS = """
EVENTS = []

def count(n):
    EVENTS.append("body")
    total = 0
    for i in range(n):
        got = yield i
        total += got or 0
    return total

class Reader:
    def lines(self, n):
        yield from (f"line{i}" for i in range(n))

async def stream(n):
    try:
        for i in range(n):
            got = yield i
            if got:
                yield f"sent {got}"
    finally:
        EVENTS.append("stream closed")
"""


def test_every_hook_type_keeps_a_generator_function_one(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("g", GENS)
    events, original = m.EVENTS, m.count

    def before(n):  # type: ignore[no-untyped-def]
        events.append("before")
        return ((n + 1,), {})

    def around(original, n):  # type: ignore[no-untyped-def]
        events.append("around")
        return (x * 10 for x in original(n))

    registry.register(mods.name("g.count"), before, HookType.BEFORE)
    registry.register(mods.name("g.count"), around, HookType.AROUND)
    registry.register(mods.name("g.Reader.lines"), lambda r, *a: None, HookType.AFTER)
    registry.apply_hooks()
    # Before: False for both (each a plain function returning the generator).
    assert inspect.isgeneratorfunction(m.count) and inspect.isgeneratorfunction(m.Reader.lines)
    assert inspect.isgeneratorfunction(m.Reader().lines)
    gen = m.count(2)
    assert events == []  # nothing runs at the call, as for the target's own body
    # the AROUND hook, registered last, is outermost: it runs first, the BEFORE hook inside it
    assert list(gen) == [0, 10, 20] and events == ["around", "before", "body"]
    assert list(m.Reader().lines(2)) == ["line0", "line1"]
    registry.unapply()
    assert m.count is original


def test_send_throw_and_return_value_pass_through_the_shell(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A control: these passed through the plain layer before; they must through the shell."""
    m = mods.load("g", GENS)
    registry.register(mods.name("g.count"), lambda original, n: original(n), HookType.AROUND)
    registry.apply_hooks()
    gen = m.count(3)
    assert next(gen) == 0 and gen.send(5) == 1 and gen.send(7) == 2
    with pytest.raises(StopIteration) as info:
        gen.send(1)
    assert info.value.value == 13  # the target's return value
    gen = m.count(3)
    next(gen)
    with pytest.raises(KeyError):
        gen.throw(KeyError("into the target"))


def test_an_async_generator_target_stays_one_with_asend_and_aclose(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("g", GENS)
    seen: list[Any] = []

    def around(original, n):  # type: ignore[no-untyped-def]
        seen.append(n)
        return original(n)

    registry.register(mods.name("g.stream"), around, HookType.AROUND)
    registry.apply_hooks()
    assert inspect.isasyncgenfunction(m.stream)  # before: False

    async def drive() -> list[Any]:
        got = [item async for item in m.stream(2)]
        agen = m.stream(3)
        got.append(await agen.__anext__())
        got.append(await agen.asend("x"))
        await agen.aclose()
        return got

    assert asyncio.run(drive()) == [0, 1, 0, "sent x"]
    assert seen == [2, 3] and m.EVENTS.count("stream closed") == 2


def test_torch_no_grad_applied_after_hooking_guards_the_generators_body(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    torch = pytest.importorskip("torch")
    source = "import torch\n\ndef steps(n):\n    for _ in range(n):\n"
    source += "        yield torch.is_grad_enabled()\n"
    m = mods.load("t", source)
    registry.register(mods.name("t.steps"), lambda original, n: original(n), HookType.AROUND)
    registry.apply_hooks()
    guarded = torch.no_grad()(m.steps)  # torch asks inspect.isgeneratorfunction
    # Before: [True, True]: no_grad covered the call that made the generator, not its body.
    assert list(guarded(2)) == [False, False]


def test_a_types_coroutine_target_stays_awaitable(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A control: a ``@types.coroutine`` generator is awaited by its callers; it keeps the plain
    layer (a generator shell would not be awaitable)."""
    source = "import types\n\n@types.coroutine\ndef legacy(x):\n    yield\n    return x\n"
    m = mods.load("legacy", source)
    registry.register(mods.name("legacy.legacy"), lambda original, x: original(x), HookType.AROUND)
    registry.apply_hooks()

    async def main() -> Any:
        return await m.legacy(1)

    assert asyncio.run(main()) == 1  # a shell: "object generator can't be used in 'await'"
