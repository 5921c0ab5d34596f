"""A call of a hook target that ran as its module was imported, before the hooks: named.

A plugin that imports engine code at its top (``import eng.layers`` to subclass or read
something) brings in ``eng.layers`` before any hook exists; its ``_is_hip = is_hip()`` runs the
original.  The sweep then rebinds ``eng.layers.is_hip`` to the hooked function, so ``status()``
said applied and later calls ran the hook, but the value computed at import stayed the
original's (the worker chose its CUDA kernel on a plugin's HIP device), nothing said.  Now the
call is a stale holder of its own kind: ``ImportGuardError`` in a worker by default, a warning
under ``<PREFIX>_IMPORT_GUARD=warn``; ``status()`` calls the hook partial.  The registry here;
real spawned and warm workers with a real installed plugin at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _hooks_support import IS_HIP
from _plugin_app import LAUNCH, MAIN, guard_stops_then_warns, write_app
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

# Every form below runs as the module is imported (lines 4 to 14), except those marked no.
_LAYERS = """
from PKG.utils import is_hip
from typing import TYPE_CHECKING
_is_hip = is_hip()
class Config:
    hip = is_hip()
def pick(flag=is_hip()):
    return flag
def mark(flag):
    return lambda f: f
@mark(is_hip())
def forward():
    return is_hip()  # no: a function body
FLAGS = [is_hip() for _ in range(1)]
if TYPE_CHECKING:
    is_hip()  # no
if __name__ == "__main__":
    is_hip()  # no
"""


def _hip() -> bool:
    return True


def test_import_time_calls_before_the_hooks_are_stale_holders(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("utils", IS_HIP)
    layers = mods.load("layers", _LAYERS)  # before the hooks, as a plugin's top-level import
    target = mods.name("utils.is_hip")
    registry.register(target, _hip, HookType.REPLACE)
    registry.apply_hooks()
    assert layers.is_hip() is True and layers.forward() is True  # rebound: calls run the hook
    assert layers._is_hip is False  # computed before: what is now reported
    found = [h for h in registry.stale_holders() if h["module"] == mods.name("layers")]
    assert sorted(h["name"] for h in found) == [f"is_hip() at line {n}" for n in (11, 14, 4, 6, 7)]
    assert {h["target"] for h in found} == {target}
    assert all(h["kind"].startswith("called as its module was imported") for h in found)
    (row,) = registry.status()
    assert row.state == "partial"


def test_a_call_through_the_module_is_named(mods: Modules, registry: type[HookRegistry]) -> None:
    mods.write("utils", IS_HIP)
    early = mods.load("early", "from PKG import utils\n\nFLAG = utils.is_hip()\n")
    registry.register(mods.name("utils.is_hip"), _hip, HookType.REPLACE)
    registry.apply_hooks()
    assert (early.FLAG, early.utils.is_hip()) == (False, True)
    (holder,) = registry.stale_holders()
    assert (holder["module"], holder["name"]) == (mods.name("early"), "utils.is_hip() at line 3")


def test_a_module_imported_by_the_apply_is_not_reported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Imported after the hooks exist (here: as a target's module), it called the hook."""
    mods.write("utils", IS_HIP)
    mods.write("layers", _LAYERS)
    registry.register(mods.name("utils.is_hip"), _hip, HookType.REPLACE)
    registry.register(mods.name("layers.pick"), lambda r, *a: r, HookType.AFTER)
    registry.apply_hooks()
    layers = mods.load("layers")
    assert layers._is_hip is True and layers.Config.hip is True
    assert registry.stale_holders() == []
    assert {s.state for s in registry.status()} == {"applied"}


def test_a_module_that_only_binds_the_target_is_not_reported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("utils", IS_HIP)
    mods.load("quiet", "from PKG.utils import is_hip\n\ndef run():\n    return is_hip()\n")
    registry.register(mods.name("utils.is_hip"), _hip, HookType.REPLACE)
    registry.apply_hooks()
    assert mods.load("quiet").run() is True
    assert registry.stale_holders() == []


_MODELS = """
class Scheduler:
    def __init__(self):
        self.device = "cuda"

    @classmethod
    def default_limit(cls):
        return 8

    def step(self):
        return "step"


OWN = Scheduler()  # its own module: always before the hooks, not reported
"""

_EARLY = """
from PKG.models import Scheduler as Sched
LIMIT = Sched.default_limit()
DEFAULT = Sched()
FIRST = Sched().step()
def later():
    return Sched.default_limit()
"""


def test_import_time_calls_of_hooked_methods_through_their_class_are_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("models", _MODELS)
    early = mods.load("early", _EARLY)  # before the hooks: a plugin's top-level import
    for attr, hook in (
        ("default_limit", lambda r, cls: 2 * r),
        ("__init__", lambda r, self: setattr(self, "device", "hip")),
        ("step", lambda r, self: r + "!"),
    ):
        registry.register(mods.name(f"models.Scheduler.{attr}"), hook, HookType.AFTER)
    registry.apply_hooks()
    assert (early.later(), early.Sched().device) == (16, "hip")  # the class is hooked
    assert (early.LIMIT, early.DEFAULT.device, early.FIRST) == (8, "cuda", "step")
    found = {(h["name"], h["target"].rpartition(".")[2]) for h in registry.stale_holders()}
    assert found == {
        ("Sched.default_limit() at line 3", "default_limit"),
        ("Sched() at line 4", "__init__"),
        ("Sched() at line 5", "__init__"),
        ("Sched.step() at line 5", "step"),
    }
    assert {h["module"] for h in registry.stale_holders()} == {mods.name("early")}


def test_a_module_imported_after_its_class_was_hooked_is_not_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("models", _MODELS)
    mods.write("early", _EARLY)
    registry.register(mods.name("models.Scheduler.default_limit"), lambda r, c: 2 * r)
    registry.apply_hooks()
    assert mods.load("early").LIMIT == 16
    assert registry.stale_holders() == []


_PLUGIN = """
import {pkg}.layers  # engine code imported at the plugin's top: before any hook exists
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def register():
    get_namespace({tag!r}).hooks.register("{pkg}.utils.is_hip", lambda: True, HookType.REPLACE)
"""

_ENTRY = """
from {pkg} import layers


def main():
    return layers._is_hip, layers.is_hip()
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_names_the_call_or_says_it_runs_with_it(tmp_path: Path, method: str) -> None:
    modules = {
        "utils": IS_HIP,
        "layers": "from {pkg}.utils import is_hip\n_is_hip = is_hip()\n",
        "entry": _ENTRY,
        "plugin": _PLUGIN,
    }
    app = write_app(tmp_path, "callimp", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    stopped, results, warned_of = guard_stops_then_warns(app, method)
    assert (
        f"{app.pkg}.layers: is_hip() at line 2 ran the original of '{app.pkg}.utils.is_hip'"
    ) in stopped
    assert f"{app.pkg}.layers was imported at " in stopped  # the import to move:
    assert f"{app.pkg}/plugin.py:2 (in <module>)" in stopped  # the plugin's top line
    assert "inside the plugin's register function" in stopped
    assert results == [(False, True)]
    assert f"{app.pkg}.layers: is_hip() at line 2 ran the original" in warned_of
