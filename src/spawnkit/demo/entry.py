"""The worker entry of the demo: adapts spawnkit's call convention to the seed's signature.

The ranks come from the spec and the pipe from ``extra["pipe_writer"]`` (absent under
``spawnkit launch`` or torchrun: the result is then the only report).  The scheduler module is
imported only inside the call, after the bootstrap patched it.
"""

from __future__ import annotations

import importlib
from typing import Any

from spawnkit.demo.server_args import ServerArgs

__all__ = ["PIPE_WRITER_KEY", "scheduler_entry"]

PIPE_WRITER_KEY = "pipe_writer"


def scheduler_entry(server_args: ServerArgs) -> dict[str, Any]:
    """Run this rank's scheduler; called by ``bootstrap_process`` after hooks are applied."""
    from spawnkit.bootstrap import current_spec

    if not isinstance(server_args, ServerArgs):
        raise TypeError(
            f"the demo's payload must be a spawnkit.demo.ServerArgs, got {type(server_args)!r}"
        )
    spec = current_spec()
    local_rank = spec.local_rank if spec is not None else 0
    rank = spec.rank if spec is not None else 0
    pipe_writer = spec.extra.get(PIPE_WRITER_KEY) if spec is not None else None
    # Resolve through the module attribute: a ``from`` import made earlier would
    # still hold the unpatched function.
    scheduler = importlib.import_module("spawnkit.demo.scheduler")
    try:
        result: dict[str, Any] = scheduler.run_scheduler_process(
            local_rank, rank, server_args, pipe_writer
        )
    finally:
        if pipe_writer is not None:
            pipe_writer.close()
    return result
