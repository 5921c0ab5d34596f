"""Example ops built on ``CustomOp``: what an out-of-tree platform plugs kernels into."""

from __future__ import annotations

from typing import Any

from spawnkit._extras import reraise_torch_import

try:
    import torch
except ImportError as _exc:
    reraise_torch_import(_exc, "spawnkit.platforms.RMSNorm")

from spawnkit.platforms.custom_op import CustomOp

__all__ = ["RMSNorm"]


def _with_residual(
    x: torch.Tensor, residual: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``x`` in float32 with the residual added, and the new residual in ``x``'s dtype."""
    h = x.to(torch.float32)
    if residual is None:
        return h, None
    h = h + residual.to(torch.float32)
    return h, h.to(x.dtype)


class RMSNorm(CustomOp):
    """Root-mean-square layer norm, optionally fused with a residual add (float32 math)."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        namespace: Any = None,
    ) -> None:
        super().__init__(namespace=namespace)
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))

    def forward_native(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        h, residual = _with_residual(x, residual)
        variance = h.pow(2).mean(dim=-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        out = (h * self.weight.to(torch.float32)).to(x.dtype)
        return out if residual is None else (out, residual)

    def forward_cuda(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """torch's fused ``rms_norm`` kernel (same float32 math as ``forward_native``)."""
        h, residual = _with_residual(x, residual)
        out = torch.nn.functional.rms_norm(
            h, (self.hidden_size,), self.weight.to(torch.float32), self.eps
        ).to(x.dtype)
        return out if residual is None else (out, residual)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}"
