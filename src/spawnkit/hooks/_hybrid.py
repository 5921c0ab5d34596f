"""A method that works on the class (acting on the default registry) and on an instance."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast
else:
    from spawnkit._compat import Generic, ParamSpec, TypeVar, cast

__all__: list[str] = []

P = ParamSpec("P")
R = TypeVar("R")


class hybridmethod(Generic[P, R]):
    """Bind to the instance, or to ``owner.default()`` when accessed on the class."""

    def __init__(self, func: Callable[Concatenate[Any, P], R]) -> None:
        self.__func__ = func
        functools.update_wrapper(cast("Any", self), func)

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]:
        if obj is None:
            if owner is None:  # pragma: no cover - Python always passes owner for class access
                raise TypeError("hybridmethod needs an instance or an owner class")
            obj = owner.default()  # type: ignore[attr-defined]
        # no typing.cast here: a call per registration, and register() runs once per hook
        return types.MethodType(self.__func__, obj)
