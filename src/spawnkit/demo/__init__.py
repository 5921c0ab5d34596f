"""spawnkit's demo engine: a tiny serving engine whose workers installed plugins change.

Shaped like the seed (``ServerArgs`` as payload bytes, a hookable ``Scheduler``,
``run_scheduler_process``), in the namespace ``spawnkit.demo``.  Importing it imports neither
torch nor the scheduler: ``Engine`` is a lazy proxy and ``current_platform`` resolves on access.
"""

from __future__ import annotations

from typing import Any

from spawnkit.bootstrap.lazy import lazy
from spawnkit.demo.namespace import DEMO_ENV_PREFIX, DEMO_NAMESPACE, demo_namespace
from spawnkit.demo.server_args import ServerArgs

__all__ = [
    "DEMO_ENV_PREFIX",
    "DEMO_NAMESPACE",
    "Engine",
    "ServerArgs",
    "current_platform",
    "demo_namespace",
]

#: The demo engine's launcher class, imported on first use.
Engine: Any = lazy("spawnkit.demo.engine:Engine")


def __getattr__(name: str) -> Any:
    if name == "current_platform":
        return demo_namespace().current_platform
    raise AttributeError(f"module 'spawnkit.demo' has no attribute {name!r}")
