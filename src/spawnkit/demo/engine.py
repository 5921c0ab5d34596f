"""``Engine``: the demo's launcher side, starting one scheduler per rank with spawn_with_plugins.

The parent does what an engine's launcher does: capture ``ServerArgs`` as a
:class:`spawnkit.Payload` (bytes, unpickled in each worker only after its
hooks are applied), start the group in the ``spawnkit.demo`` namespace, wait
for every rank's bootstrap report, then for its result.  Every wait is
bounded by ``timeout``; a failing rank's root cause is raised as the
launcher's typed ``ChildError``.  Importing this module imports neither
torch nor the scheduler.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from spawnkit.demo._pipe import PIPE_ADDRESS_VAR, PipeServer
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
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.server_args = server_args if server_args is not None else ServerArgs()
        self.start_method = start_method
        self.timeout = timeout
        self.env = dict(env or {})

    @classmethod
    def from_pretrained(cls, model_path: str = "spawnkit-demo/tiny-mlp", **kwargs: Any) -> Engine:
        """The seed's ``DiffGenerator.from_pretrained`` shape: ServerArgs fields as keywords."""
        engine_keys = {"start_method", "timeout", "env"}
        engine_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in engine_keys}
        return cls(ServerArgs(model_path=model_path, **kwargs), **engine_kw)

    def run(self) -> DemoRun:
        """Launch, wait (bounded), collect; raises the group's first failure."""
        from spawnkit.bootstrap import spawn_with_plugins
        from spawnkit.spec import Payload

        args = self.server_args
        started = time.monotonic()
        deadline = started + self.timeout
        with PipeServer(args.dp_size) as pipes:
            group = spawn_with_plugins(
                ENTRY,
                Payload.capture(args),
                nprocs=args.dp_size,
                namespace=demo_namespace(),
                start_method=self.start_method,
                env={**self.env, PIPE_ADDRESS_VAR: pipes.address},
                ready_timeout=self.timeout,
                join_timeout=self.timeout,
            )
            with group:
                reports = group.wait_ready(timeout=max(0.1, deadline - time.monotonic()))
                ready_at = time.monotonic()
                results = group.results(timeout=max(0.1, deadline - time.monotonic()))
            wall = time.monotonic() - started
            messages: dict[int, list[dict[str, Any]]] = {}
            for msg in pipes.messages(timeout=max(1.0, deadline - time.monotonic())):
                messages.setdefault(int(msg.get("rank", -1)), []).append(msg)
        return DemoRun(
            server_args=args,
            reports=list(reports),
            results=[r for r in results if isinstance(r, dict)],
            pipe_messages=messages,
            wall_seconds=wall,
            ready_seconds=ready_at - started,
        )
