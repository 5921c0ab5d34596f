"""The demo engine's scheduler: the hook target the seed's plugins patch.

Being a target, it is imported only after a worker applied its hooks (by
:mod:`spawnkit.demo.entry`); the import guard fails a worker that imported it earlier.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from spawnkit._extras import reraise_torch_import

try:
    import torch
except ImportError as _exc:  # a worker of the demo namespace where torch is missing
    reraise_torch_import(_exc, "spawnkit.demo.scheduler (the demo engine's workers)")

from spawnkit.demo import trace
from spawnkit.demo.model import build_model, request_input
from spawnkit.demo.namespace import demo_namespace
from spawnkit.demo.server_args import ServerArgs

__all__ = ["Batch", "Scheduler", "SchedulerResult", "run_scheduler_process"]


@dataclass(frozen=True)
class Batch:
    """Requests run together in one forward pass."""

    index: int
    request_ids: tuple[int, ...]


@dataclass
class SchedulerResult:
    """What one scheduler sends home: outputs, speed, and what the hooks did (plain types)."""

    rank: int
    gpu_id: int
    pid: int
    platform: str
    device: str
    scheduler_class: str
    device_note: str = ""  # set when gpu_id has no device of its own and shares one
    checksums: dict[int, float] = field(default_factory=dict)
    batches: int = 0
    tokens: int = 0
    seconds: float = 0.0
    hook_events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "gpu_id": self.gpu_id,
            "pid": self.pid,
            "platform": self.platform,
            "device": self.device,
            "device_note": self.device_note,
            "scheduler_class": self.scheduler_class,
            "checksums": {str(k): v for k, v in sorted(self.checksums.items())},
            "batches": self.batches,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "hook_events": list(self.hook_events),
        }


def _torch_device(platform: Any, gpu_id: int) -> tuple[torch.device, str]:
    """The device this scheduler computes on, and a note when it is not ``gpu_id``'s own.

    An accelerator's device is indexed by ``gpu_id``, as an engine's scheduler pins its GPU:
    the bare device type would put every rank on device 0 while each reported its own
    ``gpu_id``.  With fewer devices than schedulers, ``gpu_id`` wraps around, and the note says
    which device is shared (the base platform computes on the CPU: one device, no note).
    """
    device_type = getattr(platform, "device_type", "") or "cpu"
    try:
        torch.device(device_type)
    except RuntimeError as exc:
        raise RuntimeError(
            f"platform {type(platform).__qualname__} names torch device type {device_type!r}, "
            f"which this torch build does not know ({exc}). The demo computes on "
            "platform.device_type; make the platform name a device torch can allocate on."
        ) from exc
    if device_type == "cpu":
        return torch.device("cpu"), ""
    try:
        count = int(platform.get_device_count())
    except Exception:  # a platform that cannot count its devices: its current one
        return torch.device(device_type), ""
    if count <= 0:
        return torch.device(device_type), ""
    index = gpu_id % count
    note = (
        ""
        if index == gpu_id
        else f"gpu_id {gpu_id} has no {device_type} device of its own ({count} visible): "
        f"it shares {device_type}:{index}"
    )
    return torch.device(device_type, index), note


class Scheduler:
    """Holds one rank's model and queue of requests and runs them in batches."""

    def __init__(self, server_args: ServerArgs, gpu_id: int, dp_rank: int = 0) -> None:
        self.server_args = server_args
        self.gpu_id = gpu_id
        self.dp_rank = dp_rank
        self.platform = demo_namespace().current_platform
        self.device, self.device_note = _torch_device(self.platform, gpu_id)
        self.model = build_model(server_args, self.device)
        self.dtype: torch.dtype = getattr(torch, server_args.dtype)
        self.waiting: deque[int] = deque(server_args.requests_for_rank(dp_rank))
        self._batches = 0

    def get_next_batch_to_run(self) -> Batch | None:
        """The next batch of waiting requests, ``None`` when the queue is empty."""
        if not self.waiting:
            return None
        size = min(self.server_args.max_batch_size, len(self.waiting))
        ids = tuple(self.waiting.popleft() for _ in range(size))
        batch = Batch(self._batches, ids)
        self._batches += 1
        return batch

    def run_batch(self, batch: Batch) -> dict[int, float]:
        """One forward pass; each request's checksum is the sum of its last token's state."""
        inputs = torch.stack([request_input(self.server_args, i) for i in batch.request_ids])
        with torch.no_grad():
            out = self.model(inputs.to(device=self.device, dtype=self.dtype))
        last = out[:, -1, :].float().sum(dim=-1).cpu()
        return {rid: float(v) for rid, v in zip(batch.request_ids, last.tolist(), strict=True)}

    def event_loop(self) -> SchedulerResult:
        """Serve every waiting request; time only the model work, not the setup."""
        result = SchedulerResult(
            rank=self.dp_rank,
            gpu_id=self.gpu_id,
            pid=os.getpid(),
            platform=getattr(self.platform, "device_name", "") or type(self.platform).__name__,
            device=str(self.device),
            scheduler_class=f"{type(self).__module__}.{type(self).__qualname__}",
            device_note=self.device_note,
        )
        start = time.perf_counter()
        while (batch := self.get_next_batch_to_run()) is not None:
            result.checksums.update(self.run_batch(batch))
            result.batches += 1
            result.tokens += len(batch.request_ids) * self.server_args.seq_len
        result.seconds = time.perf_counter() - start
        result.hook_events = trace.events()
        return result


def run_scheduler_process(
    local_rank: int, rank: int, server_args: ServerArgs, pipe_writer: Connection | None
) -> dict[str, Any]:
    """A scheduler worker's body, with the seed's signature; reports over ``pipe_writer`` too."""
    torch.set_num_threads(server_args.torch_threads)
    gpu_id = server_args.base_gpu_id + local_rank
    # ``Scheduler`` is read from this module's globals at call time, so a class
    # REPLACE applied by a plugin is what gets built here.
    scheduler = Scheduler(server_args, gpu_id, dp_rank=rank)
    if pipe_writer is not None:
        pipe_writer.send({"status": "ready", "rank": rank, "gpu_id": gpu_id, "pid": os.getpid()})
    result = scheduler.event_loop().to_dict()
    if pipe_writer is not None:
        pipe_writer.send({"status": "done", "rank": rank, "result": result})
    return result
