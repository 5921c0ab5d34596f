"""Which object of a payload failed to unpickle, and where it sits: asked only after a failure.

``pickle.loads`` says what went wrong (``No module named 'x'``, the message a ``__setstate__``
raised) but not for which class nor where in the payload, and a payload of nested configs
leaves the user guessing.  The success path pays nothing: this module is imported only once
``Payload.materialize`` has failed.  It unpickles the bytes again with the pure-Python
unpickler, tolerating what failed (a stand-in for a class it cannot import, a marker for an
object whose ``__reduce__`` call or ``__setstate__`` raised), then finds the first culprit in
what it built by the same bounded walk that names a payload's refused objects.  The objects'
own unpickling code runs a second time: the worker fails either way.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Callable
from typing import Any

from spawnkit._namedtuple import NamedTuple

__all__ = ["Culprit", "find"]


class Culprit(NamedTuple):
    """``name``: ``module.qualname`` of the class or function; ``how``: ``import``,
    ``setstate`` or ``rebuild``; ``where``: its path in the payload, ``""`` when not traced."""

    name: str
    how: str
    error: BaseException
    where: str


class _StandIn:
    """A class the worker cannot import: takes any arguments and state, so unpickling goes on."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def add(self, item: Any) -> None:
        pass


class _Failed:
    """What an object whose rebuilding raised is replaced with."""


def _named(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    return f"{module}.{getattr(obj, '__qualname__', None) or type(obj).__qualname__}"


#: The pure-Python unpickler, whose opcodes are methods a subclass can replace (typeshed
#: declares little of it).
_Base: Any = pickle._Unpickler

#: What ``copyreg`` rebuilds an object with: the class named is their first argument.
_REBUILDERS = (vars(copyreg)["__newobj__"], vars(copyreg)["_reconstructor"])


class _Tolerant(_Base):  # type: ignore[misc]
    """The pure-Python unpickler, noting each failure and going on past it."""

    dispatch = dict(_Base.dispatch)

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.failures: list[tuple[str, str, BaseException, Any]] = []

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception as exc:
            stand_in = type(name.rpartition(".")[2], (_StandIn,), {"__module__": module})
            stand_in.__qualname__ = name
            self.failures.append((f"{module}.{name}", "import", exc, stand_in))
            return stand_in

    def _rebuilt(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            made = args[0] if any(func is r for r in _REBUILDERS) else func
            marker = _Failed()
            self.failures.append((_named(made), "rebuild", exc, marker))
            return marker

    def load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._rebuilt(self.stack[-1], tuple(args), {})

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(self._rebuilt(cls.__new__, (cls, *args), {}))

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(self._rebuilt(cls.__new__, (cls, *args), kwargs))

    def load_build(self) -> None:
        inst = self.stack[-2]
        try:
            _Base.load_build(self)
        except Exception as exc:  # the state is popped, the object stays on the stack
            self.failures.append((_named(type(inst)), "setstate", exc, inst))


_Tolerant.dispatch[pickle.REDUCE[0]] = _Tolerant.load_reduce
_Tolerant.dispatch[pickle.NEWOBJ[0]] = _Tolerant.load_newobj
_Tolerant.dispatch[pickle.NEWOBJ_EX[0]] = _Tolerant.load_newobj_ex
_Tolerant.dispatch[pickle.BUILD[0]] = _Tolerant.load_build


def find(data: bytes, path_to: Callable[..., str]) -> Culprit | None:
    """The first object unpickling ``data`` fails on (the one ``pickle.loads`` stopped at), with
    its path in the payload by ``path_to`` (the walk that names a refused capture's object);
    None when the failure is not one of an object (bad bytes)."""
    unpickler = _Tolerant(data)
    try:
        root: Any = unpickler.load()
    except Exception:  # a failure it cannot step past: the class is still named, not where
        root = _Failed()
    if not unpickler.failures:
        return None
    name, how, error, found = unpickler.failures[0]
    if how == "import":
        where = path_to(root, found, match=lambda obj: type(obj) is found)
    else:
        where = path_to(root, found)
    return Culprit(name, how, error, where)
