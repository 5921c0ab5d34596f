"""No class over 300 lines and no function over 60 anywhere in src/ (#22: one concern per unit).

Read with ``ast`` so methods and nested functions count too, from the
``def``/``class`` line to the last line of the body.  There is no exception
list: a unit over the limit is split, not excused.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
LIMITS = {ast.ClassDef: 300, ast.FunctionDef: 60, ast.AsyncFunctionDef: 60}


def oversized(path: Path, root: Path = SRC) -> list[str]:
    """Each class or function of ``path`` over its limit, as ``file:line kind name: size``."""
    found: list[str] = []

    def walk(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            limit = LIMITS.get(type(child))
            if limit is None:
                walk(child, scope)
                continue
            assert isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            name = scope + child.name
            size = (child.end_lineno or child.lineno) - child.lineno + 1
            if size > limit:
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                where = f"{path.relative_to(root)}:{child.lineno}"
                found.append(f"{where} {kind} {name}: {size} > {limit} lines")
            walk(child, name + ".")

    walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return found


MODULES = sorted(SRC.rglob("*.py"))


def test_src_is_read() -> None:
    # the parametrized test below must not pass vacuously on a moved tree
    assert len(MODULES) > 50


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_class_over_300_or_function_over_60_lines(path: Path) -> None:
    assert oversized(path) == []


def test_the_check_finds_long_functions_methods_and_classes(tmp_path: Path) -> None:
    statements = "".join(f"        x{i} = {i}\n" for i in range(59))
    text = (
        "class Big:\n"
        + "".join(f"    a{i} = {i}\n" for i in range(240))
        + "    def long(self):\n"
        + statements
        + "        return 0\n"
        + "def short():\n    return 1\n"
    )
    module = tmp_path / "m.py"
    module.write_text(text)
    assert oversized(module, tmp_path) == [
        "m.py:1 class Big: 302 > 300 lines",
        "m.py:242 function Big.long: 61 > 60 lines",
    ]
