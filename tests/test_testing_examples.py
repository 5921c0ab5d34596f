"""The three worked examples of docs/testing.md, verbatim, so the documentation cannot rot."""

from __future__ import annotations

import pytest

from spawnkit.bootstrap import current_spec
from spawnkit.errors import PlatformUnavailableError
from spawnkit.hooks import HookType
from spawnkit.testing import run_entry

# --------------------------------------------------------------------------
# Example 1: testing a platform plugin
# --------------------------------------------------------------------------
PLATFORM_PLUGIN = {
    "my_platform_plugin": """
        import os

        def activate():
            if os.environ.get("MY_DEVICE_VISIBLE") == "1":
                return "my_platform_plugin.platform.MyPlatform"
            return None
    """,
    "my_platform_plugin.platform": """
        from spawnkit.platforms.interface import Platform, PlatformEnum

        class MyPlatform(Platform):
            _enum = PlatformEnum.OOT
            device_name = "my_device"
            device_type = "my_device"

            def get_device_count(self) -> int:
                return 2
    """,
}


def current_device():
    from spawnkit.platforms import current_platform

    return current_platform.device_name, current_platform.get_device_count()


def test_platform_plugin_is_selected_in_the_worker(plugin_dist, platform_selection, monkeypatch):
    plugin_dist(
        "my-platform-plugin",
        "0.1.0",
        entry_points={"spawnkit.platforms": {"my_device": "my_platform_plugin:activate"}},
        modules=PLATFORM_PLUGIN,
    )
    monkeypatch.setenv("MY_DEVICE_VISIBLE", "1")
    platform_selection("my_device")

    run = run_entry(current_device)

    assert run.result == ("my_device", 2)
    assert run.report.platform["name"] == "my_device"
    assert run.report.platform["dist"] == "my-platform-plugin"


def test_platform_plugin_without_its_hardware_fails_clearly(
    plugin_dist, platform_selection, monkeypatch
):
    plugin_dist(
        "my-platform-plugin",
        "0.1.0",
        entry_points={"spawnkit.platforms": {"my_device": "my_platform_plugin:activate"}},
        modules=PLATFORM_PLUGIN,
    )
    monkeypatch.delenv("MY_DEVICE_VISIBLE", raising=False)
    platform_selection("my_device")

    with pytest.raises(PlatformUnavailableError, match="my_device"):
        run_entry(current_device)


# --------------------------------------------------------------------------
# Example 2: testing a hook plugin
# --------------------------------------------------------------------------
ENGINE = {
    "my_engine.scheduler": """
        class Scheduler:
            def __init__(self, gpu_id):
                self.gpu_id = gpu_id

            def get_next_batch_to_run(self):
                return ["req-1", "req-2"]
    """,
}
HOOK_PLUGIN = {
    "my_general_plugin": """
        from spawnkit.hooks import HookRegistry, HookType

        def register():
            HookRegistry.register(
                "my_engine.scheduler.Scheduler.get_next_batch_to_run",
                "my_general_plugin.hooks:only_first",
                HookType.AROUND,
            )
    """,
    "my_general_plugin.hooks": """
        def only_first(original_fn, self, *args, **kwargs):
            return original_fn(self, *args, **kwargs)[:1]
    """,
}


def next_batch():
    from my_engine.scheduler import Scheduler  # imported in the entry: after patching

    return Scheduler(gpu_id=0).get_next_batch_to_run()


def test_hook_plugin_patches_the_worker(plugin_dist):
    plugin_dist("my-engine", modules=ENGINE)
    plugin_dist(
        "my-general-plugin",
        "0.1.0",
        entry_points={"spawnkit.plugins": {"my_plugin": "my_general_plugin:register"}},
        modules=HOOK_PLUGIN,
    )

    run = run_entry(next_batch)

    assert run.result == ["req-1"]
    target = "my_engine.scheduler.Scheduler.get_next_batch_to_run"
    (hook,) = run.report.hooks[target]
    assert hook["type"] == "AROUND"
    assert "my_plugin" in hook["source"] and "my-general-plugin" in hook["source"]


def test_hook_plugin_without_it_the_worker_is_unpatched(plugin_dist):
    plugin_dist("my-engine", modules=ENGINE)
    plugin_dist(
        "my-general-plugin",
        entry_points={"spawnkit.plugins": {"my_plugin": "my_general_plugin:register"}},
        modules=HOOK_PLUGIN,
    )
    run = run_entry(next_batch, plugins=[])
    assert run.result == ["req-1", "req-2"]
    assert run.report.hooks == {}


def test_hook_plugin_in_process(plugin_dist, isolated_hooks):
    plugin_dist("my-engine", modules=ENGINE)
    plugin_dist("my-general-plugin", modules=HOOK_PLUGIN)
    import my_general_plugin

    my_general_plugin.register()  # registers on the isolated default registry
    isolated_hooks.apply_hooks()

    from my_engine.scheduler import Scheduler

    assert Scheduler(gpu_id=0).get_next_batch_to_run() == ["req-1"]
    assert isolated_hooks.registrations()[0].hook_type is HookType.AROUND
    # no unapply(): isolated_hooks restores the patch, and fails the test if one leaked


# --------------------------------------------------------------------------
# Example 3: testing a custom entry function
# --------------------------------------------------------------------------
def sum_of_squares(n):
    """The entry under test: what it returns travels back to the test."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    spec = current_spec()
    return {"rank": spec.rank, "world_size": spec.world_size, "value": sum(i * i for i in range(n))}


def test_custom_entry_function():
    run = run_entry(sum_of_squares, 4)
    assert run.result == {"rank": 0, "world_size": 1, "value": 14}
    assert set(run.report.stage_seconds) >= {"load_plugins", "apply_hooks", "resolve_entry"}


def test_custom_entry_function_error_has_the_child_traceback():
    with pytest.raises(ValueError, match="n must be >= 0") as info:
        run_entry(sum_of_squares, -1)
    assert "in sum_of_squares" in info.value.__cause__.text
