"""The walkthrough (docs/walkthrough.md) done for real: a fresh venv, both examples installed.

The venv sees the project's site-packages through a ``.pth`` file (so torch
and spawnkit need no reinstall), the example plugins are installed into it
with pip exactly as the walkthrough says, and then the seed's check commands
and the demo run in it.  Each hook must have run in every scheduler, which
the workers report back themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    project_site = sysconfig.get_paths()["purelib"]
    # addsitedir (not a bare path line) so the project's own .pth files (the editable
    # spawnkit install) are processed too.
    Path(purelib, "_spawnkit_project_site.pth").write_text(
        f"import site; site.addsitedir({project_site!r})\n"
    )
    return python


def _run(python: Path, *args: str, env: dict[str, str], timeout: float = 180) -> str:
    proc = subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(python.parents[2]),
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.needs_torch  # the venv inherits this one's torch: the demo and my_device need it
def test_walkthrough_in_a_fresh_venv(tmp_path: Path) -> None:
    python = _venv(tmp_path)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPAWNKIT_", "MY_DEVICE_", "PYTHONPATH"))
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INDEX"] = "1"
    for example in ("my_platform_plugin", "my_general_plugin"):
        _run(
            python,
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            "--no-deps",
            "-e",
            str(EXAMPLES / example),
            env=env,
        )

    check = "from spawnkit.platforms import current_platform; print(current_platform)"
    assert "MyPlatform" not in _run(python, "-c", check, env=env)
    visible = {**env, "MY_DEVICE_VISIBLE": "1"}
    assert "MyPlatform (device 'my_device'" in _run(python, "-c", check, env=visible)
    demo_check = "from spawnkit.demo import current_platform; print(current_platform)"
    out = _run(python, "-c", demo_check, env={**visible, "SPAWNKIT_DEMO_PLATFORM": "my_device"})
    assert "MyDiffusionPlatform (device 'my_device'" in out

    result_file = tmp_path / "demo.json"
    stdout = _run(
        python, "-m", "spawnkit.cli", "demo", "--json", str(result_file), env=visible, timeout=240
    )
    assert stdout.count("Scheduler initialized! gpu_id=0") == 2  # demo plugin + my_general_plugin
    assert stdout.count("Scheduler initialized! gpu_id=1") == 2
    assert stdout.count("Enhanced scheduler initialized!") == 2
    run = json.loads(result_file.read_text())
    results = run["results"]
    assert sorted(r["rank"] for r in results) == [0, 1]
    expected_hooks = {
        "spawnkit.demo.init_banner",
        "spawnkit.demo.batch_timer",
        "my_general_plugin.init",
        "my_general_plugin.timer",
        "my_general_plugin.replace",
        "my_platform_plugin.bind_device",
        "my_platform_plugin.rms_norm",
    }
    for r in results:
        ran = {e["hook"] for e in r["hook_events"]}
        assert expected_hooks <= ran, f"rank {r['rank']} is missing {expected_hooks - ran}"
        assert r["scheduler_class"] == "my_general_plugin.scheduler.MyScheduler"
        assert r["platform"] == "my_device"
        init = [e for e in r["hook_events"] if e["hook"] == "my_general_plugin.init"]
        assert init == [{"hook": "my_general_plugin.init", "rank": r["rank"], "gpu_id": r["rank"]}]
    for report in run["reports"]:
        assert report["platform"]["name"] == "my_device"
        loaded = {p["name"] for p in report["plugins"]}
        assert loaded == {"batch_timer", "init_banner", "my_plugin", "my_device"}
        assert report["guard"]["violations"] == []

    # The offline script, run from its folder's parent as the walkthrough says: the lazy
    # proxy at its top level must not trip the import guard when workers re-import it.
    out = _run(python, str(EXAMPLES / "offline_script.py"), env=visible, timeout=240)
    assert "rank 0: 16 requests on my_device" in out
    assert "rank 1: 16 requests on my_device" in out
    assert "scheduler my_general_plugin.scheduler.MyScheduler" in out
