"""The four worked examples of docs/testing.md, verbatim, so the documentation cannot rot."""

from __future__ import annotations

import importlib
from multiprocessing import Pipe

import pytest

from spawnkit import Namespace
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


# --------------------------------------------------------------------------
# Example 4: a plugin for an SGLang-style engine (own namespace, per-rank pipe)
# --------------------------------------------------------------------------
MY_SRT = Namespace("my_srt", env_prefix="MY_SRT")  # groups my_srt.plugins, variables MY_SRT_*

SRT_ENGINE = {
    "my_srt.server_args": """
        from dataclasses import dataclass

        @dataclass
        class ServerArgs:
            model_path: str
            base_gpu_id: int = 0
    """,
    "my_srt.scheduler": """
        import os

        class Scheduler:
            def __init__(self, server_args, gpu_id):
                self.gpu_id = gpu_id

            def get_next_batch_to_run(self):
                return ["req-1", "req-2"]

        def run_scheduler_process(local_rank, rank, server_args, pipe_writer):
            scheduler = Scheduler(server_args, server_args.base_gpu_id + local_rank)
            pipe_writer.send({"status": "ready", "rank": rank, "gpu_id": scheduler.gpu_id})
            batch = scheduler.get_next_batch_to_run()
            pipe_writer.send({"status": "done", "rank": rank, "batch": batch})
            return batch
    """,
}
SRT_PLUGIN = {
    "my_srt_plugin": """
        from spawnkit.hooks import HookType
        from spawnkit.namespace import get_namespace

        def register():
            get_namespace("my_srt").hooks.register(
                "my_srt.scheduler.Scheduler.get_next_batch_to_run",
                "my_srt_plugin:only_first",
                HookType.AROUND,
            )

        def only_first(original_fn, self, *args, **kwargs):
            return original_fn(self, *args, **kwargs)[:1]
    """,
}


def scheduler_entry(server_args):
    """The adapter (as spawnkit.demo.entry:scheduler_entry): spawnkit calls entry(payload);
    the engine's function also wants the ranks and the pipe, which the spec carries."""
    from spawnkit.bootstrap import current_spec

    spec = current_spec()
    pipe_writer = spec.extra["pipe_writer"]
    scheduler = importlib.import_module("my_srt.scheduler")  # imported after the hooks
    try:
        return scheduler.run_scheduler_process(spec.local_rank, spec.rank, server_args, pipe_writer)
    finally:
        pipe_writer.close()


def install_srt(plugin_dist):
    plugin_dist("my-srt", modules=SRT_ENGINE)
    plugin_dist(
        "my-srt-plugin",
        "0.2.0",
        entry_points={"my_srt.plugins": {"only_first": "my_srt_plugin:register"}},
        modules=SRT_PLUGIN,
    )
    from my_srt.server_args import ServerArgs

    return ServerArgs(model_path="tiny", base_gpu_id=2)


def test_srt_plugin_changes_the_scheduler_in_a_worker(plugin_dist):
    server_args = install_srt(plugin_dist)
    reader, writer = Pipe(duplex=False)

    run = run_entry(
        scheduler_entry,
        server_args,
        namespace=MY_SRT,
        rank_extra=lambda rank: {"pipe_writer": writer},  # the seed's per-rank pipe
    )
    writer.close()  # the worker has its own copy

    assert run.result == ["req-1"]
    assert reader.recv() == {"status": "ready", "rank": 0, "gpu_id": 2}
    assert reader.recv() == {"status": "done", "rank": 0, "batch": ["req-1"]}
    (hook,) = run.report.hooks["my_srt.scheduler.Scheduler.get_next_batch_to_run"]
    assert "only_first" in hook["source"] and "my-srt-plugin" in hook["source"]


def test_srt_without_the_plugin(plugin_dist, plugin_allowlist):
    server_args = install_srt(plugin_dist)
    plugin_allowlist.none(namespace=MY_SRT)  # MY_SRT_PLUGINS="" for this test and its workers
    reader, writer = Pipe(duplex=False)

    run = run_entry(
        scheduler_entry,
        server_args,
        namespace=MY_SRT,
        rank_extra=lambda rank: {"pipe_writer": writer},
    )
    writer.close()

    assert run.result == ["req-1", "req-2"]
    assert reader.recv()["status"] == "ready"
    assert reader.recv()["batch"] == ["req-1", "req-2"]
    assert run.report.hooks == {}


def test_srt_plugin_in_process(plugin_dist, isolated_hooks_for):
    server_args = install_srt(plugin_dist)
    hooks = isolated_hooks_for(MY_SRT)  # MY_SRT.hooks, clean for this test
    import my_srt_plugin

    my_srt_plugin.register()
    hooks.apply_hooks()
    from my_srt.scheduler import run_scheduler_process

    reader, writer = Pipe(duplex=False)
    assert run_scheduler_process(0, 0, server_args, writer) == ["req-1"]
    assert reader.recv()["status"] == "ready"
    # no unapply(): the fixture restores MY_SRT's patches and fails the test if one leaked


def test_example_4_is_verbatim_in_the_docs():
    """The code above is the code docs/testing.md shows (imports aside)."""
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "testing.md").read_text()
    section = docs.split("## Example 4", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    body = block.split("from spawnkit.testing import run_entry\n", 1)[1].strip()
    assert body in Path(__file__).read_text()
