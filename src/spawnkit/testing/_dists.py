"""Real distributions on disk for tests: a ``*.dist-info`` that importlib.metadata finds.

Exactly what an installed wheel leaves, so discovery takes its production path.  Standard library
only, so spawned children can use it too.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Distribution",
    "check_dist_name",
    "check_entry_points",
    "module_path",
    "package_modules",
    "write_distribution",
    "write_modules",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
#: ``module``, ``module:attr``, either with an ``[extras]`` list, as the entry-point spec allows.
_EP_VALUE_RE = re.compile(r"^[A-Za-z_][\w.]*(\s*:\s*[A-Za-z_][\w.]*)?(\s*\[[^\[\]]*\])?$")


@dataclass(frozen=True)
class Distribution:
    """What :func:`write_distribution` made: where, and which files."""

    name: str
    version: str
    root: Path
    dist_info: Path
    modules: tuple[Path, ...] = field(default=())
    entry_points: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def module_path(root: Path, module: str) -> Path:
    """``pkg.sub.mod`` -> ``root/pkg/sub/mod.py``; ``pkg/`` alone -> ``__init__.py``."""
    if module.endswith(".py") or "/" in module:
        return root / module
    parts = module.split(".")
    return root.joinpath(*parts[:-1], parts[-1] + ".py")


def package_modules(modules: Mapping[str, str]) -> dict[str, str]:
    """Map a dotted name that is also a package to ``__init__.py`` (``plug/`` would shadow it)."""
    dotted = [m for m in modules if not (m.endswith(".py") or "/" in m)]
    packages = {".".join(m.split(".")[:i]) for m in dotted for i in range(1, m.count(".") + 1)}
    out: dict[str, str] = {}
    for module, source in modules.items():
        if module in packages:
            out["/".join(module.split(".")) + "/__init__.py"] = source
        else:
            out[module] = source
    return out


def write_modules(root: Path, modules: Mapping[str, str]) -> list[Path]:
    """Write each module under ``root``, with the package ``__init__`` files a wheel carries."""
    written: list[Path] = []
    for module, source in modules.items():
        path = module_path(root, module)
        path.parent.mkdir(parents=True, exist_ok=True)
        parent = path.parent
        while parent != root and root in parent.parents:
            init = parent / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
            parent = parent.parent
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        written.append(path)
    return written


def check_dist_name(name: str) -> None:
    """Refuse a distribution name no installer would accept."""
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid distribution name {name!r}")


def check_entry_points(eps: Mapping[str, Mapping[str, str]], *, values: bool = True) -> None:
    """Refuse entry points an installer would refuse; ``values=False`` checks names only."""
    for group, items in eps.items():
        for ep_name, value in items.items():
            if not ep_name or "=" in ep_name or ep_name != ep_name.strip() or "\n" in ep_name:
                raise ValueError(f"invalid entry-point name {ep_name!r} in group {group!r}")
            if "\n" in value:
                raise ValueError(f"entry-point value {value!r} for {ep_name!r} spans lines")
            if values and not _EP_VALUE_RE.match(value.strip()):
                raise ValueError(
                    f"invalid entry-point value {value!r} for {ep_name!r} in group {group!r}: "
                    "expected 'module' or 'module:attr', optionally followed by '[extras]'"
                )


def write_distribution(
    root: str | os.PathLike[str],
    name: str,
    version: str = "0.1.0",
    *,
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    modules: Mapping[str, str] | None = None,
    add_to_sys_path: bool = False,
    validate: bool = True,
) -> Distribution:
    """Write distribution ``name`` into directory ``root`` and return what was written.

    An earlier ``.dist-info`` of the same name in ``root`` (another version) is removed first,
    as pip's upgrade does: left beside the new one, ``importlib.metadata`` read whichever
    ``listdir`` gave first (the old version's entry points, the new version's code).
    ``validate=False`` writes a malformed entry-point value verbatim, as a broken plugin would have.
    """
    check_dist_name(name)
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    eps = {g: dict(v) for g, v in (entry_points or {}).items()}
    check_entry_points(eps, values=validate)
    written = write_modules(base, package_modules(modules or {}))
    safe = re.sub(r"[-.]+", "_", name)
    _remove_earlier(base, safe)
    dist_info = base / f"{safe}-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    lines: list[str] = []
    for group, items in eps.items():
        lines.append(f"[{group}]")
        lines.extend(f"{k} = {v}" for k, v in items.items())
        lines.append("")
    (dist_info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    (dist_info / "RECORD").write_text("", encoding="utf-8")
    (dist_info / "INSTALLER").write_text("spawnkit.testing\n", encoding="utf-8")
    if add_to_sys_path and str(base) not in sys.path:
        sys.path.insert(0, str(base))
    importlib.invalidate_caches()
    from spawnkit import _metadata

    _metadata.clear_cache()
    return Distribution(name, version, base, dist_info, tuple(written), eps)


def _remove_earlier(base: Path, safe: str) -> None:
    """Remove ``base``'s ``.dist-info`` folders of the distribution (normalised name)."""
    want = re.sub(r"[-_.]+", "_", safe).lower()
    for folder in base.glob("*.dist-info"):
        stem = folder.name[: -len(".dist-info")].partition("-")[0]
        if folder.is_dir() and re.sub(r"[-_.]+", "_", stem).lower() == want:
            shutil.rmtree(folder)
