"""Read a package's import graph with ``ast`` and check it against a layer order.

Every module, every scope (module level, functions, classes, ``if
TYPE_CHECKING:`` blocks) and every way a module is named for loading counts:
``import x``, ``from x import y`` (relative ones resolved, ``y`` taken as the
submodule it names when it is one), and any string constant that is exactly a
module of the package (``importlib.import_module("pkg.mod")``, a lazy-export
table's values, a ``"pkg.mod:attr"`` reference), or an f-string whose fixed
head is a package prefix (``f"pkg.sub.{name}"``: every module under it).
Three kinds of string are not loads and are skipped: docstrings (prose), a
logger's name (``logging.getLogger("pkg.mod")``), and a module's own ancestor
package (``"pkg"`` is also the project's, the distribution's and the default
namespace's name; an ancestor is always imported before its submodule anyway).
There is no exception list: every module, every edge is checked.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Edge", "Graph", "cycles", "global_writes", "layer_order", "read_graph", "violations"]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # "path:line how"


@dataclass
class Graph:
    modules: dict[str, Path]
    edges: list[Edge]


def _module_names(root: Path, package: str) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _docstrings(tree: ast.Module) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _logger_names(tree: ast.Module) -> set[int]:
    return {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "getLogger"
        for arg in node.args
    }


def _targets(node: ast.AST, me: str, is_pkg: bool, modules: dict[str, Path]) -> Iterator[str]:
    """The modules ``node`` imports or names for loading."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = me.split(".") if is_pkg else me.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([node.module] if node.module else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield sub if sub in modules else base
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value.split(":", 1)[0]
        if name in modules:
            yield name
    elif isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            prefix = head.value
            if prefix.endswith(".") and prefix[:-1] in modules:
                yield from (m for m in modules if m.startswith(prefix))


def read_graph(root: Path, package: str) -> Graph:
    """Every import of every module of ``package`` (a folder under ``root``)."""
    modules = _module_names(root, package)
    edges: list[Edge] = []
    for me, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _docstrings(tree) | _logger_names(tree)
        joined_parts = {
            id(part)
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            for part in node.values
        }
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if id(node) in skip or id(node) in joined_parts:
                continue
            for target in _targets(node, me, path.name == "__init__.py", modules):
                how = "imports" if isinstance(node, ast.Import | ast.ImportFrom) else "names"
                if how == "names" and me.startswith(target + "."):
                    continue  # an ancestor named by string: see the module docstring
                if target != me and (target == package or target.startswith(package + ".")):
                    line = getattr(node, "lineno", 0)
                    edges.append(Edge(me, target, f"{rel}:{line} {how} {target}"))
    return Graph(modules, edges)


def layer_order(text: str) -> list[list[str]]:
    """The order from the ``layers:`` line of a document, top first.

    ``a -> b, c -> d``: each step a list of patterns; ``pkg`` names a module
    and everything under it, ``_*`` the package's top-level private helpers.
    """
    for line in text.splitlines():
        if line.strip().startswith("layers:"):
            steps = line.split(":", 1)[1].split("->")
            return [[p.strip() for p in step.split(",") if p.strip()] for step in steps]
    raise AssertionError("no 'layers:' line found")


def _layer(module: str, package: str, order: list[list[str]]) -> int:
    rest = module[len(package) + 1 :] if module != package else ""
    found = [
        i
        for i, step in enumerate(order)
        for pattern in step
        if (pattern == "" and rest == "")
        or (pattern == package and rest == "")
        or (rest and (rest == pattern or rest.startswith(pattern + ".")))
        or (rest and "." not in rest and pattern.startswith("_") and fnmatch.fnmatch(rest, pattern))
    ]
    if len(found) != 1:
        raise AssertionError(f"module {module} is in {len(found)} layers of {order}: place it once")
    return found[0]


def violations(graph: Graph, package: str, order: list[list[str]]) -> list[str]:
    """Every edge from a lower layer to a higher one (index grows downward)."""
    found = []
    for e in graph.edges:
        source, target = _layer(e.source, package, order), _layer(e.target, package, order)
        if target < source:
            found.append(f"{e.where} (up from layer {source} to layer {target})")
    return found


def cycles(graph: Graph) -> list[list[str]]:
    """Import circles between modules, each as the chain of edges that closes it."""
    out: dict[str, list[Edge]] = {}
    for e in graph.edges:
        out.setdefault(e.source, []).append(e)
    # Tarjan's strongly connected components; each component of >1 module is reported once,
    # with one concrete circle through it.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for e in out.get(v, []):
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            comp: set[str] = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return [[*_circle(sorted(comp)[0], comp, out), f"(all {len(comp)} modules of this circle: "
             + ", ".join(sorted(comp)) + ")"] for comp in comps]


def _circle(start: str, comp: set[str], out: dict[str, list[Edge]]) -> list[str]:
    """A shortest chain of edges from ``start`` back to itself inside ``comp``."""
    paths: dict[str, list[Edge]] = {start: []}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for e in out.get(v, []):
            if e.target not in comp:
                continue
            if e.target == start:
                return [x.where for x in [*paths[v], e]]
            if e.target not in paths:
                paths[e.target] = [*paths[v], e]
                queue.append(e.target)
    raise AssertionError(f"no circle through {start}")


def _package(module: str, modules: dict[str, Path]) -> str:
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def _module_names_bound(tree: ast.Module, me: str, modules: dict[str, Path]) -> dict[str, str]:
    """Local name -> the module of ``modules`` it is bound to, by any import at any scope."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
                elif not alias.asname:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for target, alias in zip(
                _targets(node, me, modules[me].name == "__init__.py", modules),
                node.names,
                strict=True,
            ):
                if target in modules and target.rpartition(".")[2] == alias.name:
                    bound[alias.asname or alias.name] = target
    return bound


def _module_of(expr: ast.expr, bound: dict[str, str], modules: dict[str, Path]) -> str | None:
    """The module ``expr`` names: a bound name, or an attribute chain down from one."""
    if isinstance(expr, ast.Name):
        return bound.get(expr.id)
    if isinstance(expr, ast.Attribute):
        inner = _module_of(expr.value, bound, modules)
        if inner is not None and f"{inner}.{expr.attr}" in modules:
            return f"{inner}.{expr.attr}"
    return None


def global_writes(root: Path, package: str) -> list[str]:
    """Every statement of ``package`` that writes a global of a module in another of its
    packages: ``mod.name = ...`` (augmented, annotated), ``del mod.name``, ``setattr(mod, ...)``
    or ``delattr(mod, ...)``, where ``mod`` is a module bound by an import at any scope, or an
    attribute chain from one (``pkg.mod.name = ...``)."""
    modules = _module_names(root, package)
    found: list[str] = []
    for me, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        bound = _module_names_bound(tree, me, modules)

        written: list[tuple[ast.AST, ast.expr, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
                written.append((node, node.value, node.attr))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr")
                and node.args
            ):
                written.append((node, node.args[0], node.func.id))
        for node, owner, name in written:
            target = _module_of(owner, bound, modules)
            if target is None or target not in modules:
                continue
            if _package(target, modules) != _package(me, modules):
                rel = path.relative_to(root).as_posix()
                found.append(f"{rel}:{getattr(node, 'lineno', 0)} writes {target}.{name}")
    return found
