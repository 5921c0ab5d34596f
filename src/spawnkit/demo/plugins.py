"""The demo's own general plugins (group ``spawnkit.demo.plugins``): the seed's two examples.

Each notes what it did in :mod:`spawnkit.demo.trace`.  The decorator sits inside ``register()``:
at import time it would register once, and a registry reset between runs would lose the hook.
"""

from __future__ import annotations

import time
from typing import Any

from spawnkit.demo import trace
from spawnkit.demo.namespace import demo_namespace
from spawnkit.hooks import HookType

__all__ = ["BATCH_TARGET", "INIT_TARGET", "register_batch_timer", "register_init_banner"]

BATCH_TARGET = "spawnkit.demo.scheduler.Scheduler.get_next_batch_to_run"
INIT_TARGET = "spawnkit.demo.scheduler.Scheduler.__init__"


def register_batch_timer() -> None:
    """Entry point ``batch_timer``: times every ``get_next_batch_to_run`` call."""

    @demo_namespace().hooks.plugin_hook(BATCH_TARGET, type=HookType.AROUND)
    def time_next_batch(original_fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        batch = original_fn(*args, **kwargs)
        elapsed = time.perf_counter() - start
        scheduler = args[0] if args else None
        trace.record(
            "spawnkit.demo.batch_timer",
            rank=getattr(scheduler, "dp_rank", None),
            seconds=elapsed,
            batch_size=len(batch.request_ids) if batch is not None else 0,
        )
        return batch


def _announce_init(original_fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    result = original_fn(self, *args, **kwargs)
    print(f"Scheduler initialized! gpu_id={self.gpu_id}", flush=True)
    trace.record("spawnkit.demo.init_banner", rank=self.dp_rank, gpu_id=self.gpu_id)
    return result


def register_init_banner() -> None:
    """Entry point ``init_banner``: the seed's imperative AROUND hook on ``Scheduler.__init__``."""
    demo_namespace().hooks.register(INIT_TARGET, _announce_init, HookType.AROUND)
