"""``async def`` targets stay coroutine functions, and their hooks see awaited results."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from _plugin_app import LAUNCH, printed, write_app
from spawnkit.errors import HookApplyError, HookConflictWarning, HookRegistrationError
from spawnkit.hooks import HookRegistry, HookType

ASYNC = """
import asyncio

async def fetch(x, delay=0):
    await asyncio.sleep(delay)
    return [x]

class Client:
    async def get(self, x):
        await asyncio.sleep(0)
        return [self.name, x]

    name = 'c'

    @classmethod
    async def build(cls, x):
        return (cls, x)

    @staticmethod
    async def ping(x):
        return x
"""

if TYPE_CHECKING:
    from _hooks_support import Modules


def test_async_function_with_every_hook_type(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("a", ASYNC)
    original = m.fetch
    target = mods.name("a.fetch")

    async def areplace(x, delay=0):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        return ["R", x]

    async def abefore(x, delay=0):  # type: ignore[no-untyped-def]
        return ((x + 1,), {"delay": delay})

    def sync_after(result, x, delay=0):  # type: ignore[no-untyped-def]
        assert not inspect.isawaitable(result)  # hooks see the awaited result
        return [*result, "after"]

    async def aaround(orig, x, delay=0):  # type: ignore[no-untyped-def]
        return [*(await orig(x, delay=delay)), "around"]

    def sync_around(orig, x, delay=0):  # type: ignore[no-untyped-def]
        return orig(x, delay=delay)  # returns the coroutine; the engine awaits it

    registry.register(target, areplace, HookType.REPLACE)
    registry.register(target, abefore, HookType.BEFORE)
    registry.register(target, sync_after, HookType.AFTER)
    registry.register(target, aaround, HookType.AROUND)
    registry.register(target, sync_around, HookType.AROUND)
    with pytest.warns(HookConflictWarning, match="plain def around a target whose call makes"):
        registry.apply_hooks()  # it works, but a timer or a try in it would not
    assert inspect.iscoroutinefunction(m.fetch)
    assert m.fetch.__wrapped__ is original and m.fetch.__name__ == "fetch"
    assert inspect.signature(m.fetch) == inspect.signature(original)
    assert asyncio.run(m.fetch(1)) == ["R", 2, "after", "around"]
    assert [a.kind for a in registry.applied_targets()] == ["async function"]
    registry.unapply()
    assert m.fetch is original and asyncio.run(m.fetch(1)) == [1]


def test_sync_replace_of_async_target_is_awaitable(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("a", ASYNC)
    registry.register(mods.name("a.fetch"), lambda x, delay=0: ["sync", x], HookType.REPLACE)
    registry.apply_hooks()
    assert inspect.iscoroutinefunction(m.fetch)
    assert asyncio.run(m.fetch(3)) == ["sync", 3]


def test_async_methods_of_each_kind(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("a", ASYNC)

    class Sub(m.Client):  # type: ignore[misc, name-defined]
        name = "sub"

    registry.register(mods.name("a.Client.get"), lambda r, self, x: [*r, "h"])
    registry.register(mods.name("a.Client.build"), lambda r, cls, x: ("h", *r))
    registry.register(mods.name("a.Client.ping"), lambda r, x: r * 2)
    registry.apply_hooks()
    assert inspect.iscoroutinefunction(m.Client.get)
    assert inspect.iscoroutinefunction(m.Client.build)
    assert inspect.iscoroutinefunction(m.Client.ping)

    async def main() -> list[object]:
        return [
            await Sub().get(1),
            await Sub.build(2),
            await m.Client().ping(3),
        ]

    assert asyncio.run(main()) == [["sub", 1, "h"], ("h", Sub, 2), 6]
    kinds = {a.qualname: a.kind for a in registry.applied_targets()}
    assert kinds == {
        "Client.get": "async method",
        "Client.build": "async classmethod",
        "Client.ping": "async staticmethod",
    }


def test_async_hook_error_is_annotated_and_propagates(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("a", ASYNC)

    async def bad(result, x, delay=0):  # type: ignore[no-untyped-def]
        raise ValueError("boom")

    registry.register(mods.name("a.fetch"), bad, HookType.AFTER)
    registry.apply_hooks()
    with pytest.raises(ValueError, match="boom") as info:
        asyncio.run(m.fetch(1))
    notes = getattr(info.value, "__notes__", [])
    assert any("AFTER hook" in n and "bad" in n and mods.name("a.fetch") in n for n in notes)


def test_async_before_bad_return_is_type_error(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("a", ASYNC)
    registry.register(mods.name("a.fetch"), lambda x, delay=0: "nope", HookType.BEFORE)
    registry.apply_hooks()
    with pytest.raises(TypeError, match="BEFORE hook"):
        asyncio.run(m.fetch(1))


_SHAPES = """
import functools

def sync(x): return x
async def coro(x): return x
async def agen(x):
    yield x
class K:
    async def method(self): ...
    def plain(self): ...
SHAPES = {
    "sync": sync, "coro": coro, "agen": agen, "lambda": lambda: 1,
    "bound async": K().method, "bound sync": K().plain, "unbound async": K.method,
    "partial async": functools.partial(coro, 1), "partial sync": functools.partial(sync, 1),
    "builtin": len, "class": K,
}
"""


def test_a_worker_without_inspect_tells_async_targets_as_inspect_does(tmp_path: Path) -> None:
    # In a worker whose targets are all sync, ``inspect`` is never imported (6 ms); the
    # answer must still be inspect's, for every kind of callable a target can be.
    (tmp_path / "shapes_mod.py").write_text(_SHAPES)
    code = (
        # a site's .pth may have imported inspect already (seen on a GPU machine's image)
        "import json, sys\nat_start = 'inspect' in sys.modules\nsys.path.insert(0, sys.argv[1])\n"
        "from spawnkit.hooks._chain import is_async_callable\nimport shapes_mod\n"
        "plain = ['sync', 'coro', 'agen', 'lambda', 'bound async', 'bound sync', 'unbound async']\n"
        "fast = {k: is_async_callable(shapes_mod.SHAPES[k]) for k in plain}\n"
        "before = 'inspect' in sys.modules and not at_start\n"
        "fast.update({k: is_async_callable(v) for k, v in shapes_mod.SHAPES.items()})\n"
        "print(json.dumps([fast, before]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    fast, imported_for_plain_functions = json.loads(done.stdout)
    sys.path.insert(0, str(tmp_path))
    try:
        import shapes_mod
    finally:
        sys.path.remove(str(tmp_path))
    expected = {
        k: inspect.iscoroutinefunction(v)
        or (isinstance(v, types.MethodType) and inspect.iscoroutinefunction(v.__func__))
        for k, v in shapes_mod.SHAPES.items()
    }
    assert fast == expected
    assert expected["coro"] and expected["partial async"] and not expected["agen"]
    assert not imported_for_plain_functions  # functions and methods: from their code's flags


@pytest.mark.skipif(
    not hasattr(inspect, "markcoroutinefunction"), reason="inspect.markcoroutinefunction: 3.12+"
)
def test_a_sync_function_marked_as_a_coroutine_function_gets_an_async_chain() -> None:
    # With inspect imported, a plain function with an empty __dict__ is told from its code's
    # flags; the mark is an attribute, so a marked function must still go to inspect.
    from spawnkit.hooks._chain import is_async_callable

    def plain(x: int) -> int:
        return x

    def marked(x: int) -> int:
        return x

    class K:
        def method(self) -> None: ...

    inspect.markcoroutinefunction(marked)
    inspect.markcoroutinefunction(K.method)
    assert not is_async_callable(plain)
    assert is_async_callable(marked) and is_async_callable(K().method)


_SYNC = """
def done(x):
    return [x]

async def stream(x):
    yield x
    yield x + 1

class Engine:
    def step(self, x):
        return [x]
"""


async def _acoro_after(result, x):  # type: ignore[no-untyped-def]
    return [*result, "after"]


async def _acoro_around(original_fn, x):  # type: ignore[no-untyped-def]
    return original_fn(x)


async def _acoro_before(x):  # type: ignore[no-untyped-def]
    return None


class _AsyncCall:
    async def __call__(self, result, x):  # type: ignore[no-untyped-def]
        return result


@pytest.mark.parametrize(
    ("hook", "hook_type", "consequence"),
    [
        (_acoro_before, HookType.BEFORE, "where its arguments belong"),
        (_acoro_after, HookType.AFTER, "the hook never runs"),
        (_acoro_around, HookType.AROUND, "neither the hook nor the target runs"),
        (_acoro_around, HookType.REPLACE, "the replacement never runs"),
        (functools.partial(_acoro_around, print), HookType.AFTER, "the hook never runs"),
        (_AsyncCall(), HookType.AFTER, "the hook never runs"),
    ],
    ids=["before", "after", "around", "replace", "partial", "async __call__"],
)
def test_an_async_hook_on_a_sync_target_is_refused_at_apply(
    mods: Modules, registry: type[HookRegistry], hook: Any, hook_type: HookType, consequence: str
) -> None:
    # Before: "applied", and each call returned the hook's coroutine, never awaited (a
    # RuntimeWarning when it was collected): the hook, and for AROUND the target, never ran.
    m = mods.load("s", _SYNC)
    original = m.done
    registry.register(mods.name("s.done"), hook, hook_type)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert f"{hook_type.name} hook" in text and "coroutine function (async def)" in text
    assert f"target {mods.name('s.done')!r} ({m.__file__}:2) is not:" in text
    assert consequence in text and "Make the hook a plain def" in text
    assert isinstance(info.value.__cause__, HookRegistrationError)
    assert list(info.value.failures) == [mods.name("s.done")]
    assert m.done is original and m.done(1) == [1]  # nothing patched
    assert [s.state for s in registry.status()] == ["failed"]


def test_an_async_hook_on_an_async_generator_says_so_and_a_stream_wrapper_still_works(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("s", _SYNC)
    registry.register(mods.name("s.stream"), _acoro_after, HookType.AFTER)
    with pytest.raises(HookApplyError, match="is an async generator function: each call"):
        registry.apply_hooks()
    registry.reset()

    async def doubled(stream, x):  # type: ignore[no-untyped-def]
        async for item in stream:  # the idiomatic stream transform: an async generator hook
            yield item * 2

    def tagged(stream, x):  # type: ignore[no-untyped-def]
        return doubled(stream, x)

    registry.register(mods.name("s.stream"), doubled, HookType.AFTER)
    registry.register(mods.name("s.stream"), tagged, HookType.AFTER)
    registry.apply_hooks()

    async def drain() -> list[int]:
        return [item async for item in m.stream(1)]

    assert asyncio.run(drain()) == [4, 8]


def test_a_lenient_apply_logs_the_async_hook_and_applies_the_rest(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    m = mods.load("s", _SYNC)
    registry.register(mods.name("s.done"), _acoro_after, HookType.AFTER)
    registry.register(mods.name("s.Engine.step"), lambda r, self, x: [*r, "h"], HookType.AFTER)
    with caplog.at_level("ERROR", logger="spawnkit.hooks"):
        registry.apply_hooks(strict=False)
    assert m.Engine().step(1) == [1, "h"] and m.done(1) == [1]
    assert any("coroutine function (async def)" in r.getMessage() for r in caplog.records)


def test_a_sync_hook_returning_the_hooks_coroutine_is_the_documented_way_out(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    # A sync target that returns an awaitable: the fix the message names, a plain def that
    # returns the coroutine, is applied and awaited by the caller.
    m = mods.load("a", ASYNC + "\ndef later(x):\n    return fetch(x)\n")

    async def awaited(result, x):  # type: ignore[no-untyped-def]
        return [*(await result), "after"]

    registry.register(mods.name("a.later"), lambda r, x: awaited(r, x), HookType.AFTER)
    registry.apply_hooks()
    assert asyncio.run(m.later(1)) == [1, "after"]


_LAUNCHER = LAUNCH + """
if __name__ == "__main__":
    try:
        launch("engine:done", "spawn")
    except spawnkit.ChildRaisedError as exc:
        cause = exc.child_exception
        print([exc.stage, type(cause).__name__, str(exc)])
"""

_ASYNC_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

async def noted(result):
    print("noted", result)

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.engine.done", noted, HookType.AFTER)
"""


def test_a_worker_whose_plugin_hooks_a_sync_target_with_async_def_fails_naming_it(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path, "asynchook", _LAUNCHER, {"notes": "plugin:register"},
        {"plugin": _ASYNC_PLUGIN, "engine": "def done():\n    return 'done'\n"},
    )  # fmt: skip
    # Before: the entry returned the plugin's coroutine, unawaited, and "noted" never printed.
    stage, error, text = printed(app.script)
    assert (stage, error) == ("apply_hooks", "StageError[HookApplyError]")
    assert f"AFTER hook {app.pkg}.plugin.noted from plugin 'notes' ({app.pkg}-dist 1.0)" in text
    assert "is a coroutine function (async def)" in text and "Make the hook a plain def" in text
