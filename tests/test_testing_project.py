"""make_plugin_project: a real pyproject package; the slow test pip-installs it into a venv."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI (the dev extra installs it on 3.10)
    import tomli as tomllib

from spawnkit.testing import make_plugin_project, make_venv, pip_install

TIMEOUT = 120


def test_make_plugin_project_writes_the_seed_layout(tmp_path):
    project = make_plugin_project(
        tmp_path / "my_platform_plugin",
        "my-platform-plugin",
        "0.1.0",
        entry_points={"spawnkit.platforms": {"my_device": "my_platform_plugin:activate"}},
        modules={
            "my_platform_plugin": "def activate():\n    return None\n",
            "my_platform_plugin.device": "X = 1\n",
            "my_platform_plugin.platform": "Y = 2\n",
        },
    )
    data = tomllib.loads(project.pyproject.read_text())
    assert data["build-system"]["build-backend"] == "setuptools.build_meta"
    assert (data["project"]["name"], data["project"]["version"]) == ("my-platform-plugin", "0.1.0")
    assert data["project"]["entry-points"] == {
        "spawnkit.platforms": {"my_device": "my_platform_plugin:activate"}
    }
    assert data["tool"]["setuptools"] == {"packages": ["my_platform_plugin"], "py-modules": []}
    # "my_platform_plugin" is also the package of .device: its source becomes __init__.py.
    pkg = project.root / "my_platform_plugin"
    assert "def activate" in (pkg / "__init__.py").read_text()
    assert not (project.root / "my_platform_plugin.py").exists()
    assert (pkg / "device.py").read_text() == "X = 1\n"


def test_make_plugin_project_entry_point_tables_and_single_modules(tmp_path):
    project = make_plugin_project(
        tmp_path / "gp",
        "my-general-plugin",
        "2.0",
        entry_points={
            "spawnkit.plugins": {"my_plugin": "my_general_plugin:register"},
            "other.group": {"x": "solo:f"},
        },
        modules={"my_general_plugin.__init__": "def register():\n    pass\n", "solo": "f = 1\n"},
    )
    data = tomllib.loads(project.pyproject.read_text())
    assert data["project"]["entry-points"] == {
        "spawnkit.plugins": {"my_plugin": "my_general_plugin:register"},
        "other.group": {"x": "solo:f"},
    }
    assert data["tool"]["setuptools"] == {"packages": ["my_general_plugin"], "py-modules": ["solo"]}
    assert os.fspath(project) == str(project.root)


def test_make_plugin_project_refuses_bad_names(tmp_path):
    with pytest.raises(ValueError, match="invalid distribution name"):
        make_plugin_project(tmp_path / "x", "bad name")
    with pytest.raises(ValueError, match="invalid entry-point value"):
        make_plugin_project(tmp_path / "y", "ok", entry_points={"g": {"e": "not valid"}})


@pytest.mark.slow
def test_pip_installed_plugin_project_is_discovered_in_a_fresh_venv(tmp_path):
    """A real build and install: pip, not the test, writes the entry points."""
    group = f"g{uuid.uuid4().hex[:8]}"
    mod = f"plug_{uuid.uuid4().hex[:8]}"
    project = make_plugin_project(
        tmp_path / "src" / "plugin",
        "pip-installed-plugin",
        "1.4.0",
        entry_points={group: {"hello": f"{mod}.api:hello"}},
        modules={f"{mod}.api": "def hello():\n    return 'hello from pip'\n"},
    )
    python = make_venv(tmp_path / "venv")
    pip_install(python, project, timeout=TIMEOUT * 2)
    code = (
        "import importlib.metadata as md, json, spawnkit._metadata as sm\n"
        f"ep, = md.entry_points(group={group!r})\n"
        f"info, = sm.entry_points({group!r})\n"
        "print(json.dumps([ep.load()(), info.dist, info.version, "
        "md.distribution('pip-installed-plugin').read_text('INSTALLER').strip(), "
        "ep.dist.locate_file('').as_posix()]))\n"
    )
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert out.returncode == 0, out.stderr
    import json

    result, dist, version, installer, location = json.loads(out.stdout)
    assert (result, dist, version, installer) == (
        "hello from pip",
        "pip-installed-plugin",
        "1.4.0",
        "pip",
    )
    assert location.startswith((tmp_path / "venv").as_posix())
    # The plugin went into the new venv only: this interpreter does not see it.
    check = subprocess.run(
        [sys.executable, "-c", f"import importlib.util as u; print(u.find_spec({mod!r}))"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert check.stdout.strip() == "None"


def test_pip_install_failure_quotes_pip(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("this is not toml [")
    with pytest.raises(RuntimeError, match=r"pip install of .* failed with exit status"):
        pip_install(sys.executable, broken, args=("--no-build-isolation", "--no-deps", "--dry-run"))
