"""Example general plugin for spawnkit's demo engine: the seed's three hook forms.

``register()`` is the entry point ``load_plugins()`` calls in every worker.
It only *registers*; spawnkit patches the targets afterwards, so nothing
here imports the scheduler module.  The class replacement is therefore
registered by reference (``"my_general_plugin.scheduler:MyScheduler"``): its
module subclasses ``Scheduler`` and is imported when the hooks are applied.
"""

from __future__ import annotations

import time
from typing import Any

from spawnkit.demo import trace
from spawnkit.demo.namespace import demo_namespace
from spawnkit.hooks import HookType

__all__ = ["my_hook", "register"]

SCHEDULER = "spawnkit.demo.scheduler.Scheduler"


def my_hook(original_fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    result = original_fn(self, *args, **kwargs)
    print(f"Scheduler initialized! gpu_id={self.gpu_id}", flush=True)
    trace.record("my_general_plugin.init", rank=self.dp_rank, gpu_id=self.gpu_id)
    return result


def register() -> None:
    """Entry point called by load_plugins()."""
    registry = demo_namespace().hooks

    # --- Imperative API ---
    registry.register(f"{SCHEDULER}.__init__", my_hook, HookType.AROUND)

    # --- Decorator API ---
    @demo_namespace().plugin_hook(f"{SCHEDULER}.get_next_batch_to_run", type=HookType.AROUND)
    def my_timer(original_fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = original_fn(*args, **kwargs)
        elapsed = time.perf_counter() - start
        print(f"Elapsed: {elapsed:.3f}s", flush=True)
        trace.record("my_general_plugin.timer", seconds=elapsed)
        return result

    # --- Class replacement (REPLACE) ---
    registry.register(SCHEDULER, "my_general_plugin.scheduler:MyScheduler", HookType.REPLACE)
