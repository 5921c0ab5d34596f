"""A hooked module that runs again (``importlib.reload()``, or an import after it left
``sys.modules``) gets its hooks back on its new objects.

Before, a reload silently dropped every hook of the module: its attribute became the new,
unhooked function, ``status()`` said "partial" only if asked, and a second ``apply_hooks()``
left it alone (nothing had been registered since).  Real modules on ``sys.path``, the real
``importlib.reload``; the last test reloads inside a real spawned and a real warm worker.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, louder_plugin, printed, write_app
from spawnkit.errors import HookApplyError
from spawnkit.hooks import HookRegistry, HookSource, HookType, _on_import

if TYPE_CHECKING:
    from _hooks_support import Modules

SRC = HookSource("reload-shims", "reload-dist", "1.0")
CALLS: list[str] = []


def _tag(result: str, *args: object) -> str:
    CALLS.append(result)
    return result + "+hooked"


def test_a_reloaded_function_runs_its_hooks_once(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mod = mods.load("engine", "def f():\n    return 'one'\n")
    user = mods.load("user", "from PKG.engine import f\n")
    registry.register(mods.name("engine.f"), _tag, HookType.AFTER, source=SRC)
    registry.apply_hooks()
    assert user.f() == "one+hooked"
    mods.write("engine", "def f():\n    return 'two, reloaded'\n")
    assert importlib.reload(mod) is mod
    CALLS.clear()
    assert mod.f() == "two, reloaded+hooked"  # before: 'two, reloaded'
    assert CALLS == ["two, reloaded"]  # one chain, not one wrapped in another
    assert user.f() == "one+hooked"  # a reference taken before keeps the old, hooked object
    (row,) = registry.status()
    assert (row.state, row.reason) == ("applied", "")
    assert mods.name("engine") in _on_import.followed()


def test_a_reloaded_class_gets_its_method_hooks_and_its_replacement(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    source = "class Engine:\n    def run(self):\n        return 'run'\nclass Plain:\n    pass\n"
    mod = mods.load("engine", source)

    class Faster:
        def go(self) -> str:
            return "faster"

    registry.register(mods.name("engine.Engine.run"), _tag, HookType.AFTER)
    registry.register(mods.name("engine.Plain"), Faster, HookType.REPLACE)
    registry.apply_hooks()
    old_engine = mod.Engine
    importlib.reload(mod)
    assert mod.Engine is not old_engine  # the module made a new class
    assert mod.Engine().run() == "run+hooked"  # before: 'run'
    assert old_engine().run() == "run+hooked"  # the old class keeps its chain
    assert mod.Plain is Faster
    assert {r.state for r in registry.status()} == {"applied"}


def test_a_module_that_keeps_its_object_across_a_reload_is_not_hooked_twice(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    source = "if 'f' not in globals():\n    def f():\n        return 'kept'\n"
    mod = mods.load("engine", source)
    registry.register(mods.name("engine.f"), _tag, HookType.AFTER)
    registry.apply_hooks()
    importlib.reload(mod)
    CALLS.clear()
    assert mod.f() == "kept+hooked"
    assert CALLS == ["kept"]


def test_an_import_after_the_module_left_sys_modules_is_hooked(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    old = mods.load("engine", "def f():\n    return 'first'\n")
    registry.register(mods.name("engine.f"), _tag, HookType.AFTER)
    registry.apply_hooks()
    del sys.modules[mods.name("engine")]
    new = importlib.import_module(mods.name("engine"))
    assert new is not old
    assert new.f() == "first+hooked"  # before: 'first'
    assert old.f() == "first+hooked"


def test_a_second_run_without_the_target_raises_naming_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    # (A reload runs the module in its old globals, where the hooked f stays: a new import.)
    mods.load("engine", "def f():\n    return 'one'\ndef g():\n    return 'g'\n")
    registry.register(mods.name("engine.f"), _tag, HookType.AFTER, source=SRC)
    registry.register(mods.name("engine.g"), _tag, HookType.AFTER, source=SRC)
    registry.apply_hooks()
    mods.write("engine", "def g():\n    return 'g, renamed f away'\n")
    del sys.modules[mods.name("engine")]
    with pytest.raises(HookApplyError) as info:
        importlib.import_module(mods.name("engine"))
    text = str(info.value)
    assert f"second run of module {mods.name('engine')!r}" in text, text
    assert mods.name("engine.f") in text and "reload-dist" in text
    assert "run unhooked" in text
    states = {r.target: r.state for r in registry.status()}
    assert states[mods.name("engine.f")] == "failed", states


def test_after_unapply_a_reload_is_left_alone(mods: Modules, registry: type[HookRegistry]) -> None:
    mod = mods.load("engine", "def f():\n    return 'one'\n")
    registry.register(mods.name("engine.f"), _tag, HookType.AFTER)
    registry.apply_hooks()
    importlib.reload(mod)
    registry.unapply()
    assert mod.f() == "one"  # the reloaded module's own function is back
    assert mods.name("engine") not in _on_import.followed()
    importlib.reload(mod)
    assert mod.f() == "one"
    assert registry.status()[0].state == "pending"


_LAUNCHER = LAUNCH + """
if __name__ == "__main__":
    print({{m: launch("work:main", m) for m in ("spawn", "forkserver")}})
"""

_PLUGIN = louder_plugin("engine.hello")

_WORK = """
import importlib
from {pkg} import engine

def main():
    before = engine.hello()
    importlib.reload(engine)
    return before, engine.hello()
"""


def test_a_worker_that_reloads_a_hooked_module_keeps_the_plugins_hook(tmp_path: Path) -> None:
    app = write_app(
        tmp_path, "reload", _LAUNCHER, {"louder": "plugin:register"},
        {"plugin": _PLUGIN, "work": _WORK, "engine": "def hello():\n    return 'hi'\n"},
    )  # fmt: skip
    got = printed(app.script)
    # Before: ('hi!', 'hi') in both: the reload dropped the plugin's hook.
    assert got == {"spawn": [("hi!", "hi!")], "forkserver": [("hi!", "hi!")]}, got


def test_after_a_lenient_apply_a_failing_second_run_is_logged_and_the_rest_applied(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    mods.load("engine", "def f():\n    return 'one'\ndef g():\n    return 'g'\n")
    registry.register(mods.name("engine.f"), _tag, HookType.AFTER, source=SRC)
    registry.register(mods.name("engine.g"), _tag, HookType.AFTER, source=SRC)
    registry.apply_hooks(strict=False)
    mods.write("engine", "def g():\n    return 'g, renamed f away'\n")
    del sys.modules[mods.name("engine")]
    with caplog.at_level("ERROR", logger="spawnkit.hooks"):
        new = importlib.import_module(mods.name("engine"))  # does not raise: lenient
    assert new.g() == "g, renamed f away+hooked"
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert mods.name("engine.f") in record.getMessage()
    assert "second run of module" in record.getMessage()
    states = {r.target: r.state for r in registry.status()}
    assert states == {mods.name("engine.f"): "failed", mods.name("engine.g"): "applied"}
