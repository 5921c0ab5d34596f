"""What the stale-binding sweep (``_propagate``) hands back, and what every apply asks first.

Every worker that applies hooks uses these: the rebinds it asks for, the holders and stale
references that come back, the kinds a report names, a class's attributes as a container,
and ``other_references`` (whether an original has any reference the sweep could find).  The
sweep itself (``_propagate``: reading every module's globals, containers and classes) runs
only where an original has such a reference, which a worker whose targets were imported after
its hooks were applied never has (issue #23: 50 kB of bytecode a cold worker did not run).
"""

from __future__ import annotations

import functools
import gc
import sys
import types
from operator import attrgetter

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit.hooks._chain import CHAIN_CODES
from spawnkit.hooks._dispatch_base import STANDING, standing

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


class Rebind(NamedTuple):
    """Replace ``old`` by ``new`` in every module except ``excluded`` (the hook modules)."""

    old: Any
    new: Any
    excluded: frozenset[str]
    key: str  # the target this rebind belongs to


class Holder(NamedTuple):
    """A rebindable reference: ``container[key]`` (a module's globals, or a dict/list in them)."""

    module: str
    container: Any  # dict or list
    key: Any
    label: str  # the global's name, or e.g. "TABLE['tok']" / "HANDLERS[2]"
    rebind: Rebind


class ClassAttrs:
    """A class's attributes as a container ``Holder`` and the journal can read and write.

    Reads see through a ``staticmethod``/``classmethod`` (the function it
    wraps is what a rebind compares), through a ``property`` (its getter:
    ``device = property(get_device)``) or a ``functools.cached_property``, and
    through a ``functools.partialmethod`` (``run_fast = partialmethod(run,
    fast=True)``); writes wrap the new value the same way (a property keeps its
    setter and deleter, a cached property its name, a partialmethod its
    arguments).  Writing back the function a wrapper
    first read here held restores that very wrapper object, so undo puts back
    exactly what was in ``__dict__``.
    """

    __slots__ = ("_first", "cls")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self._first: dict[str, Any] = {}  # name -> raw value when first read

    def __repr__(self) -> str:
        return f"ClassAttrs({self.cls.__module__}.{self.cls.__qualname__})"

    def get(self, name: str, default: Any = None) -> Any:
        raw = self.cls.__dict__.get(name, _MISSING)
        if raw is _MISSING:
            return default
        self._first.setdefault(name, raw)
        return _unwrap(raw)

    def __getitem__(self, name: str) -> Any:
        value = self.get(name, _MISSING)
        if value is _MISSING:
            raise KeyError(name)
        return value

    def __setitem__(self, name: str, value: Any) -> None:
        first = self._first.get(name, _MISSING)
        current = self.cls.__dict__.get(name, _MISSING)
        if type(first) in _WRAPPERS and _unwrap(first) is value:
            raw = first
        elif type(current) is property:
            raw = current.getter(value)  # a copy: the same setter, deleter and doc
        elif type(current) is functools.cached_property:
            raw = functools.cached_property(value)
            raw.__set_name__(self.cls, name)
        elif type(current) is functools.partialmethod:  # the same bound arguments
            raw = functools.partialmethod(value, *current.args, **current.keywords)
        elif type(current) in _WRAPPERS:
            raw = type(current)(value)
        else:
            raw = value
        setattr(self.cls, name, raw)

    def __delitem__(self, name: str) -> None:
        delattr(self.cls, name)


class DispatchTable:
    """A ``functools.singledispatch`` function's registry as a container ``Holder`` can write.

    ``@process.register(int)`` ran as a target module was imported, so the registry (a
    read-only view of a dict in the function's closure) holds the original: dispatch calls it
    and the hook never runs.  ``register(cls, new)`` is the one way in, and it clears the
    dispatch cache that already remembers the original for ``int``.

    A ``singledispatchmethod``'s entry may be a ``classmethod``/``staticmethod`` (the class's
    ``handle_int``, hooked by that name): reads see through it as ``ClassAttrs`` does, writes
    wrap the new function the same way, and writing back the first function read restores the
    very object, else every dispatch kept calling the original.
    """

    __slots__ = ("_first", "function")

    def __init__(self, function: Any) -> None:
        self.function = function  # the singledispatch function (a method's ``dispatcher``)
        self._first: dict[Any, Any] = {}  # class -> the wrapper first read there

    def __repr__(self) -> str:
        return f"DispatchTable({getattr(self.function, '__qualname__', self.function)!r})"

    def get(self, cls: type, default: Any = None) -> Any:
        raw = self.function.registry.get(cls, default)
        if type(raw) in _METHOD_WRAPPERS:
            self._first.setdefault(cls, raw)
            return raw.__func__
        return raw

    def __setitem__(self, cls: type, value: Any) -> None:
        first = self._first.get(cls)
        if first is not None and first.__func__ is not value:
            value = type(first)(value)
        elif first is not None:
            value = first
        self.function.register(cls, value)


def dispatcher_of(obj: object) -> Any:
    """The singledispatch function ``obj`` is, or the one a ``singledispatchmethod`` or a hook
    chain installed for one (``_dispatch_base``) stands for; None for anything else.  A chain's
    is read through: hooking the function and one of its implementations in one apply, the
    sweep found the chain at the function's home and never rebound the implementation."""
    if type(obj) is functools.singledispatchmethod:
        obj = obj.dispatcher
    for _ in range(8):  # a chain of a chain: another namespace's hooks around the first's
        if type(obj) is not types.FunctionType or obj.__code__ not in CHAIN_CODES:
            break
        obj = obj.__dict__.get("__wrapped__") if STANDING and standing(obj) else None
    if type(obj) is not types.FunctionType or obj.__code__ is not _DISPATCH_CODE:
        return None
    return obj


def dispatch_registry(obj: object) -> types.MappingProxyType[Any, Any] | None:
    """The registry of a singledispatch function (``dispatcher_of``); None for anything else."""
    function = dispatcher_of(obj)
    found = None if function is None else function.__dict__.get("registry")
    return found if type(found) is types.MappingProxyType else None


class StaleHolder(NamedTuple):
    """A reference the sweep found but may not rebind (a tuple item, a default argument)."""

    module: str
    label: str  # e.g. "PAIRS[0]", "run() default of 'fn'"
    kind: str  # "tuple item", "default argument"
    target: str


#: A holder's kind for a call of an original that ran as its module was imported, before
#: the hooks (``_apply._called_at_import``): nothing to rebind, a value computed from it.
CALLED_AT_IMPORT = "called as its module was imported, before the hooks were applied"

#: A holder's kind for an object's attribute that still holds an original after the sweeps
#: (``_hidden``: a web route's endpoint, a thread's target), found by reference.
HIDDEN = "an object's attribute, which no sweep reads"

#: A holder's kind for a weak reference to an original (a signal's receivers, a
#: ``weakref.WeakMethod`` observer, a ``weakref.WeakSet`` of listeners), found by reference
#: (``_hidden``): it points at the original itself, so no rebinding reaches it, and the
#: count of strong references never sees it.
WEAK = "a callback registry's weak reference, which cannot be rebound"

#: A holder's kind for a local of code another thread is running (a pool's task handed the
#: original as its module ran: ``_POOL.submit(_poll, collect)``), found by reference
#: (``_hidden``): the frame does not end, and no sweep reads it.
RUNNING = "a local of code another thread is running, which no sweep reads"

#: A holder's kind for a call of an original that another thread began before the hooks
#: were applied (``_hidden``): a serve loop a module started as it ran (``ThreadPoolExecutor(1)
#: .submit(serve)``) still running, or a thread pool's initializer that ran in its thread.
#: Nothing refers to it that could be rebound: the call was made, and never runs the hook.
BEGUN = (
    "a call of the original in another thread that began before the hooks were applied: the "
    "hook never runs for it"
)

#: A holder's kind for a local of the applying thread's running code bound to another
#: namespace's hooked object (``_apply._unexplained_layers``): ``bootstrap_here(A)``, then
#: ``fn = mod.func`` (or ``e = Engine()`` keeping it) in the function that then calls
#: ``bootstrap_here(B)``, whose chain wraps A's; no search reads that thread's frames.
LAYERED = (
    "a local of the running code that applied these hooks, which no sweep reads, bound "
    "after the other namespace's hooks were applied"
)

#: The kinds ``_hidden`` finds by reference: not a module's global, nor one level below
BY_REFERENCE = frozenset({HIDDEN, WEAK, RUNNING, BEGUN, LAYERED})

#: A holder's kind for an ``lru_cache`` whose results came from an original before the hooks
#: (``_caches``): nothing to rebind, values computed from it.
FILLED = "an lru_cache whose results were computed before the hooks were applied"

_MISSING: Any = object()
#: The type of every ``functools.lru_cache`` (and ``functools.cache``) wrapper
LRU_CACHE = type(functools.lru_cache(None)(len))
#: class attributes that hold a function the class calls: read through them to it
_WRAPPED_AS: dict[type, str] = {
    staticmethod: "__func__",
    classmethod: "__func__",
    property: "fget",
    functools.cached_property: "func",
    functools.partialmethod: "func",  # ``run_fast = partialmethod(run, fast=True)``
}
_WRAPPERS = frozenset(_WRAPPED_AS)
#: what a ``singledispatchmethod``'s registry may hold around an implementation
_METHOD_WRAPPERS = (classmethod, staticmethod)
_DISPATCH_CODE = attrgetter("__code__")(functools.singledispatch(len))


def _read(res: Any) -> int:
    """The reference count of ``res.raw`` as read here: the one place both uses read it."""
    return sys.getrefcount(res.raw)


def _reading_adds() -> int | None:
    """How many references reading a count through :func:`_read` adds, or None where counts
    cannot vouch for anything (not CPython, a free-threaded build, or a calibration that does
    not see one added holder as one)."""
    if sys.implementation.name != "cpython" or "free-threading" in sys.version:
        return None
    probe = types.SimpleNamespace(raw=lambda: None)
    home = [probe.raw]  # noqa: F841  (the probe's "home": its one holder besides ``probe``)
    adds = _read(probe) - 2
    extra = [probe.raw]  # noqa: F841
    return adds if _read(probe) - 2 - adds == 1 else None


_READING_ADDS = _reading_adds()


def _read_inner(raw: Any) -> int:
    """The reference count of the function a ``staticmethod``/``classmethod`` ``raw`` wraps."""
    return sys.getrefcount(raw.__func__)


def _inside(raw: Any) -> int:
    """How many references ``raw`` (a ``staticmethod``/``classmethod``) itself holds to the
    function it wraps (its callable, and any copy in its own ``__dict__``)."""
    func = raw.__func__
    own = getattr(raw, "__dict__", None)
    inside = sum(c is func for c in gc.get_referents(raw))
    return inside + (sum(v is func for v in own.values()) if type(own) is dict else 0)


def _inner_adds() -> int | None:
    """:func:`_reading_adds` for :func:`_read_inner`."""
    if _READING_ADDS is None:
        return None
    probe = staticmethod(lambda: None)
    adds = _read_inner(probe) - _inside(probe)
    extra = [probe.__func__]  # noqa: F841
    return adds if _read_inner(probe) - _inside(probe) - adds == 1 else None


_INNER_ADDS = _inner_adds()


def other_references(res: Any) -> int | None:
    """How many references the plain function ``res.raw`` (or the one a ``staticmethod`` or
    ``classmethod`` ``res.raw`` wraps) has besides its home attribute and ``res``: 0 means
    no module, container, class, closure or wrapper holds it, and the sweep has nothing to
    find for it (most hooked methods and functions have no copy anywhere).  None where
    counts cannot vouch (see :func:`_reading_adds`), or for anything else, or a function
    its owner does not hold itself.

    Call it on a fresh resolution, before anything else takes a reference.  Every holder the
    sweep finds is a strong reference, so a count of zero cannot hide one; what the sweep
    cannot explain afterwards is looked for by ``_hidden``.
    """
    if _READING_ADDS is None or not res.had_own:
        return None
    kind = type(res.raw)
    if kind is types.FunctionType:
        return _read(res) - _READING_ADDS - 2
    if kind not in (staticmethod, classmethod) or type(res.raw.__func__) is not types.FunctionType:
        return None
    if _INNER_ADDS is None:
        return None
    copies = _read(res) - _READING_ADDS - 2  # of the wrapper itself: `go = build` in its class
    return copies + _read_inner(res.raw) - _INNER_ADDS - _inside(res.raw)


def _unwrap(raw: Any) -> Any:
    """The function a class attribute holds for the class to call (``_WRAPPED_AS``), or it."""
    attr = _WRAPPED_AS.get(type(raw))
    return raw if attr is None else getattr(raw, attr)
