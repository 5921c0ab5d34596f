"""``spawnkit._plain``: the internal records behave as the dataclasses they replaced."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from spawnkit._plain import FrozenPlain, Plain
from spawnkit.hooks._journal import AttrChange, BindingChange


class _Mutable(Plain):
    _fields = ("a", "b", "c")
    _hidden = frozenset({"b"})
    _uncompared = frozenset({"c"})

    def __init__(self, a: Any, b: Any, c: Any = None) -> None:
        self.a, self.b, self.c = a, b, c


class _Frozen(FrozenPlain):
    _fields = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)


@dataclasses.dataclass
class _MutableDC:
    a: Any
    b: Any = dataclasses.field(repr=False)
    c: Any = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class _FrozenDC:
    a: Any
    b: Any


def _same_repr(plain: object, dc: object) -> None:
    assert repr(plain).replace(type(plain).__qualname__, "X") == repr(dc).replace(
        type(dc).__qualname__, "X"
    )


def test_a_plain_record_reprs_and_compares_as_its_dataclass() -> None:
    _same_repr(_Mutable(1, "hidden", 3), _MutableDC(1, "hidden", 3))
    assert _Mutable(1, 2, 3) == _Mutable(1, 2, 4)  # c is not compared
    assert _Mutable(1, 2) != _Mutable(1, 5)
    assert _Mutable(1, 2).__eq__(_MutableDC(1, 2)) is NotImplemented
    with pytest.raises(TypeError):
        hash(_Mutable(1, 2))  # eq without frozen: unhashable, as a dataclass
    loop = _Mutable(1, 2)
    loop.a = loop
    assert repr(loop) == "_Mutable(a=..., c=None)"  # a dataclass prints a loop so too


def test_a_frozen_plain_record_hashes_and_refuses_assignment_as_its_dataclass() -> None:
    _same_repr(_Frozen(1, "x"), _FrozenDC(1, "x"))
    assert hash(_Frozen(1, "x")) == hash(_FrozenDC(1, "x")) == hash((1, "x"))
    assert {_Frozen(1, "x"), _Frozen(1, "x")} == {_Frozen(1, "x")}
    record = _Frozen(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'a'"):
        record.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'a'"):
        del record.a
    assert record.a == 1


def test_the_journal_keeps_a_modules_globals_out_of_a_changes_repr() -> None:
    change = BindingChange("m", {"many": "names"}, "name", 1, 2)
    assert repr(change) == "BindingChange(module='m', name='name', before=1, after=2)"
    assert (
        repr(AttrChange("o", "attr", 1, 2))
        == "AttrChange(owner='o', attr='attr', before=1, after=2)"
    )
