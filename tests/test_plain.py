"""``spawnkit._plain``: the internal records behave as the dataclasses they replaced."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from spawnkit._plain import FrozenPlain, Plain
from spawnkit.hooks._journal import AttrChange, BindingChange
from spawnkit.spec._record import as_dict, default, field, record, replace


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


# ------------------------------------------------------------------ @record
@record(frozen=True, slots=True)
class _Spec:
    name: str
    count: int = 1
    tags: list[str] = field(default_factory=list)
    conn: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("count must be >= 0")


@dataclasses.dataclass(frozen=True, slots=True)
class _SpecDC:
    name: str
    count: int = 1
    tags: list[str] = dataclasses.field(default_factory=list)
    conn: Any = dataclasses.field(default=None, repr=False, compare=False)


@record
class _Report:
    rank: int
    stages: dict[str, float] = field(default_factory=dict)
    host: str = ""


def test_a_record_is_its_dataclass_to_every_caller() -> None:
    spec, twin = _Spec("a", 2, ["x"], conn=object()), _SpecDC("a", 2, ["x"])
    _same_repr(spec, twin)
    assert str(inspect.signature(_Spec)) == str(inspect.signature(_SpecDC))
    assert _Spec.__match_args__ == _SpecDC.__match_args__
    assert spec == _Spec("a", 2, ["x"]) and hash(_Spec("a", 2, ("x",))) == hash(("a", 2, ("x",)))
    assert _Spec("a").tags is not _Spec("a").tags  # a factory per instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "b"  # type: ignore[misc]
    with pytest.raises(ValueError, match="count must be"):
        _Spec("a", -1)
    with pytest.raises(AttributeError):
        spec.__dict__  # noqa: B018  # slots, as asked
    # the dataclasses functions, through the twin built on first use
    assert dataclasses.is_dataclass(_Spec) and dataclasses.is_dataclass(spec)
    assert [(f.name, f.repr, f.compare) for f in dataclasses.fields(spec)] == [
        (f.name, f.repr, f.compare) for f in dataclasses.fields(twin)
    ]
    assert dataclasses.asdict(replace(spec, conn=None)) == dataclasses.asdict(twin)
    assert dataclasses.replace(spec, count=3) == _Spec("a", 3, ["x"])
    assert replace(spec, count=5).count == 5 and replace(spec, count=5).name == "a"
    with pytest.raises(ValueError, match="count must be"):
        replace(spec, count=-2)  # __post_init__ runs again, as dataclasses.replace does
    report = _Report(1, {"x": 1.0})
    assert (
        as_dict(report)
        == dataclasses.asdict(report)
        == {
            "rank": 1,
            "stages": {"x": 1.0},
            "host": "",
        }
    )
    report.host = "h"  # not frozen: assignable, and unhashable as an eq dataclass
    with pytest.raises(TypeError):
        hash(report)
    assert default(_Report, "stages") == {} and default(_Report, "host") == ""


def test_a_frozen_slotted_record_pickles_and_copies_without_its_refused_setattr() -> None:
    spec = _Spec("a", 2, ["x"])
    for again in (pickle.loads(pickle.dumps(spec)), copy.copy(spec), copy.deepcopy(spec)):
        assert again == spec and type(again) is _Spec
    import spawnkit

    ns = spawnkit.NamespaceConfig.build("t_record", "T_RECORD")
    real = spawnkit.ProcessSpec(entry="m:f", namespace=ns, env={"A": "1"}, rank=3, world_size=8)
    assert pickle.loads(pickle.dumps(real)) == real
    assert real.replace(rank=4).rank == 4 and dataclasses.replace(real, rank=5).rank == 5


def test_a_record_refuses_what_a_dataclass_refuses() -> None:
    with pytest.raises(TypeError, match="'b' has no default but follows one"):

        @record
        class _Bad:
            a: int = 0
            b: int

    class _Base:
        pass

    with pytest.raises(TypeError, match="a record has no base class"):
        record(type("_Sub", (_Base,), {"__annotations__": {"a": "int"}}))


def test_records_of_one_shape_share_one_compiled_init_each_under_its_own_names() -> None:
    # A cold worker defines 14 records: each used to compile its __init__ (issue #23).
    @record(frozen=True)
    class Left:
        a: int
        b: list[int] = field(default_factory=list)

    @record(frozen=True)
    class Right:
        x: int
        y: list[int] = field(default_factory=list)

    @record
    class Open:
        x: int
        y: list[int] = field(default_factory=list)

    left, right = Left.__init__.__code__, Right.__init__.__code__
    assert left.co_code == right.co_code
    assert left.co_varnames == ("self", "a", "b") and right.co_varnames == ("self", "x", "y")
    r, o = Right(1), Open(x=1)
    assert (r.x, r.y, o.x, o.y) == (1, [], 1, []) and Right(1).y is not r.y  # a fresh default
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        r.x = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'x'"):
        Right()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'a'"):
        Right(a=1)  # type: ignore[call-arg]
    assert str(inspect.signature(Open)) == "(x: 'int', y: 'list[int]' = <factory>) -> None"


def test_a_frozen_record_fills_its_dict_in_one_call_and_a_slotted_one_field_by_field() -> None:
    # object.__setattr__ once a field cost ~0.2 us a record: a worker's plugin stage builds a
    # Registration a hook, its report as many records again (issue #23): a frozen record
    # without slots sets __dict__ whole.
    import dis

    @record(frozen=True)
    class Wide:
        a: int
        b: int
        c: list[int] = field(default_factory=list)
        d: int = 4

        def __post_init__(self) -> None:
            object.__setattr__(self, "e", self.a + self.d)

    @record(frozen=True, slots=True)
    class Slotted:
        a: int
        b: int = 2

    def calls(cls: type) -> int:
        ops = [i.opname for i in dis.get_instructions(cls.__init__)]  # type: ignore[misc]
        return sum(op.startswith("CALL") and op != "CALL_INTRINSIC_1" for op in ops)

    assert calls(Wide) == 3  # _set(self, "__dict__", {...}), the factory, __post_init__
    assert calls(Slotted) == 2  # no __dict__: _set a field
    wide = Wide(1, 2)
    assert vars(wide) == {"a": 1, "b": 2, "c": [], "d": 4, "e": 5} and wide.c is not Wide(1, 2).c
    assert Wide(1, 2, [3]) == Wide(1, 2, [3]) and hash(Wide(1, 2, None)) == hash(Wide(1, 2, None))
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'a'"):
        wide.a = 2  # type: ignore[misc]
    assert (Slotted(1).a, Slotted(1).b) == (1, 2) and not hasattr(Slotted(1), "__dict__")
