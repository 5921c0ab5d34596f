"""The class REPLACE of the demo's ``Scheduler``; imported only when hooks are applied."""

from __future__ import annotations

from typing import Any

from spawnkit.demo import trace
from spawnkit.demo.scheduler import Scheduler

__all__ = ["MyScheduler"]


class MyScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        print("Enhanced scheduler initialized!", flush=True)
        trace.record("my_general_plugin.replace", rank=self.dp_rank, cls=type(self).__name__)
