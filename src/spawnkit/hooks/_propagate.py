"""Finding stale references to hook targets' originals across ``sys.modules``, to rebind them.

A module that ran ``from pkg.mod import f`` before the hooks were applied holds
the original ``f`` in its own globals; patching ``pkg.mod.f`` alone leaves
every call through that name unhooked (the hook is "applied" but never runs).
The same goes, one level down, for an original stored in a module-level
container: ``TABLE = {"tok": f}``, a registry dict filled by a decorator,
``HANDLERS = [f]``, ``PAIRS = (f, g)``, a default argument
``def run(x, fn=f)`` of a module-level function or of a method of a class the
module defines, an attribute of a module-level object of the targets' own package
(``RUNNER.fn``) or an item of a dict or list that is one (a registry object filled
by a decorator: ``OPS._ops["rms"]``) or the registry of a ``functools.singledispatch``
function of that package (``@process.register(int)``, rebound through ``register``; a
``singledispatchmethod``'s too, in any module), a dataclass field's ``default_factory``
and the closure cell of the generated ``__init__`` that calls it, an attribute of a class
the module defines (``class Engine: tokfn = staticmethod(f)``) or an item of
a dict, list or tuple that is one (``class Ops: table = {"tok": f}``), and what a
module-level wrapper made at import holds: ``functools.partial(f, 1)``, a bound
method ``engine.run``, ``lru_cache()(f)``, a decorator's wrapper (``f`` in its
closure).

One sweep per apply finds all of them at once.  Per module, C-level passes
(``map``/``compress``/``isdisjoint`` over the ids of its globals and of its
containers' items, and of the attributes of the classes it defines) decide
whether the module needs a closer look; only the (rare) modules that hold an
original are walked in Python.  Globals, dict values, list items and class
attributes (also inside a ``staticmethod``/``classmethod``, and the items of
their dicts and lists) are rebound;
tuple items, default arguments and wrappers cannot be (or must not be: a default
argument is a common way to keep the original on purpose, and a new wrapper would
change the old one's identity) and come back as :class:`StaleHolder` for the
caller to report, as does a class attribute the caller fails to set (a class
that refuses ``setattr``).  The chains being installed hold their originals in
their closures by design: never reported, nor a copy of one (``copy_func`` of a
chain, made after it was installed, shares its code and runs its hooks).

What the sweep does not see: references deeper than that (a dict of dicts,
a dict in a class's dict, an instance's attribute, a partial in a dict, a
nested closure), containers of other types (sets, ``deque``, user
classes), classes a module imported rather than defined (their own module is
swept), a module's ``__all__`` (names, never called through), classes
implemented in C (static or immutable types: only C code can put an object
in their ``__dict__`` and nothing can rebind it there), and references held
outside module globals (locals of running frames, other objects).  Those
keep the original.
"""

from __future__ import annotations

import functools
import gc
import sys
import types
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Collection, Iterator, KeysView
from itertools import chain, compress, repeat
from operator import and_, attrgetter, is_, is_not, methodcaller, not_

from spawnkit._compat import TYPE_CHECKING
from spawnkit.hooks._chain import CHAIN_CODES
from spawnkit.hooks._dispatch_base import STANDING
from spawnkit.hooks._stale import (
    _DISPATCH_CODE,
    _METHOD_WRAPPERS,
    _WRAPPERS,
    BEGUN,
    BY_REFERENCE,
    CALLED_AT_IMPORT,
    FILLED,
    HIDDEN,
    LAYERED,
    LRU_CACHE,
    RUNNING,
    WEAK,
    ClassAttrs,
    DispatchTable,
    Holder,
    Rebind,
    StaleHolder,
    _unwrap,
    dispatch_registry,
    dispatcher_of,
)

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


#: Never rebound: ``builtins`` holds every builtin function, and hooking a module's
#: alias of one (``length = len``) must not hook the whole interpreter's ``len``.
NEVER_REBOUND = frozenset({"builtins", "sys"})

_DICTS = frozenset({dict, OrderedDict, defaultdict})
_LISTS = frozenset({list})
_TUPLES = frozenset({tuple})
_FUNCTIONS = frozenset({types.FunctionType})
#: A module global that calls a function it holds, and cannot be pointed at another in place
#: (a new object in its stead would change its identity): reported, never rebound.  So is an
#: original in a closure cell of a module-level function (a decorator's wrapper made at import).
_WRAPPING: dict[type, tuple[str, str]] = {
    functools.partial: ("func", "functools.partial"),
    types.MethodType: ("__func__", "bound method"),
    LRU_CACHE: ("__wrapped__", "functools.lru_cache"),
}
_MUTABLE = _DICTS | _LISTS
_CONTAINERS = _MUTABLE | _TUPLES | _FUNCTIONS | frozenset(_WRAPPING)
_CHUNK = 64  # modules per C-level container check
_defaults = attrgetter("__defaults__")
_module_of = attrgetter("__module__")
_kwdefaults = attrgetter("__kwdefaults__")
_code = attrgetter("__code__")
_dispatcher = attrgetter("dispatcher")
_get_fields = methodcaller("get", "__dataclass_fields__")
_DEFAULT_NAMES = ("_dflt_", "__dataclass_dflt_")
_closure = attrgetter("__closure__")
_flags = attrgetter("__flags__")
#: ``Py_TPFLAGS_HEAPTYPE`` set and ``Py_TPFLAGS_IMMUTABLETYPE`` clear: a class whose
#: attributes can be set, as every class a ``class`` statement makes
_CLASS_MASK, _PYTHON_CLASS = (1 << 9) | (1 << 8), 1 << 9
_HEAPTYPE = 1 << 9
#: Objects with a ``__dict__`` the sweep reads in their own right, not as a holder's attributes
_NOT_OBJECTS = (type, types.ModuleType, BaseException)
_flat = chain.from_iterable
#: Every non-``__main__`` module's ``__builtins__`` is this dict: never a holder, and
#: scanning it in each of a thousand modules would be most of the sweep's cost.
_BUILTINS_DICT: Any = vars(sys.modules["builtins"])


#: Modules that put another object in their place in ``sys.modules`` (torch's
#: ``torch.backends.cudnn`` ends with ``sys.modules[__name__] = CudnnModule(...)``, a wrapper
#: reading the real module through ``__getattr__``): the name -> (that object, the real
#: module's globals).  Their functions read those globals, which no ``sys.modules`` entry
#: holds; filled as a target is patched on such an object (``_apply._stood_in``).
STOOD_IN: dict[str, tuple[Any, dict[str, Any]]] = {}
_MOST_WRAPPERS = 8  # ``__wrapped__`` links followed to the function of a wrapper


def stood_in_globals(owner: types.ModuleType, raw: Any) -> dict[str, Any] | None:
    """The globals of the module ``owner`` stands in for, where ``raw`` (the function a
    target on ``owner`` resolved to through its ``__getattr__``, or a wrapper of one: torch's
    ``opt_einsum.is_available`` is an ``lru_cache``; or a class, ``_class_globals``) is
    defined; else None."""
    name = owner.__name__
    if issubclass(type(raw), type):
        try:
            namespace = _class_globals(owner, raw, name)
        except Exception:  # a class or wrapper whose attributes raise: nothing to follow
            return None
    else:
        namespace = _function_globals(raw)
    if type(namespace) is not dict or namespace is getattr(owner, "__dict__", None):
        return None
    if namespace.get("__name__") != name:
        return None  # another module's function (a package's lazy re-export): swept as such
    STOOD_IN[name] = (owner, namespace)
    return namespace


def _function_globals(raw: Any) -> Any:
    """The ``__globals__`` of ``raw``, or of the function it wraps (``__wrapped__``)."""
    func = raw
    try:
        for _ in range(_MOST_WRAPPERS):
            namespace = getattr(func, "__globals__", None)
            if type(namespace) is dict:
                return namespace
            func = getattr(func, "__wrapped__", None)
            if func is None:
                return None
    except Exception:  # an object whose attributes raise: nothing to follow
        return None
    return None


def _class_globals(owner: types.ModuleType, cls: type, name: str) -> dict[str, Any] | None:
    """The real module's globals, for a class it defines, which has no ``__globals__``: the
    module's own code builds the class it finds there (``def make(): return Conv()``).

    Found, cheapest first: as known from an earlier apply (where the class now is its
    REPLACE); as the globals of a function the class defines (a method's); as the wrapper's
    own attribute that is the real module (torch's ``PropModule.m``) or its globals; else,
    for a class of no functions behind a wrapper that keeps the module out of reach, as the
    module dict among the class's referrers (one pass over the heap, only then)."""
    if getattr(cls, "__module__", None) != name:
        return None  # another module's class (a lazy re-export): its own module is swept
    known = STOOD_IN.get(name)
    if known is not None and known[0] is owner:
        return known[1]
    wrapper = getattr(owner, "__dict__", None)
    for value in list(vars(cls).values()):
        if type(value) in (staticmethod, classmethod):
            value = value.__func__
        elif type(value) is property:
            value = value.fget
        if type(value) is types.FunctionType and _globals_of(value.__globals__, name, wrapper):
            return value.__globals__
    for value in list(wrapper.values()) if type(wrapper) is dict else ():
        namespace = value.__dict__ if type(value) is types.ModuleType else value
        if _globals_of(namespace, name, wrapper):
            return namespace
    held = [d for d in gc.get_referrers(cls) if _globals_of(d, name, wrapper)]
    return held[0] if held else None


def _globals_of(namespace: Any, name: str, wrapper: Any) -> bool:
    """Whether ``namespace`` is the globals a module named ``name`` ran in, not the
    wrapper's own dict."""
    return (
        type(namespace) is dict
        and namespace is not wrapper
        and namespace.get("__name__") == name
        and "__builtins__" in namespace
    )


def _module_dicts() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, module in list(sys.modules.items()):
        if name in NEVER_REBOUND:
            continue
        try:
            namespace = module.__dict__
        except Exception:  # a lazy or broken module object: nothing we may touch
            continue
        if type(namespace) is dict:
            yield name, namespace
    for name, (owner, namespace) in list(STOOD_IN.items()):
        if sys.modules.get(name) is owner:
            yield name, namespace
        else:  # it left sys.modules (or was imported anew): its globals are no one's now
            STOOD_IN.pop(name, None)


def _items(
    values: list[Any],
    names: Collection[str],
    immutable_too: bool,
    exempt: Collection[int],
    objects: bool = True,
) -> Iterator[Any]:
    """Every item one level inside ``values`` (module globals): one C-level iterator.

    The items of their dicts and lists (but the lists whose ids are ``exempt``: the
    modules' ``__all__``, two thirds of all list items) and, ``immutable_too``, of their
    tuples, of the defaults of their functions and of the attributes of the
    classes among them defined in one of the modules ``names`` (a class
    imported into a thousand modules is swept once, with the module that
    defines it).  One type pass over the globals keeps the containers and
    classes (a few in ten); the selections run over those only.
    """
    kinds = list(map(type, values))
    distinct = set(kinds)
    metaclasses = {kind for kind in distinct if issubclass(kind, type)}
    inside = _instance_items(values, kinds, distinct) if objects else iter(())
    wanted = (_CONTAINERS if immutable_too or objects else _MUTABLE) | metaclasses
    keep = list(map(wanted.__contains__, kinds))
    values, kinds = list(compress(values, keep)), list(compress(kinds, keep))
    functions = list(compress(values, map(_FUNCTIONS.__contains__, kinds)))
    if objects:  # a singledispatch registry, filled later like a dict
        inside = chain(inside, _dispatch_items(functions))
    if not immutable_too:  # what ``objects`` kept besides: never read as a holder itself
        keep = list(map((_MUTABLE | metaclasses).__contains__, kinds))
        values, kinds = list(compress(values, keep)), list(compress(kinds, keep))
    dicts = list(compress(values, map(_DICTS.__contains__, kinds)))
    lists = list(compress(values, map(_LISTS.__contains__, kinds)))
    classes = list(compress(values, map(metaclasses.__contains__, kinds)))
    parts: list[Iterator[Any]] = [
        _flat(map(dict.values, compress(dicts, map(is_not, dicts, repeat(_BUILTINS_DICT))))),
        _flat(compress(lists, map(not_, map(exempt.__contains__, map(id, lists))))),
        _class_items(_own_classes(names, classes), immutable_too),
        inside,
    ]
    if immutable_too:
        parts += [
            _flat(compress(values, map(_TUPLES.__contains__, kinds))),
            _flat(filter(None, map(_defaults, functions))),
            _flat(map(dict.values, filter(None, map(_kwdefaults, functions)))),
            *(
                map(attrgetter(attr), compress(values, map(is_, kinds, repeat(kind))))
                for kind, (attr, _) in _WRAPPING.items()
            ),
            # spawnkit's own chains (``exempt``) hold their targets' originals in closures too
            _cells(compress(functions, map(not_, map(exempt.__contains__, map(id, functions))))),
        ]
    return _flat(parts)


def _is_object_kind(kind: type) -> bool:
    """Whether instances of ``kind`` are plain Python objects with a ``__dict__`` (a registry,
    a singleton, a ``types.SimpleNamespace`` op table): not classes, modules or functions,
    which the sweep reads as such."""
    return kind is types.SimpleNamespace or (
        bool(getattr(kind, "__flags__", 0) & _HEAPTYPE)
        and getattr(kind, "__dictoffset__", 0) != 0
        and not issubclass(kind, _NOT_OBJECTS)
        and kind not in _CONTAINERS  # a partial, a bound method: read as what they wrap
    )


def _object_dict(obj: object) -> dict[str, Any] | None:
    """``obj``'s own ``__dict__``, read past any ``__getattr__``/``__getattribute__`` of its
    class (a lazy proxy's would import its target)."""
    try:
        found = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return found if type(found) is dict else None


def _object_dicts(values: list[Any], kinds: list[type], distinct: set[type]) -> list[Any]:
    plain = {kind for kind in distinct if _is_object_kind(kind)}
    if not plain:
        return []
    return [d for d in map(_object_dict, compress(values, map(plain.__contains__, kinds))) if d]


def _instance_items(values: list[Any], kinds: list[type], distinct: set[type]) -> Iterator[Any]:
    """The attributes of the module-level objects among ``values`` (``RUNNER.fn``) and the
    items of the dicts and lists among those (a registry's ``REGISTRY._ops['rms_norm']``,
    filled by a decorator as a target module was imported)."""
    found = _object_dicts(values, kinds, distinct)
    if not found:
        return iter(())
    attrs = list(_flat(map(dict.values, found)))
    types_ = list(map(type, attrs))
    return chain(
        attrs,
        _flat(map(dict.values, compress(attrs, map(_DICTS.__contains__, types_)))),
        _flat(compress(attrs, map(_LISTS.__contains__, types_))),
    )


def _dispatch_items(functions: list[types.FunctionType]) -> Iterator[Any]:
    """The implementations registered with the singledispatch functions among ``functions``
    (``@process.register(int)``)."""
    # every singledispatch function is one closure of one code object: comparing codes reads
    # no function's ``__dict__`` (which CPython would create for each on first read)
    dispatching: Iterator[Any] = compress(
        functions, map(is_, map(_code, functions), repeat(_DISPATCH_CODE))
    )
    if STANDING:  # the chain installed for one (rare): by id, in C
        hooked = compress(functions, map(STANDING.__contains__, map(id, functions)))
        dispatching = chain(dispatching, hooked)
    registries = filter(None, map(dispatch_registry, dispatching))
    return _flat(map(types.MappingProxyType.values, registries))


def _own_classes(names: Collection[str], classes: list[type]) -> list[type]:
    """The ``classes`` defined in Python in one of the modules ``names``."""
    # A static or immutable type (one implemented in C: a quarter of all class attributes
    # with the standard library loaded) refuses setattr, so nothing but its C code could
    # have put an original in its __dict__, and nothing could rebind one there.
    try:
        flags = map(and_, map(_flags, classes), repeat(_CLASS_MASK))
        python = list(compress(classes, map(_PYTHON_CLASS.__eq__, flags)))
        return list(compress(python, map(names.__contains__, map(_module_of, python))))
    except (AttributeError, TypeError):  # a metaclass hiding __module__: look one by one
        return [
            c
            for c in classes
            if getattr(c, "__flags__", 0) & _CLASS_MASK == _PYTHON_CLASS
            and getattr(c, "__module__", None) in names
        ]


def _class_items(classes: list[type], immutable_too: bool) -> Iterator[Any]:
    """The items of the dicts and lists among the attributes of ``classes`` (a dispatch table
    ``Ops.table = {"tok": f}``) and, ``immutable_too``, every attribute value, the function
    inside each static/classmethod and the items of the tuples among them."""
    if not classes:
        return iter(())
    items = list(_flat(map(types.MappingProxyType.values, map(vars, classes))))
    kinds = list(map(type, items))
    dicts = compress(items, map(_DICTS.__contains__, kinds))
    # a ``singledispatchmethod``'s registry, filled later like a dict
    sdms = compress(items, map(is_, kinds, repeat(functools.singledispatchmethod)))
    inside = [
        _flat(map(dict.values, dicts)),
        _flat(compress(items, map(_LISTS.__contains__, kinds))),
        map(_unwrap, _dispatch_items(list(map(_dispatcher, sdms)))),  # a classmethod's too
    ]
    if not immutable_too:
        return _flat(inside)
    wrapped = list(map(_unwrap, compress(items, map(_WRAPPERS.__contains__, kinds))))
    tuples = compress(items, map(_TUPLES.__contains__, kinds))
    # the methods' defaults (``def run(self, fn=tokenize)``), as a module-level function's
    methods = [
        *compress(items, map(_FUNCTIONS.__contains__, kinds)),
        *filter(_is_function, wrapped),
    ]
    return chain(
        items,
        wrapped,
        *inside,
        _flat(tuples),
        _flat(filter(None, map(_defaults, methods))),
        _flat(map(dict.values, filter(None, map(_kwdefaults, methods)))),
        _factories(classes),
    )


def _factories(classes: list[type]) -> Iterator[Any]:
    """The default factories of the dataclasses' fields (``field(default_factory=make)``),
    which each generated ``__init__`` holds in its closure."""
    for table in filter(None, map(_get_fields, map(vars, classes))):
        for field in list(table.values()) if type(table) is dict else ():
            yield getattr(field, "default_factory", None)


class Attrs:
    """An object's attribute as a container ``Holder`` and the journal can write: a dataclass
    field's ``default_factory``, a closure cell's ``cell_contents``."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        return f"Attrs({type(self.obj).__name__})"

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self.obj, name, default)

    def __setitem__(self, name: str, value: Any) -> None:
        setattr(self.obj, name, value)


def _is_function(obj: object) -> bool:
    return type(obj) is types.FunctionType


def _cells(functions: Iterator[types.FunctionType]) -> Iterator[Any]:
    """What the closure cells of ``functions`` hold (an empty cell reads as None)."""
    return map(_cell_contents, _flat(filter(None, map(_closure, functions))))


def _cell_contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled (a name assigned later in its scope)
        return None


def _parameters(func: types.FunctionType) -> tuple[str, ...]:
    code = func.__code__
    return code.co_varnames[: code.co_argcount]


def _inspect(
    modname: str,
    namespace: dict[str, Any],
    rebinds: dict[int, Rebind],
    skip: frozenset[tuple[str, str]],
    clean: bool,
    containers: bool,
    seen: set[int],
    found: list[Holder],
    stale: list[StaleHolder] | None,
) -> None:
    """The Python-level walk of one module already known to hold an original somewhere."""

    def hit(value: Any) -> Rebind | None:
        rebind = rebinds.get(id(value))
        if rebind is None or value is not rebind.old or modname in rebind.excluded:
            return None
        return rebind

    try:
        items = list(namespace.items())
    except RuntimeError:  # another thread changed the dict mid-scan: look again
        items = list(dict(namespace).items())
    for name, value in items:
        rebind = None if clean else hit(value)
        if rebind is not None:
            if (modname, name) not in skip:
                found.append(Holder(modname, namespace, name, name, rebind))
            continue
        if not containers or id(value) in seen:
            continue
        if isinstance(value, type) and getattr(value, "__module__", None) == modname:
            seen.add(id(value))
            _inspect_class(modname, value, hit, found, None if clean else stale, clean, seen)
            continue
        kind = type(value)
        registry = dispatch_registry(value) if kind is types.FunctionType else None
        if registry is not None:  # walked once, with the first module holding the function
            seen.add(id(value))
            _inspect_registry(modname, name, dispatcher_of(value), registry, hit, found)
        if kind in _MUTABLE:
            seen.add(id(value))
            entries = list(value.items()) if kind in _DICTS else list(enumerate(value))
            for key, item in entries:
                rebind = hit(item)
                if rebind is not None:  # "TABLE['tok']", "HANDLERS[2]"
                    found.append(Holder(modname, value, key, f"{name}[{key!r}]", rebind))
        elif _is_object_kind(kind):
            seen.add(id(value))
            _inspect_object(modname, name, value, hit, found, seen)
        elif not clean and stale is not None and kind in _CONTAINERS:
            seen.add(id(value))
            if kind is types.FunctionType and value.__code__ in CHAIN_CODES:
                continue  # a copy of a chain (``copy_func``): it runs the hooks it closes over
            for label, what, item in _fixed_items(name, value):
                rebind = hit(item)
                if rebind is not None and value is not rebind.new:  # not the target's chain
                    stale.append(StaleHolder(modname, label, what, rebind.key))


def _inspect_registry(
    modname: str,
    name: str,
    function: Any,
    registry: types.MappingProxyType[Any, Any],
    hit: Callable[[Any], Rebind | None],
    found: list[Holder],
) -> None:
    """The implementations a singledispatch function dispatches to (``process.registry[int]``)."""
    table = DispatchTable(function)
    for cls, impl in list(registry.items()):
        rebind = hit(impl.__func__ if type(impl) in _METHOD_WRAPPERS else impl)
        if rebind is not None:
            label = f"{name}.registry[{getattr(cls, '__qualname__', cls)}]"
            found.append(Holder(modname, table, cls, label, rebind))


def _inspect_object(
    modname: str,
    name: str,
    obj: Any,
    hit: Callable[[Any], Rebind | None],
    found: list[Holder],
    seen: set[int],
) -> None:
    """One level into a module-level object (``RUNNER.fn``), and into the dicts and lists
    among its attributes (a registry object's ``REGISTRY._ops['rms_norm']``)."""
    attrs = _object_dict(obj)
    for attr, item in list(attrs.items()) if attrs else ():
        rebind = hit(item)
        if rebind is not None:  # "RUNNER.fn": set in the object's own __dict__
            found.append(Holder(modname, attrs, attr, f"{name}.{attr}", rebind))
            continue
        kind = type(item)
        if kind not in _MUTABLE or id(item) in seen:
            continue
        seen.add(id(item))
        entries = list(item.items()) if kind in _DICTS else list(enumerate(item))
        for key, value in entries:
            rebind = hit(value)
            if rebind is not None:  # "REGISTRY._ops['rms_norm']"
                found.append(Holder(modname, item, key, f"{name}.{attr}[{key!r}]", rebind))


def _inspect_class(
    modname: str,
    cls: type,
    hit: Callable[[Any], Rebind | None],
    found: list[Holder],
    stale: list[StaleHolder] | None,
    clean: bool,
    seen: set[int],
) -> None:
    """One level into a class the module defines (``tokfn = staticmethod(tokenize)``), and
    into the dicts, lists and tuples among its attributes (``table = {"tok": tokenize}``).
    ``clean``: the class was built before any original existed; only a dict or list of it,
    filled later, can hold one."""
    attrs = ClassAttrs(cls)
    if not clean and "__dataclass_fields__" in vars(cls):
        _inspect_dataclass(modname, cls, hit, found)
    for attr, raw in list(vars(cls).items()):
        label = f"{cls.__qualname__}.{attr}"
        func = _unwrap(raw)
        rebind = None if clean else hit(func)
        if rebind is not None:  # "Engine.tokfn"
            found.append(Holder(modname, attrs, attr, label, rebind))
            continue
        if stale is not None and type(func) is types.FunctionType:  # "Engine.run() default"
            for where, what, item in _defaults_of(label, func):
                rebind = hit(item)
                if rebind is not None:
                    stale.append(StaleHolder(modname, where, what, rebind.key))
        kind = type(raw)
        if kind is functools.singledispatchmethod:  # "Engine.handle.registry[int]"
            registry = dispatch_registry(raw)
            if registry is not None:
                _inspect_registry(modname, label, raw.dispatcher, registry, hit, found)
            continue
        if (kind not in _MUTABLE and (stale is None or kind not in _TUPLES)) or id(raw) in seen:
            continue
        seen.add(id(raw))
        if kind in _TUPLES:
            for index, item in enumerate(raw):
                rebind = hit(item)
                if rebind is not None and stale is not None:  # "Engine.pairs[0]"
                    stale.append(
                        StaleHolder(modname, f"{label}[{index}]", "tuple item", rebind.key)
                    )
            continue
        entries = list(raw.items()) if kind in _DICTS else list(enumerate(raw))
        for key, item in entries:
            rebind = hit(item)
            if rebind is not None:  # "Ops.table['tok']", "Ops.handlers[0]"
                found.append(Holder(modname, raw, key, f"{label}[{key!r}]", rebind))


def _inspect_dataclass(
    modname: str, cls: type, hit: Callable[[Any], Rebind | None], found: list[Holder]
) -> None:
    """A field's ``default_factory`` (``field(default_factory=default_backend)``) and the
    closure cell of the generated ``__init__`` that calls it: both hold the original, and a
    new ``Config()`` called it unhooked."""
    table = vars(cls)["__dataclass_fields__"]
    for name, field in list(table.items()) if type(table) is dict else ():
        rebind = hit(getattr(field, "default_factory", None))
        if rebind is not None:  # "Config.backend default_factory"
            label = f"{cls.__qualname__}.{name} default_factory"
            found.append(Holder(modname, Attrs(field), "default_factory", label, rebind))
    init = vars(cls).get("__init__")
    code = getattr(init, "__code__", None)
    names = code.co_freevars if isinstance(code, types.CodeType) else ()
    for var, cell in zip(names, getattr(init, "__closure__", None) or (), strict=False):
        # the default's name in the generated code: "_dflt_x" to 3.11, "__dataclass_dflt_x__"
        rebind = hit(_cell_contents(cell)) if var.startswith(_DEFAULT_NAMES) else None
        if rebind is not None:  # the generated __init__ calls the factory from its closure
            label = f"{cls.__qualname__}.__init__() {var}"
            found.append(Holder(modname, Attrs(cell), "cell_contents", label, rebind))


def _fixed_items(name: str, value: Any) -> Iterator[tuple[str, str, Any]]:
    """(label, kind, item) of what a tuple, a function's defaults and closure, a partial, a
    bound method or an ``lru_cache`` hold: never rebound."""
    if type(value) is tuple:
        for index, item in enumerate(value):
            yield f"{name}[{index}]", "tuple item", item
        return
    wrapping = _WRAPPING.get(type(value))
    if wrapping is not None:
        attr, kind = wrapping
        yield name, kind, getattr(value, attr)
        return
    yield from _defaults_of(name, value)
    for item in map(_cell_contents, value.__closure__ or ()):
        yield f"{name}() closure", "closure variable", item


def _defaults_of(name: str, func: types.FunctionType) -> Iterator[tuple[str, str, Any]]:
    """(label, kind, item) of each default argument of ``func`` (keyword-only ones too)."""
    defaults = func.__defaults__ or ()
    params = _parameters(func)[len(_parameters(func)) - len(defaults) :]
    named = list(zip(params, defaults, strict=False))
    named += list((func.__kwdefaults__ or {}).items())
    for param, item in named:
        yield f"{name}() default of {param!r}", "default argument", item


#: The fix for each kind of holder besides a module's own references, in the order given
_FIXES = {
    CALLED_AT_IMPORT: (
        "for a call made as a module was imported, import that module only after the "
        "hooks are applied (from the entry, or inside the plugin's register function, not "
        "at a plugin module's top level), or compute the value where it is used."
    ),
    FILLED: (
        "for an lru_cache that answered before the hooks, call it only after they are "
        "applied (from the entry, not in a plugin's register function or as a module is "
        "imported), or clear it then (`<the function>.cache_clear()`)."
    ),
    HIDDEN: (
        "for an object that keeps the function it was handed as its module ran (a web "
        "route's endpoint, a thread's target, another library's registry), hook a function "
        "or method it calls at each use instead, or hand it the function after the hooks "
        "are applied (add the route from the entry)."
    ),
    WEAK: (
        "for a callback registry that keeps a weak reference (a signal's `connect()`, a "
        "`weakref.WeakMethod` observer, a `weakref.WeakSet` of listeners), connect the "
        "handler after the hooks are applied (from the entry, not as its module is "
        "imported), or hook a function the handler calls instead."
    ),
    BEGUN: (
        "for a call a thread began before the hooks were applied (a serve loop a module "
        "started as it was imported, `ThreadPoolExecutor(1).submit(serve)`, still running; "
        "or a thread pool's initializer, which ran in its thread), start that thread or "
        "pool after the hooks are applied (from the entry, or from a hook), or hook a "
        "function the loop calls at each step instead: a call never reaches hooks applied "
        "after it began."
    ),
    LAYERED: (
        "for a reference to another namespace's hooked object made between that namespace's "
        "bootstrap_here() and this one's, call this namespace's bootstrap_here() right after "
        "the other's, before the code that keeps the function runs (or keep it after both), "
        "so that it gets both namespaces' hooks."
    ),
    RUNNING: (
        "for a thread or pool task a module started as it was imported and handed the "
        "function (`pool.submit(poll, collect)`), start it after the hooks are applied "
        "(from the entry), or have it call the function through its module at each use "
        "(`metrics.collect()`)."
    ),
}


def what_runs(holders: list[dict[str, str]]) -> str:
    """What a call through unrebound holders runs: one bound to another namespace's chain
    (``LAYERED``, after its ``bootstrap_here``) runs that namespace's hooks; only these are
    missing there."""
    layered = sum(h["kind"] == LAYERED for h in holders)
    if not layered:
        return "the original, without the hooks"
    if layered == len(holders):
        return "the other namespace's hooks only, not these"
    return (
        "the original, without the hooks (those bound after another namespace's hooks: "
        "its hooks only)"
    )


def stale_fix(kinds: Collection[str]) -> str:
    """The one fix for every holder the sweep reports: where the reference should come from."""
    made = {
        "functools.partial": "functools.partial",
        "bound method": "bound method",
        "functools.lru_cache": "lru_cache",
        "closure variable": "decorated wrapper",
    }
    named = [shown for kind, shown in made.items() if kind in kinds]
    later = (
        f"; make a {' or a '.join(named)} after the hooks are applied (inside the code that "
        "calls it), not at import"
        if named
        else ""
    )
    fixes = []
    if set(kinds) - BY_REFERENCE - {CALLED_AT_IMPORT, FILLED}:
        fixes.append(
            "look the target up when it is called (e.g. `ops.tokenize(...)` through its "
            "module, or a dict or list entry, which the sweep rebinds) instead of keeping it in "
            f"a tuple or a default argument{later}."
        )
    fixes += [fix for kind, fix in _FIXES.items() if kind in kinds]
    return "Fix: " + " And ".join(fixes)


if TYPE_CHECKING:
    _Module = tuple[str, dict[str, Any], list[Any]]  # name, globals, their values


def _holding(
    group: list[_Module],
    wanted: KeysView[int],
    chains: frozenset[int],
    related: frozenset[str],
    *,
    immutable_too: bool,
) -> Iterator[_Module]:
    """The modules of ``group`` whose containers (and, ``immutable_too``, classes) hold one of
    the ``wanted`` ids; and, in a ``related`` package, whose module-level objects do.

    One C-level pass per chunk of modules first: only a chunk that holds an
    original is searched module by module.  Objects are read in the targets' own top-level
    packages only (an engine's registry object): reading every object of every module would
    add a third to a sweep with torch loaded.
    """
    own = [m[0].partition(".")[0] in related for m in group]
    for part, objects in (
        (list(compress(group, own)), True),
        (list(compress(group, map(not_, own))), False),
    ):
        for start in range(0, len(part), _CHUNK):
            chunk = part[start : start + _CHUNK]
            everything = list(_flat(values for _, _, values in chunk))
            names = {name for name, _, _ in chunk}
            exempt = chains.union(id(namespace.get("__all__")) for _, namespace, _ in chunk)
            found = _items(everything, names, immutable_too, exempt, objects)
            if wanted.isdisjoint(map(id, found)):
                continue
            for module in chunk:
                items = _items(module[2], (module[0],), immutable_too, exempt, objects)
                if not wanted.isdisjoint(map(id, items)):
                    yield module


def _modules(clean_modules: frozenset[str], related: frozenset[str]) -> list[_Module]:
    """Every module to sweep with its values; a clean one only in a ``related`` package."""
    out: list[_Module] = []
    for modname, namespace in _module_dicts():
        if modname in clean_modules and modname.partition(".")[0] not in related:
            continue
        try:
            values = list(namespace.values())
        except RuntimeError:  # another thread changed the dict mid-scan: look again
            values = list(dict(namespace).values())
        out.append((modname, namespace, values))
    return out


def find_holders(
    rebinds: dict[int, Rebind],
    skip: frozenset[tuple[str, str]] = frozenset(),
    clean_modules: frozenset[str] = frozenset(),
    *,
    containers: bool = False,
    stale: list[StaleHolder] | None = None,
) -> list[Holder]:
    """Every rebindable reference to one of the ``old`` objects; ``stale`` gets the others.

    ``skip`` holds (module, name) pairs not to report: the targets' own
    attributes, which the registry patches directly.  ``containers`` extends
    the search one level into module-level dicts, lists, tuples, the
    defaults of module-level functions and the attributes of the classes a
    module defines (see the module docstring).

    ``clean_modules`` are modules the caller vouches for: the bootstrap passes
    those that finished importing before any target module was imported (the
    import guard checked that).  Their globals, tuples and default arguments
    and classes were all built before an original existed, so only their mutable
    containers (a registry dict filled later by a decorator) can hold one,
    and only those of clean modules in a target's own top-level package are
    searched (``eng.registry`` filled by ``eng.ops``).  With torch loaded the
    clean modules are most of ``sys.modules``, and skipping them is most of
    the sweep's cost.
    """
    if not rebinds:
        return []
    wanted = rebinds.keys()
    related = frozenset(r.key.partition(".")[0] for r in rebinds.values() if containers)
    swept = _modules(clean_modules, related)
    dirty = [m for m in swept if m[0] not in clean_modules]
    # id(namespace) -> its containers too: direct holders, then nested ones (by the globals,
    # not the name: a module standing in for another one shares its name, ``STOOD_IN``)
    look: dict[int, bool] = {
        id(namespace): False
        for _, namespace, values in dirty
        if not wanted.isdisjoint(map(id, values))
    }
    if containers:
        # the hooked objects being installed: their closures hold the originals by design
        chains = frozenset(id(r.new) for r in rebinds.values())
        registries = [m for m in swept if m[0] in clean_modules]
        for _, namespace, _ in chain(
            _holding(dirty, wanted, chains, related, immutable_too=True),
            _holding(registries, wanted, chains, related, immutable_too=False),
        ):
            look[id(namespace)] = True
    found: list[Holder] = []
    # Containers already walked; a module's own namespace is never one (``__builtins__``,
    # ``vars(mod)`` kept somewhere): its globals follow that module's own rules.
    seen: set[int] = {id(_BUILTINS_DICT)}
    if any(look.values()):
        seen.update(id(namespace) for _, namespace in _module_dicts())
    for name, namespace, _ in swept:  # in sys.modules' order, as the journal records them
        nested = look.get(id(namespace))
        if nested is not None:
            clean = name in clean_modules
            _inspect(name, namespace, rebinds, skip, clean, nested, seen, found, stale)
    return found + _slot_holders(rebinds, found) if containers else found


def _slot_holders(rebinds: dict[int, Rebind], found: list[Holder]) -> list[Holder]:
    """The process-wide slots holding an original (a signal handler, ``sys.excepthook``, set
    by a target module as it was imported; ``_slots``), but those the walk found as a
    module's globals already (``threading.excepthook`` where ``threading`` was swept)."""
    from spawnkit.hooks._slots import slots_holding  # an original held elsewhere: few workers

    out: list[Holder] = []
    for modname, container, key, label, value in slots_holding(rebinds.keys()):
        bound = type(value) is types.MethodType and id(value) not in rebinds
        rebind = rebinds[id(_func(value, bound))]
        walked = any(h.container is container and h.key == key for h in found)
        if modname in rebind.excluded or walked or _func(value, bound) is not rebind.old:
            continue
        if bound:  # a new bound method of the hooked function, for the same object
            new = types.MethodType(rebind.new, value.__self__)
            rebind = rebind._replace(old=value, new=new)
        out.append(Holder(modname, container, key, label, rebind))
    return out


def _func(value: Any, bound: bool) -> Any:
    return value.__func__ if bound else value
