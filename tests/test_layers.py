"""Dependencies point one way: the hook engine and the platforms never import the layers above.

The namespace facade (``spawnkit.namespace``) composes the hook registry, the
plugin manager and the platform manager; the bootstrap and the launcher use
all of them.  An import from ``spawnkit.hooks`` or ``spawnkit.platforms`` back
up into one of those, at any scope (a function-local import included), is an
import cycle waiting to bite: these tests read the source, so it cannot come
back unnoticed.  Imports under ``if TYPE_CHECKING:`` are annotations only and
are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import spawnkit

SRC = Path(spawnkit.__file__).parent
LOWER = ("hooks", "platforms")
UPPER = ("spawnkit.namespace", "spawnkit.bootstrap", "spawnkit.launch", "spawnkit.protocol")
#: The only places a lower package may *name* the facade: the lazy re-exports of the
#: module-level API that takes ``namespace=None`` (defined in ``spawnkit.namespace``).
REEXPORTS = {"hooks/__init__.py", "hooks/plugins.py", "platforms/__init__.py"}


def _upper(module: str) -> bool:
    return any(module == u or module.startswith(u + ".") for u in UPPER)


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return skipped


def _upward_references(source: str, where: str) -> list[str]:
    tree = ast.parse(source, where)
    skipped = _type_checking_nodes(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if _upper(a.name)]
            found += [f"{where}:{node.lineno} import {name}" for name in names]
        elif isinstance(node, ast.ImportFrom) and node.module and _upper(node.module):
            found.append(f"{where}:{node.lineno} from {node.module} import ...")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _upper(node.value)
            and where not in REEXPORTS
        ):
            # importlib.import_module("spawnkit.bootstrap...") or a lazy-export table entry
            found.append(f"{where}:{node.lineno} names {node.value!r}")
    return found


def test_hooks_and_platforms_import_nothing_above_them() -> None:
    files = sorted(p for pkg in LOWER for p in (SRC / pkg).rglob("*.py"))
    assert len(files) > 10, files  # the packages are where this test thinks they are
    found = [
        ref
        for path in files
        for ref in _upward_references(path.read_text(), path.relative_to(SRC).as_posix())
    ]
    assert not found, "upward imports:\n" + "\n".join(found)


def test_the_scan_sees_a_function_local_upward_import() -> None:
    """The check itself: a lazy import or a module name is found, a TYPE_CHECKING import is not."""
    sample = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from spawnkit.namespace import Namespace\n"
        "def f():\n    from spawnkit.bootstrap import guard\n    return guard\n"
        "LAZY = {'x': 'spawnkit.launch.launcher'}\n"
    )
    assert _upward_references(sample, "hooks/sample.py") == [
        "hooks/sample.py:5 from spawnkit.bootstrap import ...",
        "hooks/sample.py:7 names 'spawnkit.launch.launcher'",
    ]


def test_the_reexported_module_level_api_still_works() -> None:
    import spawnkit.hooks
    import spawnkit.hooks.plugins
    import spawnkit.namespace
    import spawnkit.platforms

    assert spawnkit.hooks.load_plugins is spawnkit.namespace.load_plugins
    assert spawnkit.hooks.plugins.apply_plugin_hooks is spawnkit.namespace.apply_plugin_hooks
    assert spawnkit.platforms.explain_platform is spawnkit.namespace.explain_platform
    assert spawnkit.load_plugins is spawnkit.namespace.load_plugins


def _imports_of(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in paths:
        where = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(), where)
        skipped = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            found += [
                f"{where}:{node.lineno} imports {m}"
                for m in modules
                if any(m == f or m.startswith(f + ".") for f in forbidden)
            ]
    return found


def test_the_worker_side_and_the_wire_never_import_the_parent_side() -> None:
    """bootstrap/ (the worker) imports neither protocol/ nor launch/; protocol/ never launch/.

    ``spawnkit.bootstrap``'s ``__init__`` is the one exception: it still lends the
    launcher's public names, lazily, under ``TYPE_CHECKING`` and a string table.
    """
    worker = [p for p in (SRC / "bootstrap").rglob("*.py") if p.name != "__init__.py"]
    wire = list((SRC / "protocol").rglob("*.py"))
    assert worker and wire
    found = _imports_of(worker, ("spawnkit.protocol", "spawnkit.launch"))
    found += _imports_of(wire, ("spawnkit.launch",))
    assert not found, "upward imports:\n" + "\n".join(found)
