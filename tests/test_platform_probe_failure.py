"""A built-in platform probe that raises is a failed probe, not absent hardware.

The XPU probe imports torch when torch's build says XPU; a broken Level Zero runtime makes that
import raise.  Auto-discovery recorded the probe as "absent" and went on to the base platform:
a machine with a broken accelerator install ran its job on the CPU, exit 0.  A real (fake)
``torch`` package first on ``sys.path`` of a fresh launcher, real spawned workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import spawnkit

_VERSION = '__version__ = "2.5.0+xpu"\ncuda = None\nhip = None\nxpu = "20250001"\n'

#: torch/__init__.py of an XPU build whose runtime is missing (raises), or present with no device.
_BROKEN = 'raise ImportError("libze_loader.so.1: cannot open shared object file")\n'
_NO_DEVICE = "class xpu:\n    @staticmethod\n    def device_count():\n        return 0\n"

_LAUNCHER = """
import json, os, sys
import spawnkit

if __name__ == "__main__":
    out = {"explained": str(spawnkit.explain_platform())}
    try:
        with spawnkit.spawn_with_plugins(
            "json:dumps", [1], nprocs=1, ready_timeout=60, join_timeout=60
        ) as group:
            out["platform"] = group.wait_ready(timeout=60)[0].platform["name"]
            out["ran"] = group.results(timeout=60)
    except Exception as exc:
        out["error"] = [type(exc).__name__, str(exc).splitlines()[0]]
    print(json.dumps(out))
"""


def _launch(tmp_path: Path, torch_init: str, **env: str) -> dict:  # type: ignore[type-arg]
    """Run the launcher with a torch built for XPU (``torch_init``) first on ``sys.path``."""
    (tmp_path / "torch").mkdir(exist_ok=True)
    (tmp_path / "torch" / "version.py").write_text(_VERSION)
    (tmp_path / "torch" / "__init__.py").write_text(torch_init)
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent(_LAUNCHER))
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNKIT_")}
    src = str(Path(spawnkit.__file__).resolve().parents[1])  # the source under test
    full["PYTHONPATH"] = os.pathsep.join([str(tmp_path), src])
    full.update(env)
    proc = subprocess.run(
        [sys.executable, str(script)], env=full, capture_output=True, text=True, timeout=150
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_auto_discovery_stops_at_a_probe_that_raised(tmp_path: Path) -> None:
    out = _launch(tmp_path, _BROKEN)
    assert "ran" not in out  # no worker ran on the base platform in its place
    kind, text = out["error"]
    assert kind == "PlatformUnavailableError"
    assert "could not tell whether this machine has the built-in 'xpu'" in text
    assert "its probe raised ImportError: libze_loader.so.1" in text
    assert "SPAWNKIT_PLATFORM=cpu, or SPAWNKIT_USE_CPU_ENGINE=1" in text
    assert "- xpu: FAILED (raised ImportError: libze_loader" in out["explained"]


def test_a_probe_that_raised_for_the_named_platform_says_so(tmp_path: Path) -> None:
    out = _launch(tmp_path, _BROKEN, SPAWNKIT_PLATFORM="xpu")
    kind, text = out["error"]
    assert kind == "PlatformUnavailableError"
    assert "selects the built-in 'xpu' platform, but its hardware probe raised" in text
    assert "not absent hardware" in text


def test_the_cpu_chosen_by_name_runs_past_a_broken_probe(tmp_path: Path) -> None:  # the opt-out
    out = _launch(tmp_path, _BROKEN, SPAWNKIT_USE_CPU_ENGINE="1")
    assert out.get("error") is None and out["ran"] == ["[1]"] and out["platform"] == "cpu"


def test_a_probe_that_answers_no_device_still_falls_through(tmp_path: Path) -> None:  # control
    out = _launch(tmp_path, _NO_DEVICE)
    assert out.get("error") is None and out["ran"] == ["[1]"] and out["platform"] == "base"
    assert "- xpu: absent (torch XPU 20250001 finds no device)" in out["explained"]


@pytest.mark.parametrize("failed", [False, True])
def test_a_probe_outcome_reads_failed_only_when_it_raised(failed: bool) -> None:
    from spawnkit.platforms.explanation import ProbeOutcome

    said = ProbeOutcome("xpu", False, "x", failed).describe()
    assert said == ("xpu: FAILED (x)" if failed else "xpu: absent (x)")
