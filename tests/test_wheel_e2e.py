"""A new user's first minutes: build the wheel, install it in a fresh venv, bench and torchrun.

Nothing of the checkout is visible to the commands: the venv has no system
site-packages and no dev extras (so no wrapt, rich or matplotlib), the
working directory is outside the checkout, and PYTHONPATH is unset.  For
bench and torchrun torch is installed first, pinned, from pip's cache; the
other venv gets the wheel alone, which brings no torch (the ``spawnkit[torch]``
extra does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# The run's own bounds (three installs, the bench, torchrun) exceed pytest's default timeout
# of 300 s, which would stop the test in the middle of the bench on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[1]
TORCH_PIN = "torch==2.13.0"
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 600

APP = """
import json, os

def main(payload):
    from spawnkit.bootstrap import current_spec
    spec = current_spec()
    with open(os.path.join(payload["out"], f"rank{spec.rank}.json"), "w") as fh:
        json.dump({"rank": spec.rank, "world_size": spec.world_size}, fh)
"""


def _run(
    cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return proc


def _clean_env(venv: Path, tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "CUDA_VISIBLE_DEVICES")
        and not k.startswith(("SPAWNKIT_", "TORCHELASTIC_"))
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"])
    env["TMPDIR"] = str(tmp)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def test_wheel_in_a_fresh_venv_runs_bench_and_torchrun(tmp_path: Path) -> None:
    src = _copy_checkout(tmp_path)
    dist = tmp_path / "dist"
    home = tmp_path / "home"
    home.mkdir()
    venv = tmp_path / "venv"
    # Short: a forkserver's unix socket lives under TMPDIR, and those paths are length-limited.
    short_tmp = Path(tempfile.mkdtemp(prefix="skw-", dir="/tmp"))
    try:
        _bench_and_torchrun(src, dist, home, venv, _clean_env(venv, short_tmp))
        assert list(short_tmp.glob("spawnkit-torchrun-*")) == []  # spec and key removed
    finally:
        shutil.rmtree(short_tmp, ignore_errors=True)


def _copy_checkout(tmp_path: Path) -> Path:
    """Build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout."""
    src = tmp_path / "src-copy"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    return src


def _install_wheel(
    src: Path, dist: Path, home: Path, venv: Path, env: dict[str, str], *first: str
) -> None:
    """Build spawnkit's wheel and install it into a fresh ``venv``, after ``first`` (pins)."""
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
        cwd=home,
        env=env,
        timeout=INSTALL_TIMEOUT_S,
    )
    (wheel,) = dist.glob("spawnkit-*.whl")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=home, env=env, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    if first:
        _run([*pip, *first], cwd=home, env=env, timeout=INSTALL_TIMEOUT_S)
    _run([*pip, str(wheel)], cwd=home, env=env, timeout=INSTALL_TIMEOUT_S)


def _bench_and_torchrun(src: Path, dist: Path, home: Path, venv: Path, env: dict[str, str]) -> None:
    _install_wheel(src, dist, home, venv, env, TORCH_PIN)

    where = _run(
        [str(venv / "bin" / "python"), "-c", "import spawnkit; print(spawnkit.__file__)"],
        cwd=home,
        env=env,
        timeout=60,
    ).stdout.strip()
    assert where.startswith(str(venv)), where
    spawnkit = str(venv / "bin" / "spawnkit")

    bench = _run([spawnkit, "bench", "--quick"], cwd=home, env=env, timeout=RUN_TIMEOUT_S)
    for name in ("spawn_latency", "hook_overhead", "bootstrap_stages"):
        assert f"{name} targets (" in bench.stdout, bench.stdout
    assert "note: wrapt is not installed" in bench.stdout  # no dev extra in this venv
    # the peers: torch's spawn runs (torch is pinned in), loky and Ray are skipped with a reason
    assert "torch-mp-spawn" in bench.stdout
    assert "note: loky is not installed" in bench.stdout and "spawnkit[bench]" in bench.stdout
    assert "note: ray is not installed" in bench.stdout
    assert "load average at start: " in bench.stdout
    for row in ("cold trivial / hand-written", "cold torch / raw spawn", "apply_hooks() / python"):
        assert row in bench.stdout, row
    assert "own stage work (no user imports) / python -c pass" in bench.stdout
    assert "✔" in bench.stdout or "✘" in bench.stdout
    assert "internal error" not in bench.stderr

    (home / "app.py").write_text(APP)
    out = home / "out"
    out.mkdir()
    (home / "payload.json").write_text(json.dumps({"out": str(out)}))
    args = ["app:main", "--launcher", "torchrun", "--nprocs", "2", "--payload-file", "payload.json"]
    launch = _run(
        [spawnkit, "launch", *args, "--timeout", "300"],
        cwd=home,
        env=env,
        timeout=RUN_TIMEOUT_S,
    )
    assert "2 rank(s) finished under torchrun" in launch.stdout
    ranks = sorted(json.loads(p.read_text())["rank"] for p in out.glob("rank*.json"))
    assert ranks == [0, 1]


def test_wheel_without_torch_launches_and_says_which_extra_the_demo_needs(tmp_path: Path) -> None:
    """``pip install spawnkit`` alone: no torch or numpy; doctor and launch work, demo says why."""
    src = _copy_checkout(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    venv = tmp_path / "venv"
    env = _clean_env(venv, tmp_path)
    _install_wheel(src, tmp_path / "dist", home, venv, env)
    python = str(venv / "bin" / "python")
    probe = "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('numpy'))"
    found = _run(
        [python, "-c", probe],
        cwd=home,
        env=env,
        timeout=60,
    )
    assert found.stdout.split() == ["None", "None"]
    spawnkit = str(venv / "bin" / "spawnkit")
    doctor = _run([spawnkit, "doctor"], cwd=home, env=env, timeout=RUN_TIMEOUT_S)
    assert "internal error" not in doctor.stderr

    (home / "app.py").write_text(APP)
    out = home / "out"
    out.mkdir()
    (home / "payload.json").write_text(json.dumps({"out": str(out)}))
    args = ["app:main", "--nprocs", "2", "--payload-file", "payload.json", "--timeout", "300"]
    _run([spawnkit, "launch", *args], cwd=home, env=env, timeout=RUN_TIMEOUT_S)
    ranks = sorted(json.loads(p.read_text())["rank"] for p in out.glob("rank*.json"))
    assert ranks == [0, 1]

    demo = subprocess.run(
        [spawnkit, "demo"], cwd=home, env=env, capture_output=True, text=True, timeout=120
    )
    assert demo.returncode == 1 and demo.stdout == ""
    (line,) = demo.stderr.splitlines()
    assert 'pip install "spawnkit[torch]"' in line
