"""What differs between the Python versions spawnkit supports (3.10 and up), in one place.

Also ``typing`` without importing it: a cold worker never did, except through spawnkit, and
``typing`` is 1.5 ms of its start (issue #23).  Modules write ``from spawnkit._compat import
TYPE_CHECKING`` (type checkers go by the name, whatever module gives it), import their
annotation-only names from ``typing`` under ``if TYPE_CHECKING:``, and take the few names a
class statement or a call needs at run time from here, in its ``else:``.  What a checker reads
is ``typing``'s; what runs is the stand-in, which is all those names do at run time.
"""

from __future__ import annotations

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "TYPE_CHECKING", "Generic", "ParamSpec", "Protocol", "TypeVar", "add_note", "cast", "overload",
]  # fmt: skip


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on 3.10 (same ``__notes__``; its traceback omits them)."""
    method = getattr(exc, "add_note", None)
    if method is not None:
        method(note)
        return
    notes = getattr(exc, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        exc.__notes__ = notes  # type: ignore[attr-defined,unused-ignore]
    notes.append(note)


class Generic:
    """``class C(Generic[T])`` at run time: a plain base that ``C[int]`` still subscripts (to
    ``C`` itself), as annotations evaluated by a user's ``get_type_hints`` may."""

    __slots__ = ()

    def __class_getitem__(cls, _params: object) -> Any:
        return cls


class Protocol:
    """A protocol class at run time: only ever read by type checkers, never instantiated or
    checked with ``isinstance`` (no spawnkit protocol is ``runtime_checkable``)."""

    __slots__ = ()


def TypeVar(name: str, *_constraints: object, **_options: object) -> Any:
    """A type variable at run time is only ever subscripted into ``Generic[...]``."""
    return name


ParamSpec = TypeVar


def cast(_type: object, value: Any) -> Any:
    return value


def overload(func: Any) -> Any:
    """The stubs are replaced by the implementation under the same name, as with ``typing``'s."""
    return func
