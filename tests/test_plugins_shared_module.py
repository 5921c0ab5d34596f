"""Two plugins of one distribution sharing a module, loaded in real spawned workers.

Plugin ``b_core`` is a module entry point made of ``@plugin_hook`` decorators; plugin
``a_extra`` (loaded first: names load in order) imports a helper from that module at its
top.  So ``b_core``'s decorators run during ``a_extra``'s load, while ``a_extra`` is the
current plugin source.  Before: those hooks were named as ``a_extra``'s (every status line
and guard message named the wrong plugin) and, when ``a_extra`` then failed in lenient mode,
discarded with it, while ``b_core`` "loaded" with 0 registrations: its hook never ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _bootstrap_helpers import World, child_bootstrap, isolated_imports, make_world, run_child
from spawnkit import _metadata
from spawnkit.testing import write_distribution

CORE = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace

    NS = Namespace("{ns}", "{PREFIX}")

    def helper():
        return 42

    @NS.plugin_hook("{eng}.sched.Scheduler.run", type=HookType.AROUND)
    def core_around(original, self):
        return "core:" + original(self)

    def tail(result, *args, **kwargs):  # registered by a_extra's callback: a_extra's hook
        return result + ":tail"
    """

EXTRA = """
    import os
    from spawnkit.hooks.types import HookType
    from {v}.core import NS, helper, tail

    def register():
        if os.environ.get("{PREFIX}_TEST_EXTRA_FAILS"):
            import missing_optional_dependency_of_extra  # noqa: F401  not on this node
        NS.hooks.register("{eng}.sched.Scheduler.run", tail, HookType.AFTER)
    """

ENTRY = """
    def main(args=None):
        from spawnkit.bootstrap import current_report
        from {eng}.sched import Scheduler
        from {v}.core import NS
        report = current_report()
        return {{
            "result": Scheduler().run(),
            "sources": sorted((r.hook_name.rpartition(".")[2], r.source.plugin_name)
                              for r in NS.hooks.registrations()),
            "loaded": {{p["name"]: p["registrations"] for p in report.plugins}},
            "failed": [p["name"] for p in report.failed_plugins],
        }}
    """


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with isolated_imports():
        w = make_world(tmp_path)
        for var in (w.ns.config.plugins_var, w.ns.config.lenient_var):
            monkeypatch.delenv(var, raising=False)
        yield w


def _vendor(world: World, core_value: str = "{v}.core") -> str:
    vendor = f"{world.eng}_vendor"
    modules = {
        f"{vendor}/__init__.py": "",
        f"{vendor}.core": world.fmt(CORE),
        f"{vendor}.extra": world.fmt(EXTRA, v=vendor),
        f"{vendor}.entry": world.fmt(ENTRY, v=vendor),
    }
    eps = {
        world.ns.config.plugin_group: {
            "a_extra": f"{vendor}.extra:register",
            "b_core": core_value.format(v=vendor),
        }
    }
    write_distribution(world.root / "vendor", "vendor-plugins", "2.0", entry_points=eps,
                       modules=modules)  # fmt: skip
    import sys

    sys.path.insert(0, str(world.root / "vendor"))
    _metadata.clear_cache()
    return vendor


def _boot(world: World, vendor: str) -> tuple[str, Any, str]:
    status, value, _events, tb = run_child(
        child_bootstrap, world.spec(entry=f"{vendor}.entry:main")
    )
    return status, value, tb


def test_a_module_plugin_imported_by_a_failing_plugin_keeps_its_hooks_when_lenient(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor = _vendor(world)
    monkeypatch.setenv(world.ns.config.lenient_var, "1")
    monkeypatch.setenv(f"{world.prefix}_TEST_EXTRA_FAILS", "1")
    status, value, tb = _boot(world, vendor)
    assert status == "ok", tb
    # Before: "orig" (b_core's decorator discarded with a_extra), b_core loaded with 0.
    assert value["result"] == "core:orig"
    assert value["failed"] == ["a_extra"]
    assert value["loaded"] == {"b_core": 1}
    assert value["sources"] == [("core_around", "b_core")]


def test_a_module_plugin_imported_by_another_plugin_is_named_as_its_own(world: World) -> None:
    vendor = _vendor(world)
    status, value, tb = _boot(world, vendor)
    assert status == "ok", tb
    assert value["result"] == "core:orig:tail"
    # Before: both named a_extra, loaded {"a_extra": 2, "b_core": 0}.  What a_extra's
    # callback registered stays a_extra's, though its function lives in b_core's module.
    assert value["sources"] == [("core_around", "b_core"), ("tail", "a_extra")]
    assert value["loaded"] == {"a_extra": 1, "b_core": 1}


def test_a_callback_plugin_whose_module_another_plugin_imported_keeps_its_decorators(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b_core names a function of its module (``:helper``, which registers nothing): its
    module's decorators are its hooks all the same, wherever the module was first run."""
    vendor = _vendor(world, "{v}.core:helper")
    monkeypatch.setenv(world.ns.config.lenient_var, "1")
    monkeypatch.setenv(f"{world.prefix}_TEST_EXTRA_FAILS", "1")
    status, value, tb = _boot(world, vendor)
    assert status == "ok", tb
    assert value["result"] == "core:orig"
    assert value["loaded"] == {"b_core": 1}


def test_without_lenient_mode_the_failing_plugin_is_still_the_one_named(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor = _vendor(world)
    monkeypatch.setenv(f"{world.prefix}_TEST_EXTRA_FAILS", "1")
    status, value, tb = _boot(world, vendor)
    assert status == "error", value
    assert "plugin 'a_extra'" in tb and "missing_optional_dependency_of_extra" in tb, tb
    assert "plugin 'b_core'" not in tb, tb
