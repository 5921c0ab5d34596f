"""A hook on a ``functools.singledispatch`` function that runs on every path a call can take.

The chain installed for ``process`` (a singledispatch function) wraps its call: ``process(x)``
runs the hooks.  But the chain copies the original's ``__dict__`` (as ``functools.wraps``
does), so ``process.dispatch(int)`` and ``process.registry[int]`` were the original's and
handed back the implementation itself: code that looks an implementation up and calls it
(torch's and serialization libraries' ``f.dispatch(type(obj))(obj)``, an implementation
calling the generic one through ``process.dispatch(object)(x)``) ran it unhooked while
``status()`` said applied.

So the chain gets its own ``dispatch`` and ``registry``: what they return is the same hooks
around the implementation they look up (built by the caller's ``rebuild``, the innermost
layer calling that implementation), made at the first look-up of each implementation and
kept.  A call through one runs exactly what ``process(x)`` runs for an ``x`` of that class,
and one for ``object`` calls the generic implementation, not the dispatch again (which, for
an implementation calling its generic one, would call itself).  ``register`` stays the
original's: a later registration is found by both.  ``unapply()`` puts the original function
back, whose ``dispatch`` and ``registry`` were never changed.

A ``functools.singledispatchmethod`` is refused instead (``method_refusal``): every call of
``obj.handle(x)`` asks the descriptor's dispatcher for the implementation and binds that, so
a wrapper of the descriptor, of the dispatcher's call or of its ``register`` runs on no path;
each implementation hooked by its own name runs on all of them (the sweep rebinds the
registry entry, ``_propagate``), which is what the refusal names.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from collections.abc import Callable, Iterator, Mapping

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["STANDING", "attach", "is_dispatching", "method_refusal", "standing"]

#: the code every ``functools.singledispatch`` function shares (its ``wrapper``)
_DISPATCH_CODE = getattr(functools.singledispatch(len), "__code__", None)

#: id of each chain installed for a singledispatch function -> a weak reference to it: the
#: sweep reads the function's registry through it (``_propagate``), testing ids in C over a
#: module's functions only while this is not empty (a dead chain's entry is dropped as the
#: next is made, and a reused id fails the reference's identity check)
STANDING: dict[int, weakref.ReferenceType[Any]] = {}


def standing(obj: Any) -> bool:
    """Whether ``obj`` is a live chain of :data:`STANDING`."""
    ref = STANDING.get(id(obj))
    return ref is not None and ref() is obj


def is_dispatching(original: Any) -> bool:
    """Whether ``original`` is a ``functools.singledispatch`` function (not one of its
    implementations): a plain function of the shared code with its ``dispatch``; or the
    chain of one (another namespace's hooks wrapping it: its implementations come out of its
    own ``dispatch`` inside its hooks, and the new ones go around them)."""
    if type(original) is not types.FunctionType:
        return False
    return (original.__code__ is _DISPATCH_CODE and "dispatch" in original.__dict__) or standing(
        original
    )


class _Hooked:
    """The hooked implementation for each implementation the original's dispatch finds."""

    __slots__ = ("built", "original", "rebuild")

    def __init__(self, original: Any, rebuild: Callable[[Any], Any]) -> None:
        self.original = original
        self.rebuild = rebuild
        self.built: dict[Any, Any] = {}  # implementation -> the hooks around it

    def around(self, impl: Any) -> Any:
        found = self.built.get(impl)
        if found is None:
            found = self.built[impl] = self.rebuild(impl)
        return found

    def dispatch(self, cls: Any) -> Any:
        return self.around(self.original.dispatch(cls))


class HookedRegistry(Mapping[object, object]):
    """``process.registry`` of a hooked singledispatch function: the original's classes, each
    with the hooks around its implementation.  Read-only, as the original's is."""

    __slots__ = ("_hooked",)

    def __init__(self, hooked: _Hooked) -> None:
        self._hooked = hooked

    def __getitem__(self, cls: Any) -> Any:
        return self._hooked.around(self._hooked.original.registry[cls])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._hooked.original.registry)

    def __len__(self) -> int:
        return len(self._hooked.original.registry)

    def __repr__(self) -> str:
        name = getattr(self._hooked.original, "__qualname__", "?")
        return f"<hooked registry of {name}: {list(self)!r}>"


def attach(chain: Any, original: Any, rebuild: Callable[[Any], Any]) -> None:
    """Give ``chain`` (installed for the singledispatch function ``original``) a ``dispatch``
    and a ``registry`` whose implementations run its hooks; ``rebuild(impl)`` makes the
    chain of the same hooks whose innermost layer calls ``impl``."""
    hooked = _Hooked(original, rebuild)

    def dispatch(cls: Any) -> Any:
        return hooked.dispatch(cls)

    dispatch.__doc__ = getattr(original.dispatch, "__doc__", None)
    chain.dispatch = dispatch
    chain.registry = HookedRegistry(hooked)
    for key in [key for key, ref in STANDING.items() if ref() is None]:
        del STANDING[key]
    STANDING[id(chain)] = weakref.ref(chain)


def _name_of(impl: Any, owner: type) -> str | None:
    """A target name that resolves to ``impl``: a class attribute along ``owner``'s MRO
    (``Handler.handle_int``), else a global of its module; None for one registered as ``_``."""
    func = getattr(impl, "__func__", impl)  # a classmethod's or staticmethod's function
    for cls in getattr(owner, "__mro__", ()):
        for attr, value in vars(cls).items():
            if value is impl or getattr(value, "__func__", None) is func:
                return f"{cls.__module__}.{cls.__qualname__}.{attr}"
    module = sys.modules.get(str(getattr(func, "__module__", "")))
    name = getattr(func, "__name__", "")
    if module is not None and name and getattr(module, name, None) is func:
        return f"{module.__name__}.{name}"
    return None


def method_refusal(method: Any, owner: type, attr: str, display: str, where: str) -> str:
    """Why the ``functools.singledispatchmethod`` ``method`` (``owner.attr``) is not hooked,
    and the targets that are hooked in its place."""
    registry = getattr(method.dispatcher, "registry", {})
    names = [_name_of(impl, owner) for cls, impl in registry.items() if cls is not object]
    named = ", ".join(repr(n) for n in names if n is not None) or "none has a name of its own"
    unnamed = names.count(None)
    also = (
        f"; {unnamed} registered without a name of its own (def _): give it one to hook it"
        if unnamed and len(names) > unnamed
        else ""
    )
    return (
        f"hook target {display!r} is a functools.singledispatchmethod{where}: a call "
        f"(obj.{attr}(x), through a subclass, or {attr}.dispatcher.dispatch(cls)) binds the "
        "implementation registered for the argument's class, and a hook on the descriptor "
        "would run on none of these paths. Hook the registered implementations instead, each "
        f"by its own target name ({named}{also}): every path then runs their hooks and "
        "unapply() puts them back. The generic implementation (for object) has no target "
        f"name: move its body into a method it calls and hook that, or REPLACE the class "
        f"{getattr(owner, '__qualname__', owner)!s} with a subclass."
    )
