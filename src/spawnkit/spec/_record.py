"""``@record``: a dataclass to its callers, without ``dataclasses`` on a worker's path.

The public types a worker builds (this package's spec types, the hook and plugin records, the
platform selection, the bootstrap report) were dataclasses: importing ``dataclasses`` brings
``inspect``, ``ast``, ``dis`` and ``tokenize``, and each class ``exec``\\ s the generated source of
every method, 0.6 to 1.3 ms a class in a cold worker (issue #23).  A record generates only its
``__init__``, and compiles none per class: one code object per shape of fields, renamed (see
``_init_code``); ``repr``, ``==``, hash and the frozen errors come from
:mod:`spawnkit._plain`, compiled once.  To callers it stays a dataclass:
``dataclasses.fields()``, ``asdict()``, ``replace()`` and ``is_dataclass()`` answer through a
real dataclass twin made the first time one asks, and ``__init__``'s signature, ``repr``,
``==``, hash, pickling and the frozen errors are a dataclass's (``tests/test_plain.py``).

It lives with the spec types because the spec and its payload pass through it (construction,
pickling, ``replace``): type plumbing, not a step of the payload's walk.

A frozen record pickles as its values in field order; unpickled with another count of them (a
worker whose spawnkit lays the record out otherwise than its launcher's) it raises
``SpecError[version]`` naming both spawnkits (``_layout``), not ``zip()``'s bare ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType, FunctionType

import spawnkit._templates as _templates  # not `from spawnkit import`: see _templates
from spawnkit._compat import TYPE_CHECKING
from spawnkit._plain import FrozenPlain, Plain

if TYPE_CHECKING:
    from typing import Any, TypeVar, cast, overload
else:
    from spawnkit._compat import TypeVar, cast

__all__ = [
    "as_dict",
    "default",
    "field",
    "field_names",
    "reading",
    "record",
    "replace",
    "set_state",
]

_T = TypeVar("_T")

if TYPE_CHECKING:  # mypy reads @record as it reads @dataclass
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[_T], _T]:
        return lambda decorator: decorator


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


class _Factory:
    """The default a factory field shows in ``__init__``'s signature, as a dataclass's does."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY: Any = _Factory()


class _Field:
    """What :func:`field` returns: read once by :func:`record`, never kept on the class."""

    __slots__ = ("compare", "default", "default_factory", "repr")

    def __init__(self, default: Any, default_factory: Any, repr: bool, compare: bool) -> None:
        self.default, self.default_factory = default, default_factory
        self.repr, self.compare = repr, compare


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | Any = _MISSING,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """``dataclasses.field`` for a :func:`record` (the options spawnkit's types use)."""
    return _Field(default, default_factory, repr, compare)


if TYPE_CHECKING:  # the stubs are for type checkers only: no typing.overload at run time

    @overload
    def record(cls: type[_T], /) -> type[_T]: ...
    @overload
    def record(*, frozen: bool = ..., slots: bool = ...) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[_T] | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:
    """``@dataclass`` (``eq=True``; ``frozen``, ``slots``) for a class with no base class."""

    def wrap(cls: type[_T]) -> type[_T]:
        return _build(cls, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _build(cls: type[_T], frozen: bool, slots: bool) -> type[_T]:
    if cls.__bases__ != (object,):
        raise TypeError(f"@record {cls.__qualname__}: a record has no base class")
    own = cls.__dict__
    fields: dict[str, _Field] = {}
    for name, kind in cls.__annotations__.items():  # its own (3.10+): it has no base
        if isinstance(kind, str) and kind.startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = own.get(name, _MISSING)
        fields[name] = value if isinstance(value, _Field) else _Field(value, _MISSING, True, True)
    ns = {k: v for k, v in own.items() if k not in ("__dict__", "__weakref__")}
    for name, f in fields.items():
        if slots or f.default is _MISSING:
            ns.pop(name, None)  # a slot's descriptor takes the name; no default: no attribute
        else:
            ns[name] = f.default  # as a dataclass keeps it: the class attribute is the default
    # a frozen record with slots (or its own) has no __dict__: its fields are set one by one
    whole = frozen and not slots and "__slots__" not in ns
    ns.update(
        __init__=_init(cls, fields, frozen, "__post_init__" in own, whole),
        __match_args__=tuple(fields),
        _fields=tuple(fields),
        _hidden=frozenset(n for n, f in fields.items() if not f.repr),
        _uncompared=frozenset(n for n, f in fields.items() if not f.compare),
        __replace__=_replace_method,  # copy.replace() (3.13), as on a dataclass
        _record_fields=fields,
        _record_frozen=frozen,
        __dataclass_fields__=_Twin("__dataclass_fields__"),
        __dataclass_params__=_Twin("__dataclass_params__"),
    )
    if slots:
        ns["__slots__"] = tuple(fields)
    if frozen:
        ns["__getstate__"] = _getstate  # unpickling must not go through the refused setattr
        ns.setdefault("__setstate__", set_state)  # ProcessSpec's ends reading a spec
    base = FrozenPlain if frozen else Plain
    return cast("type[_T]", type(cls.__name__, (base,), ns))


def _init(cls: type, fields: dict[str, _Field], frozen: bool, post: bool, whole: bool) -> Any:
    """The ``__init__`` a dataclass would have: its signature, defaults and factories.

    ``whole``: a frozen record without slots sets its ``__dict__`` once, not each field through
    ``object.__setattr__`` (a call a field: a worker's plugin stage builds a ``Registration`` a
    hook, its report as many records again, issue #23); it costs the instance its shared-key
    dict."""
    kinds: list[str] = []
    defaults: list[Any] = []
    scope: dict[str, Any] = {"_FACTORY": _FACTORY, "_set": object.__setattr__}
    for i, (name, f) in enumerate(fields.items()):
        if f.default_factory is not _MISSING:
            kinds.append("f")
            defaults.append(_FACTORY)
            scope[f"_f{i}"] = f.default_factory
        elif f.default is not _MISSING:
            kinds.append("d")
            defaults.append(f.default)
        elif defaults:
            raise TypeError(f"@record {cls.__qualname__}: {name!r} has no default but follows one")
        else:
            kinds.append("p")
    template = _init_code(tuple(kinds), frozen, post, whole)
    code = template.replace(
        co_varnames=("self", *fields),
        co_names=_renamed(template.co_names, fields),  # self.<field> = ...
        co_consts=_renamed(template.co_consts, fields),  # "<field>" (a key, or _set's name)
    )
    init = FunctionType(code, scope, "__init__", tuple(defaults) or None)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    annotations = cls.__annotations__  # a class's own (3.10+), not its bases'
    init.__annotations__ = {n: annotations[n] for n in fields} | {"return": None}
    return init


# One ``__init__`` template per shape (each field plain, defaulted or a factory; frozen; a
# ``__post_init__``; a frozen one's ``__dict__`` set whole), its placeholders ``_0``, ``_1``...
# renamed for each record: a parameter, the attribute it sets (a name, or for a frozen record
# a constant: a key of the dict, or ``_set``'s name) share the placeholder.  spawnkit's own
# shapes are prebuilt (spawnkit._templates).
shapes: set[tuple[tuple[str, ...], bool, bool, bool]] = set()


def _init_code(kinds: tuple[str, ...], frozen: bool, post: bool, whole: bool) -> CodeType:
    shapes.add((kinds, frozen, post, whole))
    name = init_name(kinds, frozen, post, whole)
    return _templates.template(
        name, lambda n: init_source(n, kinds, frozen, post, whole), "__init__"
    )


def init_name(kinds: tuple[str, ...], frozen: bool, post: bool, whole: bool) -> str:
    how = ("_frozen" if whole else "_frozen_each") if frozen else ""
    return f"init_{''.join(kinds) or 'none'}{how}{'_post' if post else ''}"


def init_source(name: str, kinds: tuple[str, ...], frozen: bool, post: bool, whole: bool) -> str:
    """``def name(self, _0, _1=None, ...)`` setting each field (by ``_set`` when frozen: the
    ``__dict__`` at once when ``whole``)."""
    params, values, lines = ["self: Any"], [], []
    for i, kind in enumerate(kinds):
        params.append(f"_{i}: Any" if kind == "p" else f"_{i}: Any = None")
        values.append(f"_f{i}() if _{i} is _FACTORY else _{i}" if kind == "f" else f"_{i}")
    if frozen and whole:
        lines.append(_set_dict([f'"_{i}": {value}' for i, value in enumerate(values)]))
    else:
        for i, value in enumerate(values):
            lines.append(f'_set(self, "_{i}", {value})' if frozen else f"self._{i} = {value}")
    if post:
        lines.append("self.__post_init__()")
    body = "".join(f"    {line}\n" for line in lines or ["pass"])
    return f"{_templates.signature_line(name, params, 'None')}\n{body}"


def _set_dict(items: list[str]) -> str:
    """``_set(self, "__dict__", {...})``, an item a line where one line would pass 100 columns."""
    line = f'_set(self, "__dict__", {{{", ".join(items)}}})'
    if len(line) <= 96:  # under the body's indent
        return line
    inner = "".join(f"            {item},\n" for item in items)
    return f'_set(\n        self,\n        "__dict__",\n        {{\n{inner}        }},\n    )'


def _renamed(names: tuple[Any, ...], fields: dict[str, _Field]) -> tuple[Any, ...]:
    """``names`` with each placeholder ``_<i>`` replaced by the i-th field's name (also in a
    tuple of them: a dict display's constant keys, ``BUILD_CONST_KEY_MAP``'s up to 3.13)."""
    by_placeholder = {f"_{i}": name for i, name in enumerate(fields)}

    def one(n: Any) -> Any:
        if isinstance(n, str):
            return by_placeholder.get(n, n)
        if type(n) is tuple and n and all(isinstance(k, str) for k in n):
            return tuple(by_placeholder.get(k, k) for k in n)
        return n

    return tuple(map(one, names))


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, name) for name in self._fields]


def set_state(self: Any, state: list[Any]) -> None:
    """A frozen record's ``__setstate__``: its values in field order, as many as it has."""
    fields = self._fields
    if len(state) != len(fields):  # pickled by a spawnkit with another layout of this record
        from spawnkit.spec._layout import other_layout

        global _built_by
        built_by, _built_by = _built_by, None
        raise other_layout(type(self).__name__, len(fields), len(state), built_by)
    for name, value in zip(fields, state, strict=True):
        object.__setattr__(self, name, value)


#: ``(version, package folder)`` of the spawnkit that pickled the spec being unpickled now:
#: set as its ``ProcessSpec`` is made, before any record inside it is filled, and cleared
#: once it is whole (``reading``), so a record of another layout can say who built it.
_built_by: tuple[str, str] | None = None


def reading(built_by: tuple[str, str] | None) -> None:
    """Note (or, with None, forget) which spawnkit pickled the spec being unpickled."""
    global _built_by
    _built_by = built_by


_twins: dict[type, Any] = {}


class _Twin:
    """A record's ``__dataclass_fields__``/``__dataclass_params__``, from a real dataclass made
    on first use: ``dataclasses`` is imported only by code that asks for them."""

    __slots__ = ("attr",)

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: object, owner: type) -> Any:
        twin = _twins.get(owner)
        if twin is None:
            import dataclasses

            specs = [
                (name, owner.__annotations__[name], _dataclass_field(dataclasses, f))
                for name, f in owner._record_fields.items()  # type: ignore[attr-defined]
            ]
            twin = dataclasses.make_dataclass(
                owner.__name__,
                specs,
                frozen=owner._record_frozen,  # type: ignore[attr-defined]
            )
            _twins[owner] = twin
        return getattr(twin, self.attr)


def _dataclass_field(dataclasses: Any, f: _Field) -> Any:
    options = {"repr": f.repr, "compare": f.compare}
    if f.default_factory is not _MISSING:
        options["default_factory"] = f.default_factory
    elif f.default is not _MISSING:
        options["default"] = f.default
    return dataclasses.field(**options)


def replace(obj: _T, /, **changes: Any) -> _T:
    """``dataclasses.replace`` for a record: a new instance, ``__post_init__`` run again."""
    for name in obj._fields:  # type: ignore[attr-defined]
        if name not in changes:
            changes[name] = getattr(obj, name)
    return type(obj)(**changes)


def field_names(cls: type) -> tuple[str, ...]:
    """A record's fields in ``__init__`` order (``dataclasses.fields`` without the import)."""
    return cls._fields  # type: ignore[attr-defined,no-any-return]


def default(cls: type, name: str) -> Any:
    """A fresh default of the record field ``name`` (its factory called), as ``__init__`` gives."""
    f: _Field = cls._record_fields[name]  # type: ignore[attr-defined]
    return f.default_factory() if f.default_factory is not _MISSING else f.default


def _replace_method(self: _T, /, **changes: Any) -> _T:
    return replace(self, **changes)


def as_dict(obj: Any) -> Any:
    """``dataclasses.asdict`` for records: records, lists, tuples and dicts copied through."""
    if isinstance(obj, Plain):
        return {name: as_dict(getattr(obj, name)) for name in obj._fields}
    kind = type(obj)
    if kind is list or kind is tuple:
        return kind(as_dict(v) for v in obj)
    if kind is dict:
        return {as_dict(k): as_dict(v) for k, v in obj.items()}
    if kind in _ATOMS:
        return obj
    import copy  # only for what a report seldom holds: a cold worker never imports it

    return copy.deepcopy(obj)


#: Types whose values ``copy.deepcopy`` returns as they are: most of a record's leaves.
_ATOMS = frozenset({str, int, float, bool, type(None), bytes})
