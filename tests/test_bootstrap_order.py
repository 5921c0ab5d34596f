"""Every ordering guarantee of the bootstrap, checked in real spawned workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _bootstrap_helpers import (
    World,
    child_bootstrap,
    child_stages,
    isolated_imports,
    make_world,
    run_child,
)
from spawnkit.bootstrap import Bootstrapper, Stage
from spawnkit.bootstrap.stages import SHARED_STAGES, STAGE_ORDER, STAGES
from spawnkit.errors import BootstrapOrderError, LazyProxyError
from spawnkit.spec import _phase

ENTRY_HOOK_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def wrap_main(original, *args, **kwargs):
        out = original(*args, **kwargs)
        out["entry_was_patched"] = True
        return out

    def register():
        NS.hooks.register("{eng}.worker.main", "{mod}:wrap_main", HookType.AROUND)
    """


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with isolated_imports():
        yield make_world(tmp_path)
    _phase.leave_worker()


def test_stages_run_in_the_documented_order(world: World) -> None:
    world.add_plugin("p1")
    status, value, events, tb = run_child(child_bootstrap, world.spec(payload=world.payload(5)))
    assert status == "ok", tb
    # platform first, plugins see no target imported, the target is imported by apply,
    # the payload unpickles against patched code, then the entry runs patched code
    assert value["events"] == [
        "platform init",
        ("plugin p1", False),
        "import sched",
        "unpickle:patched:orig",
        "entry",
    ]
    assert value["result"] == "patched:orig" and value["payload"] == 5
    names = [s.value for s in STAGE_ORDER]
    expected: list[object] = []
    for name in names[:-1]:
        expected += [("started", name), ("finished", name)]
    expected += ["ready", ("started", "entry"), ("finished", "entry")]
    got = [e[0] if e[0] == "ready" else e for e in events]
    assert got == expected
    # the report given to ready() has every stage before the entry, timed
    ready = next(e[1] for e in events if e[0] == "ready")
    assert list(ready["stage_seconds"]) == names[:-1]
    assert all(v >= 0 for v in ready["stage_seconds"].values())


def test_entry_is_resolved_after_patching(world: World) -> None:
    world.add_plugin("entryhook", ENTRY_HOOK_PLUGIN)
    status, value, _, tb = run_child(child_bootstrap, world.spec())
    assert status == "ok", tb
    assert value["entry_was_patched"] is True


@pytest.mark.parametrize(
    ("calls", "fragment", "expected"),
    [
        (["load_plugins"], "called too early", "arm_parent_death"),
        (["arm_parent_death", "arm_parent_death"], "already ran", "initialize_platform"),
        (["arm_parent_death", "apply_hooks"], "called too early", "initialize_platform"),
        (
            ["arm_parent_death", "initialize_platform", "load_plugins", "call_entry"],
            "called too early",
            "apply_hooks",
        ),
    ],
)
def test_stage_called_early_or_twice_names_the_stage_expected(
    world: World, calls: list[str], fragment: str, expected: str
) -> None:
    outcomes = run_child(child_stages, world.spec(), calls)
    assert [o[0] for o in outcomes[:-1]] == ["ok"] * (len(calls) - 1)
    status, err = outcomes[-1]
    assert status == "error" and isinstance(err, BootstrapOrderError), err
    assert fragment in str(err) and repr(expected) in str(err)
    assert err.expected == expected and err.rank == 0 and err.pid and err.host


def test_no_stage_runs_after_a_failed_one(world: World) -> None:
    spec = world.spec(platform="no_such_platform")
    outcomes = run_child(
        child_stages, spec, ["arm_parent_death", "initialize_platform", "load_plugins"]
    )
    assert outcomes[1][0] == "error"
    _status, err = outcomes[2]
    assert isinstance(err, BootstrapOrderError)
    assert "already failed in stage 'initialize_platform'" in str(err)


def test_payload_and_lazy_proxy_refuse_before_hooks_are_applied(world: World) -> None:
    world.add_plugin("p1")
    calls = [
        "arm_parent_death",
        "initialize_platform",
        "load_plugins",
        "payload",
        f"lazy:{world.eng}.sched:Scheduler",
        "apply_hooks",
        "payload",
        f"lazy:{world.eng}.sched:Scheduler",
    ]
    outcomes = run_child(child_stages, world.spec(payload=world.payload(1)), calls)
    assert [o[0] for o in outcomes] == ["ok"] * 3 + ["error", "error"] + ["ok"] * 3
    assert isinstance(outcomes[3][1], BootstrapOrderError)
    assert "before the bootstrap applied hooks" in str(outcomes[3][1])
    assert isinstance(outcomes[4][1], LazyProxyError)


def test_in_process_order_errors_without_running_anything(world: World) -> None:
    boot = Bootstrapper(world.spec())
    assert boot.next_stage is Stage.ARM_PARENT_DEATH
    with pytest.raises(BootstrapOrderError, match="'resolve_entry' called too early"):
        boot.resolve_entry()
    assert boot.next_stage is Stage.ARM_PARENT_DEATH  # a misuse does not consume a stage


def test_each_row_of_the_stage_table_is_run_by_the_method_it_names(world: World) -> None:
    # The table is the order: every stage once, and STAGE_ORDER / SHARED_STAGES read from it.
    assert sorted(row.stage for row in STAGES) == sorted(Stage)
    assert tuple(row.stage for row in STAGES) == STAGE_ORDER
    assert SHARED_STAGES == (Stage.PLATFORM, Stage.PLUGINS, Stage.HOOKS)
    boot = Bootstrapper(world.spec())
    for row in STAGES[1:]:
        method = getattr(boot, row.method)
        assert method.__name__ == row.method and method.__doc__
        # Called first, each method is refused as the stage its row names, and runs nothing.
        with pytest.raises(BootstrapOrderError, match="called too early") as info:
            method()
        assert info.value.stage == row.stage.value
        assert info.value.expected == STAGE_ORDER[0].value
    assert boot.next_stage is STAGE_ORDER[0] and not boot.stage_seconds
