"""Real, installable plugin projects and throw-away virtual environments for slow tests.

Writes the *source* project (``pyproject.toml`` plus packages) so a real ``pip install`` writes
the entry points.  Imports no spawnkit internals: safe from a conftest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spawnkit.testing._dists import (
    check_dist_name,
    check_entry_points,
    package_modules,
    write_modules,
)

__all__ = ["PluginProject", "make_plugin_project", "make_venv", "pip_install"]


@dataclass(frozen=True)
class PluginProject:
    """A written project; ``os.fspath(project)`` is its root, so it can be handed to pip."""

    root: Path
    name: str
    version: str
    pyproject: Path
    entry_points: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    modules: tuple[Path, ...] = ()

    def __fspath__(self) -> str:
        return str(self.root)


def _toml_str(value: str) -> str:
    # A JSON string literal is a valid TOML basic string (same escapes for what we emit).
    return json.dumps(value)


def _layout(modules: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Packages and modules, listed: setuptools' discovery refuses flat layouts."""
    packages: set[str] = set()
    py_modules: set[str] = set()
    for module in modules:
        if module.endswith(".py") or "/" in module:
            parts = module.removesuffix(".py").split("/")
        else:
            parts = module.split(".")
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if parts:
                packages.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            continue
        if len(parts) == 1:
            py_modules.add(parts[0])
        else:
            packages.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(packages), sorted(py_modules)


def make_plugin_project(
    path: str | os.PathLike[str],
    name: str,
    version: str = "0.1.0",
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    modules: Mapping[str, str] | None = None,
    *,
    dependencies: Sequence[str] = (),
) -> PluginProject:
    """Write a setuptools project for distribution ``name`` into ``path``.

    Installs offline with ``pip install --no-build-isolation --no-deps <path>``.
    """
    check_dist_name(name)
    eps = {g: dict(v) for g, v in (entry_points or {}).items()}
    check_entry_points(eps)
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    mods = package_modules(modules or {})
    written = write_modules(root, mods)
    packages, py_modules = _layout(mods)
    lines = [
        "[build-system]",
        'requires = ["setuptools"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {_toml_str(name)}",
        f"version = {_toml_str(version)}",
        f"dependencies = [{', '.join(_toml_str(d) for d in dependencies)}]",
        "",
    ]
    for group, items in eps.items():
        lines.append(f"[project.entry-points.{_toml_str(group)}]")
        lines.extend(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in items.items())
        lines.append("")
    lines.append("[tool.setuptools]")
    lines.append(f"packages = [{', '.join(_toml_str(p) for p in packages)}]")
    lines.append(f"py-modules = [{', '.join(_toml_str(m) for m in py_modules)}]")
    lines.append("")
    pyproject = root / "pyproject.toml"
    pyproject.write_text("\n".join(lines), encoding="utf-8")
    return PluginProject(root, name, version, pyproject, eps, tuple(written))


def _venv_python(venv: Path) -> Path:
    if sys.platform == "win32":  # pragma: no cover - spawnkit's CI is POSIX
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def make_venv(
    path: str | os.PathLike[str], *, inherit: bool = True, timeout: float = 120.0
) -> Path:
    """A venv at ``path`` (``inherit``: sees this interpreter's packages); its interpreter."""
    from spawnkit._flags import check_flag

    check_flag("inherit", inherit, call="make_venv")
    venv = Path(path)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=timeout,
        capture_output=True,
    )
    python = _venv_python(venv)
    if inherit:
        out = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            timeout=timeout,
            capture_output=True,
            encoding="utf-8",
        )
        site_dir = Path(out.stdout.strip())
        ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        line = "; ".join(f"site.addsitedir({d!r})" for d in sorted(ours))
        (site_dir / "_spawnkit_inherit.pth").write_text(f"import site; {line}\n", encoding="utf-8")
    return python


def pip_install(
    python: str | os.PathLike[str],
    *targets: str | os.PathLike[str],
    args: Sequence[str] = ("--no-build-isolation", "--no-deps"),
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """``python -m pip install`` offline, bounded; a failure quotes the end of pip's output."""
    cmd = [
        os.fspath(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--no-index",
        *args,
        *(os.fspath(t) for t in targets),
    ]
    proc = subprocess.run(
        cmd, timeout=timeout, capture_output=True, encoding="utf-8", errors="replace"
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(
            f"pip install of {', '.join(os.fspath(t) for t in targets)} into {python} failed "
            f"with exit status {proc.returncode}:\n{tail}"
        ) from subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc
