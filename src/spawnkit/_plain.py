"""``Plain``: the ``repr`` and ``==`` a ``@dataclass`` generates, for record classes.

``@dataclass`` writes and ``exec``\\ s the source of every method per class when its module is
imported: 0.6 to 1.3 ms a class on the benchmark machine, paid by every cold worker for each
class on its path (issue #23).  Internal records a worker defines write their ``__init__`` by
hand and take ``__repr__``/``__eq__`` from here, where they are compiled once; the public
types are built on them by ``spawnkit.spec._record.record``, which writes the ``__init__``.

A subclass names its fields, in ``__init__`` order, in ``_fields``; ``_hidden`` are left out
of the repr and ``_uncompared`` out of ``==`` (``field(repr=False)``, ``field(compare=False)``).
Like an ``eq=True`` dataclass, a ``Plain`` is unhashable; a :class:`FrozenPlain` hashes its
compared fields and refuses assignment, with the error a frozen dataclass raises.
"""

from __future__ import annotations

from reprlib import recursive_repr

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = ["FrozenPlain", "Plain"]


class Plain:
    """Base of a hand-written record: ``repr`` and ``==`` over ``_fields``, as a dataclass's."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _hidden: ClassVar[frozenset[str]] = frozenset()
    _uncompared: ClassVar[frozenset[str]] = frozenset()

    @recursive_repr()
    def __repr__(self) -> str:
        hidden = self._hidden
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields if n not in hidden)
        return f"{type(self).__qualname__}({shown})"

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._fields if n not in self._uncompared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Plain)
        return self._compared() == other._compared()

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value: unhashable


class FrozenPlain(Plain):
    """A ``frozen=True`` record: ``__init__`` sets fields with ``object.__setattr__``."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise _frozen(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen(f"cannot delete field {name!r}")

    def __hash__(self) -> int:  # type: ignore[override]  # frozen: hashable again
        return hash(self._compared())


def _frozen(message: str) -> Exception:
    # on a misuse path only: a worker that never assigns to a frozen record never loads it
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)
