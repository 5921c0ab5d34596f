"""``Engine``: the demo's launcher side, starting one scheduler per rank with spawn_with_plugins.

The parent does what an engine's launcher does: capture ``ServerArgs`` as a
:class:`spawnkit.Payload` (bytes, unpickled in each worker only after its
hooks are applied), start the group in the ``spawnkit.demo`` namespace, wait
for every rank's bootstrap report, then for its result.  Every wait is
bounded by ``timeout``; a failing rank's root cause is raised as the
launcher's typed ``ChildError``.  Each rank gets its own one-way pipe, the
seed's ``pipe_writer``, through ``spawn_with_plugins(rank_extra=...)``: the
worker's spec then has the seed's ``SchedulerProcessSpec`` shape (local_rank,
rank, opaque ServerArgs bytes, pipe writer).  Importing this module imports
neither torch nor the scheduler; constructing an ``Engine`` where torch is not
installed is a ``MissingExtraError`` naming ``spawnkit[torch]``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe
from multiprocessing.connection import wait as mp_wait
from typing import Any

from spawnkit._extras import require_torch
from spawnkit.demo.entry import PIPE_WRITER_KEY
from spawnkit.demo.namespace import demo_namespace
from spawnkit.demo.server_args import ServerArgs

__all__ = ["ENTRY", "DemoRun", "Engine"]

ENTRY = "spawnkit.demo.entry:scheduler_entry"


@dataclass
class DemoRun:
    """One finished run: per rank the bootstrap report, the result and the pipe messages."""

    server_args: ServerArgs
    reports: list[Any]
    results: list[dict[str, Any]]
    pipe_messages: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    wall_seconds: float = 0.0
    ready_seconds: float = 0.0
    trace_error: str | None = None  # why Engine(trace=FILE) wrote no file (None: it did)

    def to_dict(self) -> dict[str, Any]:
        return {
            "server_args": self.server_args.to_dict(),
            "reports": [r.to_dict() if hasattr(r, "to_dict") else r for r in self.reports],
            "results": self.results,
            "pipe_messages": {str(k): v for k, v in sorted(self.pipe_messages.items())},
            "wall_seconds": self.wall_seconds,
            "ready_seconds": self.ready_seconds,
        }


class Engine:
    """Runs ``server_args.dp_size`` schedulers and gathers what they report."""

    def __init__(
        self,
        server_args: ServerArgs | None = None,
        *,
        start_method: str = "spawn",
        timeout: float = 120.0,
        env: dict[str, str] | None = None,
        progress: Callable[[int, str, float], object] | None = None,
        prefix_output: bool = False,
        trace: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        # The schedulers compute with torch: refuse here, once, not in every worker.
        require_torch("spawnkit.demo.Engine")
        self.server_args = server_args if server_args is not None else ServerArgs()
        self.start_method = start_method
        self.timeout = timeout
        self.env = dict(env or {})
        self.progress = progress
        self.prefix_output = prefix_output
        self.trace = trace  # spawn_with_plugins(trace=): the start-up trace file

    @classmethod
    def from_pretrained(cls, model_path: str = "spawnkit-demo/tiny-mlp", **kwargs: Any) -> Engine:
        """The seed's ``DiffGenerator.from_pretrained`` shape: ServerArgs fields as keywords."""
        engine_keys = {"start_method", "timeout", "env", "progress", "prefix_output", "trace"}
        engine_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in engine_keys}
        return cls(ServerArgs(model_path=model_path, **kwargs), **engine_kw)

    def run(self) -> DemoRun:
        """Launch, wait (bounded), collect; raises the group's first failure."""
        from spawnkit.launch import spawn_with_plugins
        from spawnkit.spec import Payload

        args = self.server_args
        started = time.monotonic()
        deadline = started + self.timeout
        pipes = [Pipe(duplex=False) for _ in range(args.dp_size)]
        try:
            try:
                group = spawn_with_plugins(
                    ENTRY,
                    Payload.capture(args),
                    nprocs=args.dp_size,
                    namespace=demo_namespace(),
                    start_method=self.start_method,
                    env=self.env,
                    ready_timeout=self.timeout,
                    join_timeout=self.timeout,
                    rank_extra=lambda rank: {PIPE_WRITER_KEY: pipes[rank][1]},
                    progress=self.progress,
                    prefix_output=self.prefix_output,
                    trace=self.trace,
                )
            finally:
                for _, writer in pipes:  # the workers hold their own copies now
                    writer.close()
            with group:
                reports = group.wait_ready(timeout=max(0.1, deadline - time.monotonic()))
                ready_at = time.monotonic()
                results = group.results(timeout=max(0.1, deadline - time.monotonic()))
            wall = time.monotonic() - started
            unwritten = self._trace_not_written(group)
            messages = _drain(
                [reader for reader, _ in pipes], max(1.0, deadline - time.monotonic())
            )
        finally:
            for reader, _ in pipes:
                with contextlib.suppress(OSError):
                    reader.close()
        return DemoRun(
            server_args=args,
            reports=list(reports),
            results=[r for r in results if isinstance(r, dict)],
            pipe_messages=messages,
            wall_seconds=wall,
            ready_seconds=ready_at - started,
            trace_error=unwritten,
        )

    def _trace_not_written(self, group: Any) -> str | None:
        if self.trace is None:
            return None
        from spawnkit.launch._trace import not_written

        return not_written(group)


def _drain(readers: list[Connection], timeout: float) -> dict[int, list[dict[str, Any]]]:
    """Every message of every rank's pipe, read to EOF (the group has finished), bounded."""
    messages: dict[int, list[dict[str, Any]]] = {}
    pending = list(readers)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for conn in mp_wait(pending, left):
            assert isinstance(conn, Connection)
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                pending.remove(conn)
                continue
            messages.setdefault(int(msg.get("rank", -1)), []).append(msg)
    return messages
