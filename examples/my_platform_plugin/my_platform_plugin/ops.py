"""The device's RMSNorm kernel (here: the same float32 math in torch, counting its calls)."""

from __future__ import annotations

from typing import Any

__all__ = ["calls", "rms_norm_forward"]

_calls = 0


def calls() -> int:
    """How often the kernel ran in this process (tests check it really was dispatched)."""
    return _calls


def rms_norm_forward(self: Any, x: Any, residual: Any = None) -> Any:
    """RMSNorm for my_device; ``self`` is the spawnkit ``RMSNorm`` module (weight, eps)."""
    global _calls
    import torch

    _calls += 1
    from spawnkit.demo import trace

    trace.record("my_platform_plugin.rms_norm", device="my_device", shape=list(x.shape))
    orig_dtype = x.dtype
    h = x.to(torch.float32)
    if residual is not None:
        h = h + residual.to(torch.float32)
        residual = h.to(orig_dtype)
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
    out = (h * self.weight.to(torch.float32)).to(orig_dtype)
    return out if residual is None else (out, residual)
