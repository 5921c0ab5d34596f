"""``class X(NamedTuple)`` for spawnkit's own types, without ``typing``'s cost per class.

``typing.NamedTuple`` type-checks every annotation (with ``from __future__ import
annotations`` each is a string it compiles into a ``ForwardRef``) and then has
``collections.namedtuple`` compile a ``__new__`` from source: 150 to 200 us a class, and a
cold worker imports 26 of them (issue #23).  This one keeps the annotations as written
and makes ``__new__`` from one code object per number of fields, its parameters renamed
(no compiling per class).  What a class gets is what ``typing.NamedTuple`` gives: a
``tuple`` subclass with the same fields, defaults, docstrings, ``repr``, ``==``, pickling,
``_make``/``_replace``/``_asdict``/``_fields``/``_field_defaults``, ``__match_args__`` and
``copy.replace`` (3.13); ``tests/test_namedtuple.py`` compares the two.  To mypy it *is*
``typing.NamedTuple``: modules import it under ``TYPE_CHECKING`` from there.
"""

from __future__ import annotations

import collections
import sys
from operator import itemgetter
from types import CodeType, FunctionType

import spawnkit._templates as _templates  # not `from spawnkit import`: see _templates
from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = ["NamedTuple"]

# collections' own C field descriptor (what namedtuple uses); a property elsewhere.
_tuplegetter: Any = getattr(collections, "_tuplegetter", None) or (
    lambda index, doc: property(itemgetter(index), doc=doc)
)

_tuple_new = tuple.__new__

# What a class body may not define (it would break the tuple), and what is not copied.
_PROHIBITED = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
     "_make", "_replace", "_asdict", "_source"}
)  # fmt: skip
_NOT_COPIED = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__"})

#: The arities met (spawnkit._templates prebuilds spawnkit's own).
arities: set[int] = set()


def _new_code(fields: tuple[str, ...]) -> CodeType:
    """``def __new__(_cls, <fields>): return _tuple_new(_cls, (<fields>))`` without compiling it
    for each class.

    One template per number of fields, its parameters then renamed: locals are found by
    position in the bytecode, so only the names a signature, a keyword argument and an error
    message show change.  No field can be named ``_cls`` or ``_tuple_new``: ``_build``
    refuses a leading underscore, as namedtuple does.
    """
    n = len(fields)
    arities.add(n)
    template = _templates.template(new_name(n), new_source, "__new__")
    return template.replace(co_varnames=("_cls", *fields, *template.co_varnames[n + 1 :]))


def new_name(n: int) -> str:
    return f"new_{n}"


def new_source(name: str) -> str:
    """``def new_<n>(_cls, _0, ...)``: the tuple of its arguments."""
    n = int(name.rpartition("_")[2])
    params = [f"_{i}" for i in range(n)]
    items = f"({params[0]},)" if n == 1 else f"({', '.join(params)})"
    head = _templates.signature_line(name, ["_cls: Any", *(f"{p}: Any" for p in params)], "Any")
    return f"{head}\n    return _tuple_new(_cls, {items})\n"


def _make(cls: type, iterable: Any) -> Any:
    result: tuple[Any, ...] = _tuple_new(cls, iterable)
    if len(result) != len(cls._fields):  # type: ignore[attr-defined]
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")  # type: ignore[attr-defined]
    return result


# What namedtuple's _replace raises for a name that is no field (TypeError from 3.13 on).
_UNEXPECTED = TypeError if sys.version_info >= (3, 13) else ValueError


def _replace(self: Any, /, **changes: Any) -> Any:
    result = self._make(map(changes.pop, self._fields, self))
    if changes:
        raise _UNEXPECTED(f"Got unexpected field names: {list(changes)!r}")
    return result


def _repr(self: Any) -> str:
    pairs = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
    return f"{self.__class__.__name__}({pairs})"


def _asdict(self: Any) -> dict[str, Any]:
    return dict(zip(self._fields, self, strict=True))


def _getnewargs(self: Any) -> tuple[Any, ...]:
    return tuple(self)


def _build(name: str, ns: dict[str, Any]) -> type:
    annotations: dict[str, Any] = ns.get("__annotations__", {})
    fields = tuple(annotations)
    for field in fields:
        if field.startswith("_"):
            raise ValueError(f"{name}: field names cannot start with an underscore: {field!r}")
    defaults = tuple(ns[f] for f in fields if f in ns)
    for field in fields[: len(fields) - len(defaults)]:
        if field in ns:
            raise TypeError(
                f"Non-default namedtuple field {fields[len(fields) - len(defaults)]} "
                f"cannot follow default field {field}"
            )
    for key in ns:
        if key in _PROHIBITED:
            raise AttributeError(f"Cannot overwrite NamedTuple attribute {key}")
    module = ns.get("__module__", "__main__")
    qualname = ns.get("__qualname__", name)
    new = FunctionType(_new_code(fields), {"_tuple_new": _tuple_new}, "__new__", defaults or None)
    new.__qualname__ = f"{qualname}.__new__"
    new.__doc__ = f"Create new instance of {name}({', '.join(fields)})"
    new.__annotations__ = dict(annotations)
    body: dict[str, Any] = {
        "__doc__": f"{name}({', '.join(fields)})",
        "__slots__": (),
        "_fields": fields,
        "_field_defaults": dict(zip(fields[len(fields) - len(defaults) :], defaults, strict=True)),
        "__new__": new,
        "_make": classmethod(_make),
        "_replace": _replace,
        "__repr__": _repr,
        "_asdict": _asdict,
        "__getnewargs__": _getnewargs,
        "__match_args__": fields,
        "__module__": module,
        "__qualname__": qualname,
        "__annotations__": annotations,
    }
    if sys.version_info >= (3, 13):
        body["__replace__"] = _replace
    for index, field in enumerate(fields):
        body[field] = _tuplegetter(index, f"Alias for field number {index}")
    for key, value in ns.items():
        if key not in _NOT_COPIED and key not in fields:
            body[key] = value
    return type(name, (tuple,), body)


class _NamedTupleMeta(type):
    """Turns the class statement into a plain ``tuple`` subclass (not an instance of this)."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:
        if bases != (_Base,):
            raise TypeError(f"{name}: a NamedTuple can only derive from NamedTuple")
        return _build(name, ns)


_Base: Any = type.__new__(_NamedTupleMeta, "NamedTuple", (), {"__module__": __name__})

if TYPE_CHECKING:  # mypy reads a class deriving from this as it reads typing's
    from typing import NamedTuple as NamedTuple
else:

    def NamedTuple(*_: Any, **__: Any) -> NoReturn:
        """Only the class syntax is supported: ``class Point(NamedTuple): x: int``."""
        raise TypeError("spawnkit's NamedTuple supports the class syntax only")

    NamedTuple.__mro_entries__ = lambda bases: (_Base,)
