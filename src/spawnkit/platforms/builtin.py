"""The in-tree platforms: CPU, CUDA, ROCm and XPU.

torch is imported inside the methods only, so a launcher or doctor resolves a platform
without paying for (or being broken by) torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit.platforms._probes import Probe, cuda_available, rocm_available, xpu_available
from spawnkit.platforms.interface import Platform, PlatformEnum

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

__all__ = [
    "BUILTINS", "BUILTIN_PLATFORMS", "BUILTIN_PROBES", "Builtin", "CpuPlatform", "CudaPlatform",
    "RocmPlatform", "XpuPlatform", "cpu_available", "cuda_available", "rocm_available",
    "xpu_available",
]  # fmt: skip


def _torch() -> ModuleType:
    import torch

    return torch


def cpu_available() -> Probe:
    return Probe(True, "the CPU is always available")


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    import platform  # only when a CPU name is asked for

    return platform.processor() or platform.machine() or "cpu"


class CpuPlatform(Platform):
    """Host CPU; memory figures from psutil, collectives over gloo."""

    _enum = PlatformEnum.CPU
    device_name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"

    def set_device(self, device: Any) -> None:
        text = str(device)
        if text not in ("cpu", "0", "cpu:0", "None"):
            raise ValueError(f"CPU platform has a single device 'cpu', got {device!r}")

    def get_device_name(self, device_id: int = 0) -> str:
        return _cpu_model_name()

    def get_device_count(self) -> int:
        return 1

    def get_device_total_memory(self, device_id: int = 0) -> int:
        import psutil

        return int(psutil.virtual_memory().total)

    def get_current_memory_usage(self, device: Any = None) -> float:
        import psutil

        return float(psutil.Process(os.getpid()).memory_info().rss)

    def get_device_capability(self, device_id: int = 0) -> tuple[int, int] | None:
        return None

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"


class _TorchAccelerator(Platform):
    """Device calls torch spells alike in each accelerator module (torch.cuda, torch.xpu)."""

    _torch_api = ""

    def _api(self) -> Any:
        return getattr(_torch(), self._torch_api)

    def set_device(self, device: Any) -> None:
        self._api().set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        return str(self._api().get_device_name(device_id))

    def get_device_count(self) -> int:
        return int(self._api().device_count())

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return int(self._api().get_device_properties(device_id).total_memory)

    def get_current_memory_usage(self, device: Any = None) -> float:
        """Bytes held by torch's caching allocator's live tensors on ``device``."""
        return float(self._api().memory_allocated(device))


class _TorchCudaApi(_TorchAccelerator):
    """Shared by CUDA and ROCm: torch exposes both through ``torch.cuda``."""

    _torch_api = "cuda"

    def get_device_capability(self, device_id: int = 0) -> tuple[int, int] | None:
        major, minor = _torch().cuda.get_device_capability(device_id)
        return int(major), int(minor)

    def get_torch_distributed_backend_str(self) -> str:
        return "nccl"

    def support_cuda_graph(self) -> bool:
        return True


class CudaPlatform(_TorchCudaApi):
    """NVIDIA GPUs through torch.cuda; NCCL collectives."""

    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"

    def get_default_attention_backend(self) -> str:
        return "flash_attn"


class RocmPlatform(_TorchCudaApi):
    """AMD GPUs through torch's HIP build (``torch.cuda`` API, RCCL as ``nccl``).

    Device type and dispatch key stay ``cuda`` (what torch calls the device); ``CustomOp``
    tries AMD's own first: kernels for ``rocm``/``hip``, ``forward_hip``, then CUDA's.
    """

    _enum = PlatformEnum.ROCM
    device_name = "rocm"
    device_type = "cuda"
    dispatch_key = "CUDA"

    def get_default_attention_backend(self) -> str:
        return "triton"


class XpuPlatform(_TorchAccelerator):
    """Intel GPUs through torch.xpu; XCCL collectives."""

    _enum = PlatformEnum.XPU
    device_name = "xpu"
    device_type = "xpu"
    dispatch_key = "XPU"
    _torch_api = "xpu"

    def get_device_capability(self, device_id: int = 0) -> tuple[int, int] | None:
        """XPUs have no (major, minor) capability; ``torch.xpu.get_device_capability`` has more."""
        return None

    def get_torch_distributed_backend_str(self) -> str:
        return "xccl"


class Builtin(NamedTuple):
    """One built-in platform (a named tuple: cheap for every worker to define).

    ``qualname`` None: the namespace's base; ``probe`` None: always there; ``auto`` rows are
    probed in table order when no plugin activated.
    """

    name: str
    qualname: str | None
    probe: Callable[[], Probe] | None
    auto: bool


_HERE = "spawnkit.platforms.builtin"

#: The built-ins, the one table of them: discovery's names, selection and auto-detection order.
BUILTINS: tuple[Builtin, ...] = (
    Builtin("cpu", f"{_HERE}:CpuPlatform", None, False),  # by name or <PREFIX>_USE_CPU_ENGINE
    Builtin("cuda", f"{_HERE}:CudaPlatform", cuda_available, True),
    Builtin("rocm", f"{_HERE}:RocmPlatform", rocm_available, True),
    Builtin("xpu", f"{_HERE}:XpuPlatform", xpu_available, True),
    Builtin("base", None, None, False),  # by name, or when nothing else is present
)

BUILTIN_PLATFORMS: dict[str, str] = {b.name: b.qualname for b in BUILTINS if b.qualname}

BUILTIN_PROBES: dict[str, Callable[[], Probe]] = {
    "cpu": cpu_available,
    **{b.name: b.probe for b in BUILTINS if b.probe is not None},
}
