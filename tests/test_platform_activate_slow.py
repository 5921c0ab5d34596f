"""A platform plugin's ``activate()`` that blocks in the launcher is named once the launch's
``ready_timeout`` passes.

Auto-discovery calls every installed platform plugin's ``activate()`` in the launcher, before
any worker starts; one blocking in a driver query held the launch with nothing said, while
the same call in a worker is bounded by ``ready_timeout``.  A real distribution, a real
launcher process, real spawned workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import spawnkit
from spawnkit.testing import write_distribution

_LAUNCHER = """
import sys
import spawnkit

if __name__ == "__main__":
    limit = None if sys.argv[1] == "None" else float(sys.argv[1])
    with spawnkit.spawn_with_plugins(
        "json:dumps", [1], nprocs=1, ready_timeout=limit, join_timeout=60
    ) as group:
        print(group.results(timeout=60))
"""

_ACTIVATE = """
import os, time

def activate():
    time.sleep(float(os.environ["SLOWCHIP_S"]))
    return None
"""


def _launch(tmp_path: Path, sleep_s: float, ready_timeout: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    write_distribution(
        site, "slowchip-plugin", "1.2.0",
        entry_points={"spawnkit.platforms": {"slowchip": "slowchip_plat:activate"}},
        modules={"slowchip_plat.py": _ACTIVATE},
    )  # fmt: skip
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent(_LAUNCHER))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNKIT_")}
    src = str(Path(spawnkit.__file__).resolve().parents[1])  # the source under test
    env.update(PYTHONPATH=os.pathsep.join([str(site), src]), SLOWCHIP_S=str(sleep_s))
    proc = subprocess.run(
        [sys.executable, str(script), ready_timeout],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['[1]']"  # the launch went on once it returned
    return proc


def test_an_activate_past_ready_timeout_is_named_with_its_line(tmp_path: Path) -> None:
    said = _launch(tmp_path, 3, "1").stderr
    assert "after 1 s (the launch's ready_timeout), platform plugin 'slowchip'" in said
    assert "distribution slowchip-plugin 1.2.0): activate() has not returned" in said
    assert f"at {tmp_path / 'site' / 'slowchip_plat.py'}:5" in said
    assert "select a platform by name (SPAWNKIT_PLATFORM=<name>)" in said
    assert said.count("has not returned") == 1


def test_an_activate_within_ready_timeout_is_not_named(tmp_path: Path) -> None:  # control
    assert "has not returned" not in _launch(tmp_path, 0.2, "30").stderr


def test_no_startup_limit_says_nothing(tmp_path: Path) -> None:  # the opt-out
    assert "has not returned" not in _launch(tmp_path, 1.5, "None").stderr
