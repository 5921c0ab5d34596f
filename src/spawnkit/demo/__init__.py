"""spawnkit's demo engine: a tiny serving engine whose workers installed plugins change.

It has the seed's shape: ``ServerArgs`` travels as opaque payload bytes,
``Scheduler`` (in :mod:`spawnkit.demo.scheduler`) is what plugins hook, and
``run_scheduler_process(local_rank, rank, server_args, pipe_writer)`` is a
worker's body.  Its namespace is ``spawnkit.demo`` (variables
``SPAWNKIT_DEMO_*``), so its plugins never load in other engines.

Importing this package imports neither torch nor the scheduler: ``Engine``
is a lazy proxy (safe at a script's top level, as the seed's offline
``DiffGenerator`` example requires), and ``current_platform`` is resolved on
first access.
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
