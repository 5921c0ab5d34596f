"""Where a module's own import-time code calls a name: what it computed there is fixed.

The sweep rebinds ``from eng.utils import is_hip`` in a module imported before the hooks
(a plugin that imports engine code at its top), so later calls run the hook; but a module-level
``_is_hip = is_hip()`` already ran the original, and no rebinding reaches a computed value.
Only the module's source says so.  This reads it (``ast``: imported only here, only for a
module the sweep rebound a name in) and lists the lines where code that runs as the module is
imported calls one of the names: module and class bodies, decorators, default values,
comprehensions; not function bodies, nor the ``if __name__ == "__main__":`` and ``if
TYPE_CHECKING:`` blocks that an import does not run.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast

__all__ = ["calls_at_import"]


def calls_at_import(
    module: str, wanted: Mapping[str, Collection[str | None]]
) -> dict[tuple[str, str | None], list[int]]:
    """The lines of the import-time calls in ``module``'s source of each global name in
    ``wanted`` (``None``: ``name(...)``) or of an attribute of it (``"m"``: ``name.m(...)``,
    ``name().m(...)``), by (name, attribute); empty when it has no readable source (an
    extension, a zip without sources)."""
    source = _source(module)
    if source is None or not _mentions_a_call(source, wanted):
        return {}
    import ast  # only for a module whose text has such a call: parsing is the cost

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found: dict[tuple[str, str | None], list[int]] = {}
    for node in _run_at_import(tree.body):
        if not isinstance(node, ast.Call):
            continue
        func: ast.expr = node.func
        attr: str | None = None
        if isinstance(func, ast.Attribute):
            attr = func.attr
            func = func.value
            if isinstance(func, ast.Call):  # name().m(): the instance's method
                func = func.func
        if isinstance(func, ast.Name) and attr in wanted.get(func.id, ()):
            found.setdefault((func.id, attr), []).append(node.lineno)
    return found


def _mentions_a_call(source: str, names: Collection[str]) -> bool:
    """``name(`` or ``name.`` somewhere in the text: a module that only rebinds or stores
    the names (``c0 = ops.tokenize``) is not parsed."""
    import re

    alternatives = "|".join(map(re.escape, names))
    return re.search(rf"(?<![\w.])(?:{alternatives})\s*[(.]", source) is not None


def _source(module: str) -> str | None:
    mod = sys.modules.get(module)
    loader = getattr(getattr(mod, "__spec__", None), "loader", None)
    get_source = getattr(loader, "get_source", None)
    if get_source is None:
        return None
    try:
        text = get_source(module)
    except Exception:  # no source is no finding, never a failed apply
        return None
    return text if isinstance(text, str) else None


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of ``body`` that runs when it runs, function bodies left out."""
    import ast

    todo: list[ast.AST] = list(reversed(body))
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            kids: list[ast.AST] = [*node.decorator_list, *args.defaults]
            kids += [d for d in args.kw_defaults if d is not None]
        elif isinstance(node, ast.Lambda):
            kids = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        elif isinstance(node, ast.If) and _not_run(node.test):
            kids = list(node.orelse)
        else:
            kids = list(ast.iter_child_nodes(node))
        todo.extend(reversed(kids))


def _not_run(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` (or ``typing.TYPE_CHECKING``), and ``__name__ == "__main__"``."""
    import ast

    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return True
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return True
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)):
        return False
    right = test.comparators[0] if len(test.comparators) == 1 else None
    return (
        test.left.id == "__name__"
        and isinstance(right, ast.Constant)
        and right.value == "__main__"
    )
