"""The demo's model: fixed-seed transformer blocks whose norms are spawnkit ``RMSNorm`` ops.

A platform plugin's ``init_backend`` can give ``RMSNorm`` an out-of-tree forward; the seed makes
every rank (and a test in the parent) compute the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

from spawnkit._extras import reraise_torch_import

try:
    import torch
    from torch import nn
except ImportError as _exc:
    reraise_torch_import(_exc, "spawnkit.demo.model")

from spawnkit.demo.namespace import demo_namespace
from spawnkit.demo.server_args import ServerArgs

__all__ = ["TinyBlock", "TinyModel", "build_model", "request_input"]


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


def _rms_norm(hidden: int) -> nn.Module:
    """An RMSNorm whose kernel is chosen by the demo namespace's platform (not the default's)."""
    from spawnkit.platforms import RMSNorm

    module: nn.Module = RMSNorm(hidden, namespace=demo_namespace())
    return module


class TinyBlock(nn.Module):
    """Pre-norm self-attention and MLP, the shape of one decoder layer."""

    def __init__(self, args: ServerArgs) -> None:
        super().__init__()
        h = args.hidden_size
        self.num_heads = args.num_heads
        self.attn_norm = _rms_norm(h)
        self.qkv = nn.Linear(h, 3 * h, bias=False)
        self.out = nn.Linear(h, h, bias=False)
        self.mlp_norm = _rms_norm(h)
        self.up = nn.Linear(h, args.intermediate_size, bias=False)
        self.down = nn.Linear(args.intermediate_size, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).chunk(3, dim=-1)
        shape = (b, s, self.num_heads, h // self.num_heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attn.transpose(1, 2).reshape(b, s, h))
        mlp: torch.Tensor = self.down(torch.nn.functional.gelu(self.up(self.mlp_norm(x))))
        return x + mlp


class TinyModel(nn.Module):
    """``num_layers`` blocks and a final norm; returns the hidden state of every token."""

    def __init__(self, args: ServerArgs) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TinyBlock(args) for _ in range(args.num_layers))
        self.norm = _rms_norm(args.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        out = self.norm(x)
        assert isinstance(out, torch.Tensor)
        return out


def build_model(args: ServerArgs, device: Any = "cpu") -> TinyModel:
    """The model with weights drawn from ``args.seed``: identical in every process."""
    gen = torch.Generator().manual_seed(args.seed)
    model = TinyModel(args)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.dim() >= 2:
                bound = 1.0 / math.sqrt(param.shape[1])
                param.copy_(torch.empty(param.shape).uniform_(-bound, bound, generator=gen))
            elif name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
    return model.to(device=device, dtype=_dtype(args.dtype)).eval()


def request_input(args: ServerArgs, request_id: int) -> torch.Tensor:
    """The (seq_len, hidden) input of one request, a function of seed and id only."""
    gen = torch.Generator().manual_seed(args.seed * 100_003 + request_id)
    return torch.randn(args.seq_len, args.hidden_size, generator=gen, dtype=torch.float32)
