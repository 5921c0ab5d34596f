"""One object hooked under two of its names in one registry: a package's re-export
(``from .common import *``, ``from .impl import run as run_model``), an alias in its module
(``tok = run``), a class reached through a re-export.  Each name used to build its own chain
around the unpatched original, so a caller through one name ran only that name's hooks while
``status()`` said applied for both; now the names share one chain of all their hooks, in
registration order (REPLACE innermost), judged for conflicts as one target."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.errors import HookApplyError, HookConflictWarning
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules


def _tagging(ran: list[str], tag: str):  # type: ignore[no-untyped-def]
    def hook(orig, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(tag)
        return orig(*args, **kwargs)

    return hook


def _eng(mods: Modules) -> None:
    mods.write("utils.common", "__all__ = ['is_hip']\ndef is_hip():\n    return False\n")
    mods.write("utils.__init__", "from .common import *\n")
    mods.write("layers", "from PKG.utils import is_hip\ndef pick():\n    return is_hip()\n")
    mods.write("sched", "from PKG.utils.common import is_hip\ndef pick():\n    return is_hip()\n")


def test_replace_and_around_on_two_names_of_one_function_run_everywhere(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    _eng(mods)
    ran: list[str] = []
    trace = _tagging(ran, "trace")
    registry.register(mods.name("utils.is_hip"), lambda: True, HookType.REPLACE)
    registry.register(mods.name("utils.common.is_hip"), trace, HookType.AROUND)
    with pytest.warns(HookConflictWarning) as caught:
        registry.apply_hooks()
    (message,) = [str(w.message) for w in caught]
    assert f"hooked as '{mods.name('utils.is_hip')}' too" in message and "mixes REPLACE" in message
    import importlib

    layers, sched = (importlib.import_module(mods.name(n)) for n in ("layers", "sched"))
    utils, common = (importlib.import_module(mods.name(n)) for n in ("utils", "utils.common"))
    for call in (layers.pick, sched.pick, utils.is_hip, common.is_hip):
        ran.clear()
        assert call() is True and ran == ["trace"]  # the AROUND wraps the REPLACE
    rows = registry.status()
    assert [r.state for r in rows] == ["applied", "applied"]
    assert all("one chain of their hooks" in r.reason for r in rows)
    assert registry.is_hook_applied(mods.name("utils.is_hip"), trace)  # through either name
    registry.unapply()
    ran.clear()
    for call in (layers.pick, sched.pick, utils.is_hip, common.is_hip):
        assert call() is False
    assert ran == [] and utils.is_hip is common.is_hip
    assert common.is_hip.__code__.co_name == "is_hip" and not hasattr(common.is_hip, "__wrapped__")


@pytest.mark.parametrize("late", [False, True], ids=["one-apply", "later-apply"])
@pytest.mark.parametrize("alias", ["run_model", "impl.tok"])
def test_an_alias_and_a_renamed_import_share_the_chain(
    mods: Modules, registry: type[HookRegistry], alias: str, late: bool
) -> None:
    impl = "def run(x):\n    return x * 2\ntok = run\ndef main(x):\n    return run(x)\n"
    mods.write("impl", impl)
    mods.write("__init__", "from .impl import run as run_model\n")
    ran: list[str] = []
    registry.register(mods.name("impl.run"), _tagging(ran, "A"), HookType.AROUND)
    if late:
        registry.apply_hooks()
    registry.register(mods.name(alias), _tagging(ran, "B"), HookType.AROUND)
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HookConflictWarning)  # two AROUNDs on one object
        registry.apply_hooks()
        pkg, impl = importlib.import_module(mods.pkg), importlib.import_module(mods.name("impl"))
        for call in (pkg.run_model, impl.run, impl.tok, impl.main):
            ran.clear()
            assert call(1) == 2 and ran == ["B", "A"]  # registration order, last outermost
        registry.register(mods.name(alias), _tagging(ran, "C"), HookType.AROUND)
        registry.apply_hooks()  # a later hook on one name rebuilds the one chain
    for call in (pkg.run_model, impl.run, impl.tok, impl.main):
        ran.clear()
        assert call(1) == 2 and ran == ["C", "B", "A"]
    assert {r.state for r in registry.status()} == {"applied"}
    registry.unapply()
    ran.clear()
    assert [f(1) for f in (pkg.run_model, impl.run, impl.tok, impl.main)] == [2] * 4
    assert ran == [] and pkg.run_model is impl.run is impl.tok


def test_a_late_hook_on_one_name_of_a_method_keeps_the_other_names_hooks(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("sched", "class Scheduler:\n    def step(self):\n        return 'step'\n")
    mods.write("__init__", "from .sched import Scheduler\n")
    ran: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HookConflictWarning)
        registry.register(mods.name("sched.Scheduler.step"), _tagging(ran, "A"), HookType.AROUND)
        registry.register(mods.name("Scheduler.step"), _tagging(ran, "B"), HookType.AROUND)
        registry.apply_hooks()
        registry.register(mods.name("sched.Scheduler.step"), _tagging(ran, "A2"), HookType.AROUND)
        registry.apply_hooks()
    import importlib

    sched = importlib.import_module(mods.name("sched"))
    raw = sched.Scheduler.step.__wrapped__
    assert sched.Scheduler().step() == "step" and ran == ["A2", "B", "A"]
    rows = registry.status()
    assert [r.state for r in rows] == ["applied"] * 3, [r.reason for r in rows]
    registry.unapply()
    assert sched.Scheduler.__dict__["step"] is raw


def test_names_of_one_object_under_conflicts_error_are_refused(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    _eng(mods)
    registry.register(mods.name("utils.is_hip"), lambda: True, HookType.REPLACE)
    registry.register(mods.name("utils.common.is_hip"), lambda o: o(), HookType.AROUND)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks(conflicts="error")
    assert "mixes REPLACE" in str(info.value) and "the same object under another name" in str(
        info.value
    )
    import importlib

    common = importlib.import_module(mods.name("utils.common"))
    assert common.is_hip() is False and not hasattr(common.is_hip, "__wrapped__")


def test_two_functions_alike_are_not_one_object(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Control: distinct functions, and a subclass's inherited method, stay their own targets;
    nothing is said (``-W error``)."""
    mods.write("a", "def f():\n    return 1\ndef g():\n    return 1\n")
    mods.write("c", "class B:\n    def m(self):\n        return 1\nclass S(B):\n    pass\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("a.f", "a.g", "c.B.m", "c.S.m"):
            registry.register(mods.name(name), lambda o, *a: o(*a) + 1, HookType.AROUND)
        registry.apply_hooks()
    import importlib

    a, c = importlib.import_module(mods.name("a")), importlib.import_module(mods.name("c"))
    assert (a.f(), a.g(), c.B().m(), c.S().m()) == (2, 2, 2, 3)
    assert all(r.state == "applied" and r.reason == "" for r in registry.status())


_MODULES = {
    "utils.__init__": "from .common import *\n",
    "utils.common": "__all__ = ['is_hip']\ndef is_hip():\n    return False\n",
    "layers": "from {pkg}.utils import is_hip\ndef pick():\n    return is_hip()\n",
    "sched": "from {pkg}.utils.common import is_hip\ndef pick():\n    return is_hip()\n",
    "entry": """
from {pkg} import layers, sched, utils
from {pkg}.utils import common
TRACE = []

def main():
    out = []
    for f in (layers.pick, sched.pick, utils.is_hip, common.is_hip):
        TRACE.clear()
        out.append((f(), list(TRACE)))
    return out
""",
    "hipfix": """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.utils.is_hip", lambda: True, HookType.REPLACE)
""",
    "tracer": """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def traced(orig):
    from {pkg} import entry
    entry.TRACE.append("tracer")
    return orig()

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.utils.common.is_hip", traced, HookType.AROUND)
""",
}

_MAIN = """
if __name__ == "__main__":
    print(launch("entry:main", "spawn", nprocs=1))
"""


def test_a_worker_runs_both_plugins_hooks_through_every_name(tmp_path: Path) -> None:
    app = write_app(
        tmp_path, "spell", LAUNCH + _MAIN,
        {"hipfix": "hipfix:register", "tracer": "tracer:register"}, _MODULES,
    )  # fmt: skip
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == [[(True, ["tracer"])] * 4]
    (line,) = warned(proc, "HookConflictWarning")
    assert "the same object under another name" in line and "mixes REPLACE" in line


ENGINE_CLASS = (
    "class Engine:\n    def run(self):\n        return 'orig'\n\ndef make():\n    return Engine()\n"
)


@pytest.mark.parametrize("applies", ["one", "two"])
def test_a_class_replace_under_two_names_of_one_class_is_refused_naming_both(
    mods: Modules, registry: type[HookRegistry], applies: str
) -> None:
    """``eng.Engine`` (a package re-export) and ``eng.impl.Engine`` REPLACEd by two classes:
    before, each name got its own replacement (``from eng import Engine`` and ``make()`` one,
    ``eng.Engine`` the other), and ``status()`` said applied for both.  Now refused, naming
    both spellings and the fix; nothing is left half-patched."""
    mods.write("impl", ENGINE_CLASS)
    mods.write("__init__", "from .impl import Engine\n")
    impl = mods.load("impl")
    original = impl.Engine
    one = type("One", (original,), {"run": lambda self: "one"})
    two = type("Two", (original,), {"run": lambda self: "two"})
    registry.register(mods.name("Engine"), one, HookType.REPLACE)
    if applies == "two":
        registry.apply_hooks()
    registry.register(mods.name("impl.Engine"), two, HookType.REPLACE)
    with pytest.raises(HookApplyError, match="class REPLACE on") as info:
        registry.apply_hooks()
    message = str(info.value)
    assert mods.name("Engine'") in message and mods.name("impl.Engine'") in message
    assert "one class under two names" in message and "register the REPLACEs on one name" in message
    pkg = __import__(mods.pkg)
    assert impl.make().run() == pkg.Engine().run() == ("one" if applies == "two" else "orig")


def test_a_class_replace_beside_a_method_hook_through_another_name_stays_quiet(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """The control: a class REPLACE on one name and a method hook through the other."""
    mods.write("impl", ENGINE_CLASS)
    mods.write("__init__", "from .impl import Engine\n")
    impl = mods.load("impl")
    one = type("One", (impl.Engine,), {"run": lambda self: "one"})
    registry.register(mods.name("Engine"), one, HookType.REPLACE)
    registry.register(mods.name("impl.Engine.run"), lambda r, self: r + "+A", HookType.AFTER)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.apply_hooks()
    assert impl.make().run() == "one"
    assert [s.state for s in registry.status()] == ["applied", "applied"]
