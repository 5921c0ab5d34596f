"""``apply_plugin_hooks()`` called while ``load_plugins()`` runs, in real spawned workers.

Applying then would patch the registry as it stands (the plugins loaded so
far), mark applying done, and leave every later plugin's hooks unapplied
with no error.  A nested call must defer to the outer load/apply; another
thread must wait for loading to finish and then apply exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _bootstrap_helpers import World, child_bootstrap, isolated_imports, make_world, run_child
from spawnkit.spec import NamespaceConfig

#: ``{tag}`` wraps Scheduler.run's result, so the result shows which hooks are installed.
TAGGING = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace

    NS = Namespace("{ns}", "{PREFIX}")

    def around(original, self):
        return "{name}:" + original(self)

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:around", HookType.AROUND)
    """

#: Loaded first (names load in order); asks for the hooks to be applied from its callback.
NESTED_APPLY = """
    from spawnkit.hooks.plugins import apply_plugin_hooks
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    from {eng}.events import EVENTS

    NS = Namespace("{ns}", "{PREFIX}")

    def around(original, self):
        return "{name}:" + original(self)

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:around", HookType.AROUND)
        EVENTS.append(("nested apply returned", apply_plugin_hooks(NS)))
    """

#: Loaded first; a thread of its own applies the hooks while the later plugins still load.
THREAD_APPLY = """
    import threading
    from spawnkit.hooks.plugins import apply_plugin_hooks
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace

    NS = Namespace("{ns}", "{PREFIX}")
    SEEN = {{}}

    def around(original, self):
        return "{name}:" + original(self)

    def _apply():
        SEEN["thread applied"] = apply_plugin_hooks(NS)

    THREAD = threading.Thread(target=_apply, daemon=True)

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:around", HookType.AROUND)
        THREAD.start()
        THREAD.join(1.0)  # long enough for an unguarded apply to finish
        SEEN["thread waited for loading"] = THREAD.is_alive()

    def entry():
        THREAD.join(30)
        from {eng}.sched import Scheduler
        return {{"seen": dict(SEEN), "run": Scheduler().run(), "alive": THREAD.is_alive()}}
    """


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with isolated_imports():
        yield make_world(tmp_path)


def _boot(world: World, **changes: Any) -> Any:
    status, value, _events, tb = run_child(child_bootstrap, world.spec(**changes))
    assert status == "ok", tb
    return value


def test_nested_apply_defers_and_the_apply_stage_applies_every_plugin(world: World) -> None:
    world.add_plugin("a", NESTED_APPLY)
    world.add_plugin("b", TAGGING)
    value = _boot(world)
    # Before: the nested call patched with 'a' only and marked applying done -> "a:orig".
    assert value["result"] == "b:a:orig"
    assert ("nested apply returned", []) in value["events"]
    assert list(value["report"]["hooks"]) == [f"{world.eng}.sched.Scheduler.run"]


def test_apply_from_another_thread_waits_for_loading_then_applies_once(world: World) -> None:
    mod = world.add_plugin("a", THREAD_APPLY)
    world.add_plugin("b", TAGGING)
    value = _boot(world, entry=f"{mod}:entry")  # the entry's own return value
    seen = value["seen"]
    assert seen["thread waited for loading"] is True  # it did not apply a half-built registry
    assert seen["thread applied"] == [f"{world.eng}.sched.Scheduler.run"]
    assert value["alive"] is False
    assert value["run"] == "b:a:orig"  # every plugin's hook, each applied once


def child_load_only(config: NamespaceConfig, conn: Any) -> None:
    """``load_plugins()`` alone, as an engine without the staged bootstrap calls it."""
    from spawnkit.hooks.plugins import load_plugins
    from spawnkit.namespace import Namespace

    ns = Namespace.from_config(config)
    try:
        loaded = [p.name for p in load_plugins(ns)]
        import importlib

        sched = importlib.import_module(config.name.replace("t_", "eng_") + ".sched")
        conn.send(("ok", loaded, sched.Scheduler().run(), ns.plugins.applied))
    except BaseException as exc:
        conn.send(("error", repr(exc), None, None))
    conn.close()


def test_outer_load_plugins_honours_a_deferred_nested_apply(world: World) -> None:
    world.add_plugin("a", NESTED_APPLY)
    world.add_plugin("b", TAGGING)
    status, loaded, run, applied = run_child(child_load_only, world.ns.config)
    assert status == "ok", loaded
    assert loaded == ["a", "b"]
    assert (run, applied) == ("b:a:orig", True)
