"""Hardware probes that never create an accelerator context and avoid importing torch.

Resolution runs in launchers and forkserver parents, where ``torch.cuda.is_available()`` would
run ``cuInit`` (breaking CUDA in every later ``fork``) and importing torch costs a second; so
NVML, kernel device files and ``torch/version.py`` are read instead.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "VISIBILITY_VARS",
    "Probe",
    "cuda_available",
    "rocm_available",
    "torch_build",
    "xpu_available",
]

#: The device visibility variables the probes read: ``bootstrap_here()`` records them, since a
#: change to one can move an automatic decision (``launch._here``).
VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


class Probe(NamedTuple):
    """Whether a built-in platform's hardware is usable here, and the evidence."""

    available: bool
    reason: str

    def __bool__(self) -> bool:
        return self.available


class TorchBuild(NamedTuple):
    installed: bool
    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    xpu: str | None = None


_version_files: dict[str, tuple[tuple[int, int, int], ModuleType | None]] = {}
"""torch's ``version.py`` as last read, by path, with the file's identity then: a launcher
asks at every launch (0.1 ms to read and run it), and the file changes only when torch is
reinstalled or rebuilt in place, which moves its identity (inode, size, mtime)."""


def _load_version_file(path: str) -> ModuleType | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    identity = (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = _version_files.get(path)
    if seen is not None and seen[0] == identity:
        return seen[1]
    module = _run_version_file(path)
    _version_files[path] = (identity, module)
    return module


def _run_version_file(path: str) -> ModuleType | None:
    spec = importlib.util.spec_from_file_location("_spawnkit_torch_version", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        return None
    return module


def torch_build() -> TorchBuild:
    """torch's version and accelerator flavour, read without importing torch when possible."""
    version_mod: Any = sys.modules.get("torch.version")
    if version_mod is None:
        try:
            spec = importlib.util.find_spec("torch")
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return TorchBuild(installed=False)
        locations = list(spec.submodule_search_locations or [])
        if locations:
            version_mod = _load_version_file(os.path.join(locations[0], "version.py"))
        if version_mod is None:  # unusual layout: pay for the import
            import torch.version as version_mod
    return TorchBuild(
        installed=True,
        version=getattr(version_mod, "__version__", None),
        cuda=getattr(version_mod, "cuda", None),
        hip=getattr(version_mod, "hip", None),
        xpu=getattr(version_mod, "xpu", None),
    )


def _visible_limit(var: str) -> int | None:
    """How many devices ``CUDA_VISIBLE_DEVICES``-style ``var`` admits (None: no limit)."""
    raw = os.environ.get(var)
    if raw is None:
        return None
    count = 0
    for item in raw.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break  # the CUDA runtime stops at the first invalid entry
        count += 1
    return count


#: What a loaded NVIDIA kernel driver leaves on Linux: its /proc entry, its control device in a
#: container given GPUs, /dev/dxg under WSL2 (whose NVML talks to the host's driver).
_NVIDIA_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")


def _nvml_device_count(
    driver_paths: tuple[str, ...] = _NVIDIA_DRIVER_PATHS,
) -> tuple[int | None, str]:
    """Device count from NVML (no CUDA context, no cuInit), or None with the reason."""
    if sys.platform.startswith("linux") and not any(map(os.path.exists, driver_paths)):
        # Without a driver nvmlInit can only fail; skipping ctypes and the dlopen saves ~2.5 ms
        # of every cold worker's platform stage on the CPU machines most workers run on.
        return None, f"no NVIDIA driver ({', '.join(driver_paths)} absent)"
    import ctypes  # only when probing for NVIDIA hardware

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None, "NVML (libnvidia-ml.so.1) not found: no NVIDIA driver"
    try:
        init = getattr(nvml, "nvmlInit_v2", None) or nvml.nvmlInit
        rc = init()
        if rc != 0:
            return None, f"nvmlInit failed (NVML error {rc})"
        count = ctypes.c_uint(0)
        get = getattr(nvml, "nvmlDeviceGetCount_v2", None) or nvml.nvmlDeviceGetCount
        rc = get(ctypes.byref(count))
        nvml.nvmlShutdown()
        if rc != 0:
            return None, f"nvmlDeviceGetCount failed (NVML error {rc})"
        return int(count.value), "NVML"
    except AttributeError as exc:  # pragma: no cover - ancient driver
        return None, f"NVML lacks {exc}"


def cuda_available() -> Probe:
    """NVIDIA GPUs visible (NVML and ``CUDA_VISIBLE_DEVICES``) and torch built with CUDA."""
    count, how = _nvml_device_count()
    if count is None:
        return Probe(False, how)
    limit = _visible_limit("CUDA_VISIBLE_DEVICES")
    visible = count if limit is None else min(count, limit)
    if visible <= 0:
        return Probe(False, f"{how} reports {count} GPU(s), 0 visible (CUDA_VISIBLE_DEVICES)")
    found = f"{visible} NVIDIA GPU(s) visible"
    return _torch_built_for(found, f"{found} via {how}", "cuda", "CUDA")


def _torch_built_for(found: str, where: str, flavour: str, api: str) -> Probe:
    """The hardware is there (``found``); whether torch was built for ``api``."""
    build = torch_build()
    if not build.installed:
        return Probe(False, f"{found} but torch is not installed")
    version = getattr(build, flavour)
    if not version:
        return Probe(False, f"{found} but torch {build.version} lacks {api}")
    return Probe(True, f"{where}, torch {api} {version}")


def _kfd_gpu_nodes(root: str = "/sys/class/kfd/kfd/topology/nodes") -> int:
    """GPU nodes in the AMD KFD topology (CPU nodes report ``simd_count 0``); no pathlib (ms)."""
    nodes = 0
    try:
        entries = os.listdir(root)
    except OSError:
        return 0
    for node in entries:
        try:
            with open(os.path.join(root, node, "properties"), encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "simd_count" and value.strip() not in ("", "0"):
                nodes += 1
                break
    return nodes


def rocm_available() -> Probe:
    """AMD GPUs in the kernel's KFD topology and torch built with HIP."""
    if not os.path.exists("/dev/kfd"):
        return Probe(False, "/dev/kfd not present: no AMD GPU driver")
    nodes = _kfd_gpu_nodes()
    if nodes == 0:
        return Probe(False, "/dev/kfd present but the KFD topology lists no GPU")
    for var in VISIBILITY_VARS:
        limit = _visible_limit(var)
        if limit is not None:
            nodes = min(nodes, limit)
    if nodes == 0:
        return Probe(False, "AMD GPU(s) present but none visible (*_VISIBLE_DEVICES)")
    found = f"{nodes} AMD GPU(s)"
    return _torch_built_for(found, f"{found} in KFD topology", "hip", "HIP")


def xpu_available() -> Probe:
    """Intel GPUs through torch.xpu; torch is imported only when its build has XPU."""
    build = torch_build()
    if not build.installed:
        return Probe(False, "torch is not installed")
    if not build.xpu:
        return Probe(False, f"torch {build.version} is not built with XPU")
    import torch

    # torch.xpu.device_count() enumerates through Level Zero Sysman where possible
    # and does not initialise the XPU runtime's lazy state.
    count = int(torch.xpu.device_count())
    if count <= 0:
        return Probe(False, f"torch XPU {build.xpu} finds no device")
    return Probe(True, f"{count} XPU device(s), torch XPU {build.xpu}")
