"""Hook bodies of this plugin, imported by spawnkit when it applies them (after plugin loading)."""

from __future__ import annotations

from typing import Any

__all__ = ["bind_scheduler_device"]


def bind_scheduler_device(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``Scheduler.__init__``: make the scheduler's gpu_id this process's current device."""
    from spawnkit.demo import trace

    scheduler.platform.set_device(scheduler.gpu_id)
    trace.record(
        "my_platform_plugin.bind_device",
        rank=scheduler.dp_rank,
        gpu_id=scheduler.gpu_id,
        device=scheduler.platform.device_name,
    )
    return None
