"""``ServerArgs``: the demo's configuration, sent as payload bytes and unpickled after hooks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ServerArgs"]

_DTYPES = ("float32", "float64", "bfloat16")


@dataclass(frozen=True)
class ServerArgs:
    """Model shape, request load and parallelism; defaults keep a run under a second of compute."""

    model_path: str = "spawnkit-demo/tiny-mlp"
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 4
    seq_len: int = 16
    num_requests: int = 32
    max_batch_size: int = 8
    dp_size: int = 2
    base_gpu_id: int = 0
    seed: int = 1234
    dtype: str = "float32"
    torch_threads: int = 1

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "seq_len",
            "num_requests",
            "max_batch_size",
            "dp_size",
            "torch_threads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ServerArgs.{name} must be a positive int, got {value!r}")
        if self.base_gpu_id < 0:
            raise ValueError(f"ServerArgs.base_gpu_id must be >= 0, got {self.base_gpu_id}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"ServerArgs.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        if self.dtype not in _DTYPES:
            raise ValueError(f"ServerArgs.dtype must be one of {_DTYPES}, got {self.dtype!r}")

    def requests_for_rank(self, rank: int) -> list[int]:
        """Request ids scheduler ``rank`` serves: round-robin, so every rank gets work."""
        if not 0 <= rank < self.dp_size:
            raise ValueError(f"rank {rank} is outside dp_size {self.dp_size}")
        return list(range(rank, self.num_requests, self.dp_size))

    def replace(self, **changes: Any) -> ServerArgs:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
