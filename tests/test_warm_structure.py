"""The warm server's place in the house (#22 item 2), read from the source with ast.

Every scope counts (``TYPE_CHECKING`` blocks and imports inside functions):
nothing outside ``protocol/`` imports one of its private modules; no two
protocol modules import each other; and no spawnkit module assigns to another
spawnkit module's globals (the warm server once wrote its per-plugin check
into ``hooks.plugins``: it is a ``load(after_each=...)`` argument now).
"""

from __future__ import annotations

import ast
from pathlib import Path

import spawnkit

_SRC = Path(spawnkit.__file__).parent


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(_SRC.rglob("*.py")):
        rel = path.relative_to(_SRC.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        found[name] = ast.parse(path.read_text(), str(path))
    return found


def _imports(tree: ast.Module) -> dict[str, str]:
    """Every spawnkit module a file imports, anywhere, by the local name it binds."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("spawnkit"):
                    bound[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spawnkit"):
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
    return bound


def test_nothing_outside_protocol_imports_its_private_modules() -> None:
    bad = [
        f"{name} imports {target}"
        for name, tree in _modules().items()
        if not name.startswith("spawnkit.protocol")
        for target in _imports(tree).values()
        if target.startswith("spawnkit.protocol._")
    ]
    assert not bad


def test_no_two_protocol_modules_import_each_other() -> None:
    mods = {n: set(_imports(t).values()) for n, t in _modules().items()}
    proto = [n for n in mods if n.startswith("spawnkit.protocol.")]

    def uses(a: str, b: str) -> bool:
        return any(t == b or t.startswith(b + ".") for t in mods[a])

    circles = [(a, b) for a in proto for b in proto if a < b and uses(a, b) and uses(b, a)]
    assert not circles


def test_no_module_assigns_another_spawnkit_modules_globals() -> None:
    writes = []
    for name, tree in _modules().items():
        bound = _imports(tree)
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in bound
                    and bound[target.value.id] != name
                ):
                    writes.append(f"{name}: {target.value.id}.{target.attr} = ...")
    assert not writes
