"""Every registration has a state and a reason, in the registry and in a real worker's report;
a hook registered after the apply stage is applied at once, or refused where nothing applies it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from _bootstrap_helpers import World, child_bootstrap, isolated_imports, make_world, run_child
from spawnkit.bootstrap.report import BootstrapReport
from spawnkit.hooks import HookRegistry, HookSource, HookStatus

if TYPE_CHECKING:
    from _hooks_support import Modules

#: Four hooks, one of each outcome; the worker's entry reports what it saw.
MIXED = """
    import sys
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace

    NS = Namespace("{ns}", "{PREFIX}")

    def around(original, self):
        return "{name}:" + original(self)

    def never():
        return False

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:around", HookType.AROUND,
                          on_import=True)
        NS.hooks.register("vllm_absent_xyz.layers.f", "{mod}:around", optional=True)
        NS.hooks.register("{eng}.config.ServerArgs.__init__", "{mod}:around", HookType.AROUND,
                          condition=never)
        NS.hooks.provide_module("aiter_absent_xyz.ops")

    def entry():
        from spawnkit.bootstrap import current_report
        before = "{eng}.sched" in sys.modules
        from {eng}.sched import Scheduler
        status = [(r.target, r.state, r.reason) for r in NS.hooks.status()]
        return {{"before": before, "run": Scheduler().run(),
                 "report": current_report().to_dict(), "status": status,
                 "text": current_report().format()}}
    """

#: The entry registers hooks itself, after the bootstrap applied everything.
LATE = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace

    NS = Namespace("{ns}", "{PREFIX}")

    def around(original, self):
        return "late:" + original(self)

    def register():
        pass

    def entry():
        from {eng}.sched import Scheduler
        NS.hooks.register("{eng}.sched.Scheduler.run", around, HookType.AROUND)
        return {{"run": Scheduler().run(), "states": [r.state for r in NS.hooks.status()]}}

    def entry_default_registry():
        from spawnkit.hooks import HookRegistry
        from spawnkit.errors import HookRegistrationError
        try:
            HookRegistry.register("{eng}.sched.Scheduler.run", around, HookType.AROUND)
        except HookRegistrationError as exc:
            return {{"error": str(exc), "n": len(HookRegistry.registrations())}}
        return {{"error": None}}
    """


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with isolated_imports():
        yield make_world(tmp_path)


def _boot(world: World, **changes: Any) -> Any:
    status, value, _events, tb = run_child(child_bootstrap, world.spec(**changes))
    assert status == "ok", tb
    return value


def test_worker_report_carries_each_hooks_state_and_reason(world: World) -> None:
    mod = world.add_plugin("a", MIXED)
    value = _boot(world, entry=f"{mod}:entry")
    assert value["before"] is False  # on_import: the apply stage did not import the target
    assert value["run"] == "a:orig"  # ... and its first import applied the hook
    hooks = value["report"]["hooks"]
    states = {t: [(h["state"], h["reason"]) for h in hs] for t, hs in hooks.items()}
    assert states[f"{world.eng}.sched.Scheduler.run"][0][0] == "pending"
    assert states["vllm_absent_xyz.layers.f"] == [
        ("skipped", "module 'vllm_absent_xyz' is not installed")
    ]
    (cond,) = states[f"{world.eng}.config.ServerArgs.__init__"]
    assert cond == ("skipped", f"condition {mod}:never is false")
    assert states["aiter_absent_xyz.ops"][0][0] == "provided"
    status = {t: s for t, s, _ in value["status"]}
    assert status[f"{world.eng}.sched.Scheduler.run"] == "applied"  # after the entry's import
    text = value["text"]
    assert "skipped" in text and "module 'vllm_absent_xyz' is not installed" in text


def test_hook_registered_by_the_entry_is_applied_at_once(world: World) -> None:
    mod = world.add_plugin("a", LATE)
    value = _boot(world, entry=f"{mod}:entry")
    assert value == {"run": "late:orig", "states": ["applied"]}


def test_default_registry_in_a_namespaced_worker_is_refused(world: World) -> None:
    mod = world.add_plugin("a", LATE)
    value = _boot(world, entry=f"{mod}:entry_default_registry")
    assert value["error"] is not None and value["n"] == 0
    assert "NS.hooks" in value["error"] and world.ns.name in value["error"]


def test_status_records_in_registration_order(mods: Modules, registry: type[HookRegistry]) -> None:
    mods.load("lib", "def f(x):\n    return x\n")
    src = HookSource("p", "p-dist", "1")
    registry.register(mods.name("lib.f"), lambda r, x: r, source=src)
    registry.provide_module(f"prov_{mods.pkg}", source=src)
    registry.register(mods.name("lib.g"), lambda r: r, source=src)
    rows = registry.status()
    assert [r.state for r in rows] == ["pending", "pending", "pending"]
    registry.apply_hooks(strict=False)
    rows = registry.status()
    assert [(r.hook_type, r.state) for r in rows] == [
        ("AFTER", "applied"),
        ("PROVIDE", "provided"),
        ("AFTER", "failed"),
    ]
    assert all(isinstance(r, HookStatus) and r.source == src for r in rows)
    assert "has no attribute 'g'" in rows[2].reason
    assert set(rows[0].to_dict()) == {"type", "hook", "source", "state", "reason"}
    del sys.modules[f"prov_{mods.pkg}"]


def test_report_format_shows_states() -> None:
    report = BootstrapReport(
        rank=0,
        pid=1,
        host="h",
        namespace="n",
        hooks={
            "a.f": [
                {
                    "type": "AFTER",
                    "hook": "p.h",
                    "source": "plugin 'p'",
                    "state": "applied",
                    "reason": "",
                }
            ],
            "vllm.g": [
                {
                    "type": "AFTER",
                    "hook": "p.h",
                    "source": "plugin 'p'",
                    "state": "skipped",
                    "reason": "module 'vllm' is not installed",
                }
            ],
        },
    )
    text = report.format()
    assert "1 applied" in text and "1 skipped" in text and "a.f: AFTER from plugin 'p'\n" in text
    assert "vllm.g: AFTER from plugin 'p': skipped (module 'vllm' is not installed)" in text
