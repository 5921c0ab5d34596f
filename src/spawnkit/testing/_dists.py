"""Real distributions on disk for tests: a ``*.dist-info`` that importlib.metadata finds.

Exactly what an installed wheel leaves, so discovery takes its production path.  Standard library
only, so spawned children can use it too.
"""

from __future__ import annotations

import base64
import csv
import hashlib
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


def write_modules(
    root: Path, modules: Mapping[str, str], created: list[Path] | None = None
) -> list[Path]:
    """Write each module under ``root``, with the package ``__init__`` files a wheel carries
    (those made here are appended to ``created``)."""
    written: list[Path] = []
    for module, source in modules.items():
        path = module_path(root, module)
        path.parent.mkdir(parents=True, exist_ok=True)
        parent = path.parent
        while parent != root and root in parent.parents:
            init = parent / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
                if created is not None:
                    created.append(init)
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
    with the files its ``RECORD`` lists, as pip's upgrade does: left beside the new one,
    ``importlib.metadata`` read whichever ``listdir`` gave first (the old version's entry points,
    the new version's code); and the old files left, a submodule the new version dropped stayed
    importable and an old package shadowed the new version's single-file module.  ``RECORD``
    lists every file written (as pip writes it), so the next version can remove them.
    ``validate=False`` writes a malformed entry-point value verbatim, as a broken plugin would have.
    """
    from spawnkit._flags import check_flag

    check_dist_name(name)
    check_flag("add_to_sys_path", add_to_sys_path, call="write_distribution")
    check_flag("validate", validate, call="write_distribution")
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    eps = {g: dict(v) for g, v in (entry_points or {}).items()}
    check_entry_points(eps, values=validate)
    safe = re.sub(r"[-.]+", "_", name)
    _remove_earlier(base, safe)
    inits: list[Path] = []
    written = write_modules(base, package_modules(modules or {}), inits)
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
    (dist_info / "INSTALLER").write_text("spawnkit.testing\n", encoding="utf-8")
    _write_record(base, dist_info, [*written, *inits])
    if add_to_sys_path and str(base) not in sys.path:
        sys.path.insert(0, str(base))
    importlib.invalidate_caches()
    from spawnkit import _metadata

    _metadata.clear_cache()
    return Distribution(name, version, base, dist_info, tuple(written), eps)


def _write_record(base: Path, dist_info: Path, files: list[Path]) -> None:
    """``RECORD`` as pip writes it: each file's path, ``sha256=`` digest and size."""
    lines = []
    for path in [*files, *(dist_info / n for n in ("METADATA", "entry_points.txt", "INSTALLER"))]:
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path.relative_to(base).as_posix()},sha256={digest},{len(data)}")
    lines.append(f"{(dist_info / 'RECORD').relative_to(base).as_posix()},,")
    (dist_info / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _remove_earlier(base: Path, safe: str) -> None:
    """Remove ``base``'s ``.dist-info`` folders of the distribution (normalised name) and the
    files their ``RECORD`` lists (with their bytecode, and the folders left empty), as pip's
    uninstall does; a path outside ``base`` is left alone."""
    want = re.sub(r"[-_.]+", "_", safe).lower()
    for folder in base.glob("*.dist-info"):
        stem = folder.name[: -len(".dist-info")].partition("-")[0]
        if folder.is_dir() and re.sub(r"[-_.]+", "_", stem).lower() == want:
            _remove_recorded(base.resolve(), folder)
            shutil.rmtree(folder)


def _remove_recorded(base: Path, folder: Path) -> None:
    record = folder / "RECORD"
    entries = record.read_text(encoding="utf-8").splitlines() if record.is_file() else []
    parents: set[Path] = set()
    for row in csv.reader(entries):
        path = (base / row[0]).resolve() if row and row[0] else None
        if path is None or base not in path.parents or folder.resolve() in path.parents:
            continue
        cached = path.parent / "__pycache__"
        gone = [path, *(cached.glob(f"{path.stem}.*.pyc") if path.suffix == ".py" else ())]
        for item in gone:
            if item.is_file():
                item.unlink()
                parents.add(item.parent)
    for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        while parent != base and base in parent.parents:
            try:
                parent.rmdir()  # only an empty one, as pip leaves a folder holding others' files
            except OSError:
                break
            parent = parent.parent
