"""The code objects ``@record`` and ``NamedTuple`` build their classes' methods from.

Each makes a class's ``__init__`` (spec/_record.py) or ``__new__`` (_namedtuple.py) from one
template per shape, its placeholder names then replaced per class.  Compiling a template costs
0.1 to 0.2 ms, and a cold worker meets 20 shapes (issue #23): the templates of spawnkit's own
shapes are written out in ``_prebuilt.py`` and come from its bytecode cache like any module's
code; a shape not there is compiled here, once per process.

``python tests/test_prebuilt.py`` rewrites ``_prebuilt.py`` from the shapes of every class
spawnkit defines; that test fails while the file is not current.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["compiled", "signature_line", "template"]

_cache: dict[str, CodeType] = {}
#: The templates this process compiled: none, for spawnkit's own classes.
compiled: list[str] = []


def template(name: str, source: Callable[[str], str], method: str) -> CodeType:
    """The template ``name`` as the method ``method``: prebuilt, or compiled from
    ``source(name)`` (a ``def name``); made once per process."""
    code = _cache.get(name)
    if code is None:
        # Not ``from spawnkit import``: that asks the package's lazy ``__getattr__`` first,
        # which imports the export table (unpickling a spec must not).
        import spawnkit._prebuilt as _prebuilt

        built = getattr(_prebuilt, name, None)
        if built is not None:
            code = built.__code__
        else:
            from typing import Any  # the generated source's annotations; not on a cold path

            scope: dict[str, Any] = {}
            exec(source(name), {"Any": Any}, scope)  # generated from digits and flags only
            code = scope[name].__code__
            compiled.append(name)
        code = _cache[name] = _as_method(code, method)
    return code


def _as_method(code: CodeType, method: str) -> CodeType:
    """``code`` named as the method, from ``<string>`` as a compiled template (and a dataclass's
    ``__init__``) is: the prebuilt file's lines mean nothing to a traceback."""
    if sys.version_info >= (3, 11):
        return code.replace(co_name=method, co_qualname=method, co_filename="<string>")
    return code.replace(co_name=method, co_filename="<string>")  # pragma: no cover - 3.10


def signature_line(name: str, params: list[str], returns: str) -> str:
    """``def name(params) -> returns:``, one parameter a line when it would pass 100 columns."""
    line = f"def {name}({', '.join(params)}) -> {returns}:"
    if len(line) <= 100:
        return line
    inner = "".join(f"    {p},\n" for p in params)
    return f"def {name}(\n{inner}) -> {returns}:"
