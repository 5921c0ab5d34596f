"""The seed's general plugin, unchanged but for the engine's name, on an engine built on spawnkit.

The engine written here does what the README tells engine developers to do:
its own ``Namespace`` and a ``plugins/hook_registry`` module of one line per
name (``HookRegistry = NS.HookRegistry`` ...).  The plugin is the seed's
``my_general_plugin`` text (class-level ``HookRegistry.register`` AROUND on
``Scheduler.__init__``, the ``@plugin_hook`` timer, a class REPLACE), installed
as a real distribution, and a decorator-only plugin whose entry point names
its module.  The engine's launching script runs as a real program, spawning
two workers; each must print what the seed's README says to look for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from spawnkit.errors import HookRegistrationError
from spawnkit.hooks import HookRegistry as BaseRegistry
from spawnkit.hooks import HookType
from spawnkit.namespace import Namespace
from spawnkit.testing import write_distribution

ENGINE = {
    "{eng}.namespace": """
        import spawnkit

        NS = spawnkit.Namespace("{eng}", env_prefix="{PREFIX}")
        """,
    # The seed-compatible module: one line per name.
    "{eng}.plugins.hook_registry": """
        from {eng}.namespace import NS

        HookRegistry = NS.HookRegistry
        HookType = NS.HookType
        plugin_hook = NS.plugin_hook
        """,
    "{eng}.managers.scheduler": """
        class Scheduler:
            def __init__(self, gpu_id, dp_rank=0):
                self.gpu_id = gpu_id
                self.dp_rank = dp_rank

            def get_next_batch_to_run(self):
                return ["req"]
        """,
    "{eng}.worker": """
        def run_scheduler():
            from spawnkit.bootstrap import current_report, current_spec
            from {eng}.managers.scheduler import Scheduler
            from {eng}.plugins.hook_registry import HookRegistry, HookType
            import my_general_plugin

            rank = current_spec().rank
            scheduler = Scheduler(gpu_id=rank, dp_rank=rank)
            init = "{eng}.managers.scheduler.Scheduler.__init__"
            return {
                "cls": type(scheduler).__name__,
                "batch": scheduler.get_next_batch_to_run(),
                "applied": HookRegistry.is_hook_applied(
                    init, my_general_plugin.my_hook, HookType.AROUND
                ),
                "applied_as_before": HookRegistry.is_hook_applied(
                    init, my_general_plugin.my_hook, HookType.BEFORE
                ),
                "plugins": [p["name"] for p in current_report().plugins],
            }
        """,
    "{eng}.launch": """
        import json
        from spawnkit import spawn_with_plugins
        from {eng}.namespace import NS

        def main():
            with spawn_with_plugins(
                "{eng}.worker:run_scheduler", nprocs=2, namespace=NS, ready_timeout=120
            ) as group:
                results = group.results(timeout=120)
            print("RESULTS " + json.dumps(results), flush=True)

        if __name__ == "__main__":
            main()
        """,
}

# The seed's my_general_plugin; the only change is "sglang.srt" -> the engine's package.
SEED_PLUGIN = {
    "my_general_plugin.__init__": """
        import time

        from {eng}.plugins.hook_registry import HookRegistry, HookType, plugin_hook

        def register():
            \"\"\"Entry point called by load_plugins().\"\"\"
            HookRegistry.register(
                "{eng}.managers.scheduler.Scheduler.__init__",
                my_hook,
                HookType.AROUND,
            )
            # --- Class replacement (REPLACE) ---
            HookRegistry.register(
                "{eng}.managers.scheduler.Scheduler",
                "my_general_plugin.scheduler:MyScheduler",
                HookType.REPLACE,
            )

        def my_hook(original_fn, self, *args, **kwargs):
            result = original_fn(self, *args, **kwargs)
            print(f"Scheduler initialized! gpu_id={self.gpu_id}")
            return result

        # --- Decorator API ---
        @plugin_hook(
            "{eng}.managers.scheduler.Scheduler.get_next_batch_to_run",
            type=HookType.AROUND,
        )
        def my_timer(original_fn, *args, **kwargs):
            start = time.perf_counter()
            result = original_fn(*args, **kwargs)
            print(f"Elapsed: {time.perf_counter() - start:.3f}s")
            return result
        """,
    "my_general_plugin.scheduler": """
        from {eng}.managers.scheduler import Scheduler

        class MyScheduler(Scheduler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                print("Enhanced scheduler initialized!")
        """,
}

# Decorators only: one entry point names the module itself, one a no-op function.
DECORATOR_ONLY = {
    "deco_only_plugin.__init__": """
        from {eng}.plugins.hook_registry import HookType, plugin_hook

        @plugin_hook(
            "{eng}.managers.scheduler.Scheduler.get_next_batch_to_run", type=HookType.AFTER
        )
        def tag_batch(result, *args, **kwargs):
            return result + ["deco"]
        """,
    "deco_only_plugin.noop": """
        from {eng}.plugins.hook_registry import HookType, plugin_hook

        @plugin_hook(
            "{eng}.managers.scheduler.Scheduler.get_next_batch_to_run", type=HookType.AFTER
        )
        def tag_again(result, *args, **kwargs):
            return result + ["noop"]

        def register():
            pass
        """,
}


def _fmt(modules: dict[str, str], **names: str) -> dict[str, str]:
    out = {}
    for key, text in modules.items():
        source = textwrap.dedent(text)
        for name, value in names.items():
            source = source.replace("{" + name + "}", value)
        out[key.replace("{eng}", names["eng"])] = source
    return out


def test_seed_plugin_runs_unchanged_in_two_workers_of_an_engine(tmp_path: Path) -> None:
    uid = uuid.uuid4().hex[:8]
    eng, prefix = f"seedeng_{uid}", f"SEEDENG_{uid.upper()}"
    site = tmp_path / "site"
    group = f"{eng}.plugins"
    write_distribution(site, f"{eng}-engine", "1.0", modules=_fmt(ENGINE, eng=eng, PREFIX=prefix))
    write_distribution(
        site,
        "my-general-plugin",
        "0.1.0",
        entry_points={group: {"my_plugin": "my_general_plugin:register"}},
        modules=_fmt(SEED_PLUGIN, eng=eng),
    )
    write_distribution(
        site,
        "deco-only-plugin",
        "0.1.0",
        entry_points={
            group: {"deco": "deco_only_plugin", "deco_noop": "deco_only_plugin.noop:register"}
        },
        modules=_fmt(DECORATOR_ONLY, eng=eng),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefix)}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", f"{eng}.launch"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    # Two workers share the pipe and print() writes text and newline separately, so lines
    # can interleave: count each message in the text (one write each), not whole lines.
    out = proc.stdout
    for rank in (0, 1):
        assert out.count(f"Scheduler initialized! gpu_id={rank}") == 1, out
    assert out.count("Enhanced scheduler initialized!") == 2, out
    assert out.count("Elapsed: ") == 2, out
    # The launcher prints after both workers exited: its line is whole and last.
    lines = out.splitlines()
    results: list[dict[str, Any]] = json.loads(lines[-1].removeprefix("RESULTS "))
    for result in results:
        assert result["cls"] == "MyScheduler"  # the class REPLACE
        assert sorted(result["batch"]) == ["deco", "noop", "req"]  # the decorator-only plugins
        assert result["applied"] is True and result["applied_as_before"] is False
        assert result["plugins"] == ["deco", "deco_noop", "my_plugin"]


@pytest.fixture
def ns() -> Namespace:
    return Namespace(f"seedcls_{uuid.uuid4().hex[:8]}", env_prefix="SEEDCLS")


def test_bound_class_acts_on_its_namespace_and_only_there(ns: Namespace) -> None:
    cls = ns.HookRegistry
    assert cls is ns.HookRegistry and issubclass(cls, BaseRegistry)
    assert ns.HookType is HookType
    target = "json.JSONEncoder.encode"
    with cls.isolated():
        cls.register(target, "json:dumps", HookType.AFTER)
        assert [r.target for r in ns.hooks.registrations()] == [target]
        assert BaseRegistry.registrations() == []  # the default registry saw nothing
        assert cls.registered_targets() == [target]
    with pytest.raises(HookRegistrationError, match="used as a class"):
        cls()
