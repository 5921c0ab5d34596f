"""The seed's my_platform_plugin, built and pip-installed into a fresh venv, then resolved."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "my-platform-plugin"
version = "0.1.0"

[project.entry-points."spawnkit.platforms"]
my_device = "my_platform_plugin:activate"

[tool.setuptools]
packages = ["my_platform_plugin"]
"""

INIT = '''
import os


def _my_device_is_available() -> bool:
    return os.environ.get("MY_DEVICE_VISIBLE") == "1"


def activate():
    """Return fully-qualified class name to activate, or None to skip."""
    if _my_device_is_available():
        return "my_platform_plugin.platform.MySRTPlatform"
    return None
'''

DEVICE = """
from spawnkit.platforms.device_mixin import DeviceMixin, PlatformEnum


class MyDeviceMixin(DeviceMixin):
    _enum = PlatformEnum.OOT
    device_name = "my_device"
    device_type = "my_device"   # torch device type

    def set_device(self, device) -> None:
        self._device = device

    def get_device_name(self, device_id=0) -> str:
        return f"My Device #{device_id}"

    def get_device_total_memory(self, device_id=0) -> int:
        return 64 << 30

    def get_current_memory_usage(self, device=None) -> float:
        return 0.0

    def get_device_capability(self, device_id=0):
        return (1, 0)

    def get_torch_distributed_backend_str(self) -> str:
        return "my_ccl"
"""

PLATFORM = """
from spawnkit.platforms.interface import Platform
from my_platform_plugin.device import MyDeviceMixin


class MySRTPlatform(Platform, MyDeviceMixin):
    def get_default_attention_backend(self) -> str:
        return "my_attention"

    def support_cuda_graph(self) -> bool:
        return False
"""

CHECK = "from spawnkit.platforms import current_platform; print(current_platform)"


def _write_plugin(root: Path) -> Path:
    project = root / "my_platform_plugin"
    pkg = project / "my_platform_plugin"
    pkg.mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "__init__.py").write_text(textwrap.dedent(INIT))
    (pkg / "device.py").write_text(textwrap.dedent(DEVICE))
    (pkg / "platform.py").write_text(textwrap.dedent(PLATFORM))
    return project


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPAWNKIT_", "PIP_", "PYTHON")) and k != "MY_DEVICE_VISIBLE"
    }
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def test_seed_plugin_installed_with_pip(tmp_path: Path) -> None:
    project = _write_plugin(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = _venv_python(venv)
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    # The project's site-packages (torch, spawnkit editable, pip, setuptools) seen from the
    # new venv; addsitedir also runs the .pth files there (spawnkit's editable finder).
    project_site = sysconfig.get_path("purelib")
    (Path(site_dir) / "_spawnkit_project.pth").write_text(
        f"import site; site.addsitedir({project_site!r})\n"
    )
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert list(Path(site_dir).glob("my_platform_plugin-0.1.0.dist-info/entry_points.txt"))

    present = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(MY_DEVICE_VISIBLE="1"),
    )
    assert present.returncode == 0, present.stderr
    out = present.stdout
    assert "MySRTPlatform" in out and "'my_device'" in out and "OOT" in out
    assert "my-platform-plugin 0.1.0" in out and "plugin 'my_device'" in out

    selected_absent = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(SPAWNKIT_PLATFORM="my_device"),
    )
    assert selected_absent.returncode == 1
    err = selected_absent.stderr
    assert "PlatformUnavailableError" in err and "returned None" in err
    assert "my-platform-plugin 0.1.0" in err and "my_platform_plugin:activate" in err

    auto_absent = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert auto_absent.returncode == 0, auto_absent.stderr
    assert "MySRTPlatform" not in auto_absent.stdout
    assert "auto-discovery -> 0 of 1 plugin(s) activated" in auto_absent.stdout
