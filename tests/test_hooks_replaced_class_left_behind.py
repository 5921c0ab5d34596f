"""A class REPLACE does not reach what was built from the original before it: it is said.

A plugin replaced ``Scheduler`` with its subclass; ``GpuScheduler(Scheduler)``, defined beside
it (made as the target module was imported to be patched), kept the original as its base, and
``DEFAULT = Scheduler()`` stayed an instance of the original: both ran the original ``step``
while ``status()`` said applied.  Real launchers, a real installed plugin, spawned and warm
workers; and the registry alone.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.errors import HookConflictWarning
from spawnkit.hooks import HookRegistry

if TYPE_CHECKING:
    from _hooks_support import Modules

_MAIN = """
if __name__ == "__main__":
    print([launch("entry:main", m, nprocs=1) for m in ("spawn", "forkserver")])
"""

_SCHED = """
class Scheduler:
    def step(self):
        return "orig"


class GpuScheduler(Scheduler):
    pass


DEFAULT = Scheduler()
"""

_MODULES = {
    "sched": _SCHED,
    "entry": """
def main():
    from {pkg} import sched
    return sched.Scheduler().step(), sched.GpuScheduler().step(), sched.DEFAULT.step()
""",
    "plugin": """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.sched.Scheduler", "{pkg}.mine:MyScheduler", HookType.REPLACE
    )
""",
    "mine": """
from {pkg}.sched import Scheduler

class MyScheduler(Scheduler):
    def step(self):
        return "mine"

class _Helper(Scheduler):  # the plugin's own subclass: its business, never named
    pass
""",
}


@pytest.fixture
def app(tmp_path: Path):  # type: ignore[no-untyped-def]
    return write_app(tmp_path, "repl", LAUNCH + _MAIN, {"mine": "plugin:register"}, _MODULES)


def test_subclasses_and_instances_of_the_original_are_named_in_spawned_and_warm_workers(
    app,  # type: ignore[no-untyped-def]
) -> None:
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # What the engine gets, before and after: only a new Scheduler() runs the replacement.
    results = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert results == [[("mine", "orig", "orig")]] * 2
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr  # one per worker: spawned, then warm
    for line in lines:
        assert f"target '{app.pkg}.sched.Scheduler'" in line
        assert f"{app.pkg}.sched.GpuScheduler, {app.pkg}.sched.DEFAULT (an instance)" in line
        assert f"{app.pkg}.mine:MyScheduler's methods" in line and "_Helper" not in line
    assert f"AROUND or REPLACE on '{app.pkg}.sched.Scheduler.step'" in proc.stderr


def test_refused_with_hook_conflicts_error(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0
    assert "HookConflictError" in proc.stderr and "resolve_entry" in proc.stderr, proc.stderr


_MINE = """
from PKG.sched import Scheduler


class MyScheduler(Scheduler):
    def step(self):
        return "mine"


class Deeper(MyScheduler):
    pass
"""


def test_the_registry_names_them_and_leaves_the_replacements_side_alone(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    sched = mods.load("sched", _SCHED + "\nclass Later(GpuScheduler):\n    pass\n")
    mine = mods.load("mine", _MINE)
    target = mods.name("sched.Scheduler")
    registry.register(target, f"{mods.pkg}.mine:MyScheduler", "REPLACE")
    registry.apply_hooks()
    left = [f"{mods.pkg}.sched.{n}" for n in ("GpuScheduler", "Later")]
    expected = [*left, f"{mods.pkg}.sched.DEFAULT (an instance)"]
    assert registry.bypassing() == {target: expected}
    (status,) = registry.status()
    assert status.state == "applied" and "do not get" in status.reason, status

    class Fresh(sched.Scheduler):  # made after: from the replacement, as the module now holds
        pass

    assert issubclass(Fresh, mine.MyScheduler)
    assert registry.bypassing() == {target: expected}


def test_nothing_is_named_when_nothing_was_built_from_the_original(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("sched", "class Scheduler:\n    def step(self):\n        return 1\n")
    mods.load("mine", _MINE)
    registry.register(mods.name("sched.Scheduler"), f"{mods.pkg}.mine:MyScheduler", "REPLACE")
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookConflictWarning)
        registry.apply_hooks()
    assert registry.bypassing() == {}
    assert registry.status()[0].reason == ""
