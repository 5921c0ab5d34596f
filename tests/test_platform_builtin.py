"""Built-in platforms: real CPU figures, GPU paths where a GPU exists, and no torch or context
created by resolution (checked in fresh interpreters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from spawnkit.platforms import _probes
from spawnkit.platforms._probes import cuda_available, rocm_available, torch_build
from spawnkit.platforms.builtin import (
    BUILTIN_PLATFORMS,
    CpuPlatform,
    CudaPlatform,
    RocmPlatform,
    XpuPlatform,
)

HAS_CUDA = bool(cuda_available())
HAS_ROCM = bool(rocm_available())


def _run(code: str, env: dict[str, str] | None = None, timeout: float = 60) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNKIT_")}
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_builtin_qualnames_resolve_to_classes() -> None:
    import pkgutil

    classes = {name: pkgutil.resolve_name(q) for name, q in BUILTIN_PLATFORMS.items()}
    assert classes == {
        "cpu": CpuPlatform,
        "cuda": CudaPlatform,
        "rocm": RocmPlatform,
        "xpu": XpuPlatform,
    }


def test_one_table_of_builtins_drives_discovery() -> None:
    """Reserved names, auto-detection order and qualnames all come from the BUILTINS rows."""
    import pkgutil

    from spawnkit.platforms.builtin import BUILTINS
    from spawnkit.platforms.discovery import RESERVED_NAMES

    assert tuple(row.name for row in BUILTINS) == RESERVED_NAMES
    assert RESERVED_NAMES == ("cpu", "cuda", "rocm", "xpu", "base")
    assert [row.name for row in BUILTINS if row.auto] == ["cuda", "rocm", "xpu"]
    for row in BUILTINS:
        assert row.probe is not None or not row.auto, row  # auto-detection needs a probe
        if row.qualname is not None:
            assert pkgutil.resolve_name(row.qualname).device_name == row.name
    assert [row.name for row in BUILTINS if row.qualname is None] == ["base"]


def test_cpu_platform_reports_real_figures() -> None:
    p = CpuPlatform()
    assert p.is_cpu() and p.get_torch_distributed_backend_str() == "gloo"
    assert p.get_device_total_memory() == psutil.virtual_memory().total
    rss = psutil.Process().memory_info().rss
    assert 0.5 * rss < p.get_current_memory_usage() < 2 * rss
    assert p.get_device_name() and isinstance(p.get_device_name(), str)
    assert p.get_device_capability() is None and p.get_device_count() == 1
    assert p.get_dispatch_key_name() == "cpu" and p.dispatch_key == "CPU"
    p.set_device("cpu")
    p.set_device(0)
    with pytest.raises(ValueError, match="single device"):
        p.set_device("cuda:1")


def test_device_flavours() -> None:
    assert CudaPlatform().is_cuda() and CudaPlatform().support_cuda_graph()
    assert RocmPlatform().is_rocm() and RocmPlatform.device_type == "cuda"
    assert XpuPlatform().is_xpu() and XpuPlatform().get_torch_distributed_backend_str() == "xccl"
    assert CudaPlatform().get_torch_distributed_backend_str() == "nccl"


@pytest.mark.needs_torch
def test_torch_build_read_without_importing_torch() -> None:
    out = _run(
        """
        import json, sys
        from spawnkit.platforms._probes import torch_build
        b = torch_build()
        print(json.dumps({"torch": "torch" in sys.modules, "version": b.version,
                          "cuda": b.cuda}))
        """
    )
    import torch

    assert out == {"torch": False, "version": torch.__version__, "cuda": torch.version.cuda}
    assert torch_build().version == torch.__version__


def test_torch_build_sees_torch_rebuilt_in_place(tmp_path) -> None:
    """The launcher keeps the version file it read (a launch asks at every call) only while
    the file is the same: a torch rebuilt or reinstalled in place is seen at the next ask."""
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('not to be imported')\n")
    version = pkg / "version.py"
    version.write_text("__version__ = '9.0.0'\nxpu = None\n")
    out = _run(
        f"""
        import json, os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from spawnkit.platforms._probes import torch_build
        first, again = torch_build().version, torch_build().version
        with open({str(version)!r}, "w") as f:
            f.write("__version__ = '9.1.0'\\nxpu = '2025.1'\\n")
        later = torch_build()
        print(json.dumps({{"first": first, "again": again, "later": later.version,
                          "xpu": later.xpu, "torch": "torch" in sys.modules}}))
        """
    )
    assert out == {"first": "9.0.0", "again": "9.0.0", "later": "9.1.0", "xpu": "2025.1",
                   "torch": False}


def test_visible_devices_limit_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from spawnkit.platforms._probes import _visible_limit

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,-1,3")
    assert _visible_limit("CUDA_VISIBLE_DEVICES") == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _visible_limit("CUDA_VISIBLE_DEVICES") == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _visible_limit("CUDA_VISIBLE_DEVICES") is None


_NO_DRIVER_HERE = not any(map(os.path.exists, _probes._NVIDIA_DRIVER_PATHS))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the driver's traces are Linux's")
def test_the_nvml_probe_stops_where_no_driver_left_a_trace(tmp_path) -> None:
    from spawnkit.platforms._probes import _nvml_device_count

    gone = (str(tmp_path / "proc-driver-nvidia"), str(tmp_path / "nvidiactl"))
    assert _nvml_device_count(gone) == (None, f"no NVIDIA driver ({', '.join(gone)} absent)")
    # one trace is enough to go on to NVML itself (which answers for the real machine)
    count, how = _nvml_device_count((*gone, str(tmp_path)))
    assert not how.startswith("no NVIDIA driver (")
    assert (count is None) == (how != "NVML")


@pytest.mark.skipif(not _NO_DRIVER_HERE, reason="an NVIDIA driver is loaded here")
def test_without_a_driver_the_cuda_probe_loads_no_library() -> None:
    out = _run(
        """
        import json, sys
        from spawnkit.platforms._probes import cuda_available
        probe = cuda_available()
        print(json.dumps({"ctypes": "ctypes" in sys.modules, "probe": list(probe)}))
        """
    )
    assert out["ctypes"] is False
    assert out["probe"][0] is False and out["probe"][1].startswith("no NVIDIA driver (")


_RESOLVE = """
import json, sys
from spawnkit.platforms import current_platform
print(current_platform)
cuda_init = None
if "torch" in sys.modules:
    import torch
    cuda_init = torch.cuda.is_initialized()
print(json.dumps({"torch": "torch" in sys.modules, "cls": type(current_platform).__name__,
                  "cuda_init": cuda_init}))
"""


@pytest.mark.parametrize(
    ("env", "cls"),
    [
        ({"SPAWNKIT_USE_CPU_ENGINE": "1"}, "CpuPlatform"),
        ({"SPAWNKIT_PLATFORM": "cpu"}, "CpuPlatform"),
        ({"SPAWNKIT_PLATFORM": "base"}, "Platform"),
    ],
)
def test_resolution_does_not_import_torch(env: dict[str, str], cls: str) -> None:
    out = _run(_RESOLVE, env)
    assert out == {"torch": False, "cls": cls, "cuda_init": None}


@pytest.mark.skipif(HAS_CUDA or HAS_ROCM, reason="auto-detection finds a GPU here")
def test_auto_detection_without_gpu_does_not_import_torch() -> None:
    out = _run(_RESOLVE)
    assert out["torch"] is False  # no XPU build either, so torch was never needed


@pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU")
def test_auto_detection_on_cuda_creates_no_context() -> None:
    out = _run(_RESOLVE)
    assert out["cls"] == "CudaPlatform"
    assert out["cuda_init"] in (None, False)


@pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU")
def test_cuda_queries_match_torch() -> None:
    import torch

    p = CudaPlatform()
    assert p.get_device_count() == torch.cuda.device_count()
    assert p.get_device_name(0) == torch.cuda.get_device_name(0)
    assert p.get_device_total_memory(0) == torch.cuda.get_device_properties(0).total_memory
    assert p.get_device_capability(0) == tuple(torch.cuda.get_device_capability(0))
    p.set_device(0)
    assert torch.cuda.current_device() == 0
    assert p.get_current_memory_usage(0) == float(torch.cuda.memory_allocated(0))
