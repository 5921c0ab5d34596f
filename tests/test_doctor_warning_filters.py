"""``spawnkit doctor`` under ``-W error::spawnkit.PluginSelectionWarning`` (or PYTHONWARNINGS).

A launch in lenient mode with an unknown ``<PREFIX>_PLUGINS`` name, or with a blank allow-list,
warns in its parent; a warnings filter that makes that warning an error makes the launch refuse.
doctor listed the warning only and said "OK" (exit 0).  Real processes: the filter is the
interpreter's own, from its command line or environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import spawnkit
from _cli_support import run_cli
from spawnkit.testing import write_distribution

SRC = str(Path(spawnkit.__file__).parents[1])
ERROR = "error::spawnkit.PluginSelectionWarning"
TIMEOUT_S = 120


@pytest.fixture
def ns(tmp_path: Path) -> str:
    """A registered namespace with one plugin, 'mine', installed as a real distribution."""
    name = "ns" + "".join(c for c in tmp_path.name if c.isalnum())
    write_distribution(
        tmp_path,
        f"{name}-engine",
        "1.2",
        entry_points={"spawnkit.namespaces": {name: f"{name}_engine:NS"}},
        modules={f"{name}_engine": f"from spawnkit import Namespace\nNS = Namespace({name!r})\n"},
    )
    write_distribution(
        tmp_path,
        "mine-plugin",
        "1.2",
        entry_points={f"{name}.plugins": {"mine": f"{name}_mine:register"}},
        modules={f"{name}_mine": "def register():\n    pass\n"},
    )
    (tmp_path / "wfapp.py").write_text("def hello(payload=None):\n    return 1\n")
    return name


def _cli(
    tmp_path: Path, env_extra: dict[str, str], *args: str, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update(env_extra, PYTHONPATH=os.pathsep.join([str(tmp_path), SRC]))
    argv = [sys.executable, *flags, "-m", "spawnkit.cli", *args]
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _selections(ns: str) -> list[dict[str, str]]:
    prefix = ns.upper()
    lenient = {f"{prefix}_PLUGINS": "mnie", f"{prefix}_LENIENT_PLUGINS": "1"}
    return [lenient, {f"{prefix}_PLUGINS": ","}]


@pytest.mark.parametrize("case", ["lenient", "blank"])
def test_doctor_without_a_child_fails_where_the_warning_filter_makes_a_launch_refuse(
    tmp_path: Path, ns: str, case: str
) -> None:
    env = _selections(ns)[["lenient", "blank"].index(case)]
    launch = _cli(tmp_path, env, "launch", "wfapp:hello", "--namespace", ns, flags=("-W", ERROR))
    assert launch.returncode != 0 and "PluginSelectionWarning" in launch.stderr, launch
    # the user's own filter refused: said as such, not as a spawnkit bug to report
    assert "internal error" not in launch.stderr and "warnings filter" in launch.stderr, launch
    doctor = _cli(tmp_path, env, "doctor", "--namespace", ns, "--no-child", "--json",
                  flags=("-W", ERROR))  # fmt: skip
    assert doctor.returncode == 1, doctor
    data = json.loads(doctor.stdout)
    (problem,) = data["problems"]
    assert problem.startswith("launch refused: PluginSelectionWarning: "), problem
    assert ("'mnie'" if case == "lenient" else "is set but blank") in problem
    assert not [w for w in data["warnings"] if "mnie" in w or "is set but blank" in w], data
    # without the filter, the launch runs and doctor says OK with the warning
    assert _cli(tmp_path, env, "launch", "wfapp:hello", "--namespace", ns).returncode == 0
    plain = _cli(tmp_path, env, "doctor", "--namespace", ns, "--no-child", "--json")
    assert plain.returncode == 0 and json.loads(plain.stdout)["problems"] == [], plain


def test_doctor_with_its_dry_run_says_the_refusal_once_and_does_not_crash(
    tmp_path: Path, ns: str
) -> None:
    """PYTHONWARNINGS reaches the dry run's own launch too: told the warning was said, it
    does not raise it out of doctor as an internal error."""
    env = {**_selections(ns)[0], "PYTHONWARNINGS": ERROR}
    doctor = _cli(tmp_path, env, "doctor", "--namespace", ns, "--json")
    assert doctor.returncode == 1 and "internal error" not in doctor.stderr, doctor
    (problem,) = json.loads(doctor.stdout)["problems"]
    assert problem.startswith("launch refused: PluginSelectionWarning: ") and "'mnie'" in problem


def test_doctor_says_an_unknown_name_once_in_lenient_mode(
    tmp_path: Path, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said it twice: its own "check the spelling" line and the selection's lenient warning."""
    from spawnkit import _metadata

    monkeypatch.syspath_prepend(str(tmp_path))
    _metadata.clear_cache()
    for key, value in _selections(ns)[0].items():
        monkeypatch.setenv(key, value)
    try:
        code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    finally:
        monkeypatch.undo()
        _metadata.clear_cache()
    assert code == 0, out + err
    (said,) = [w for w in json.loads(out)["warnings"] if "'mnie'" in w]
    assert "Lenient mode" in said and "did you mean 'mine'" in said
