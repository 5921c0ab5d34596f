"""``spawnkit._namedtuple``: spawnkit's tuples behave as the ``typing.NamedTuple`` they replaced."""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import pkgutil
import sys
import typing
from typing import Any

import pytest

import spawnkit
from spawnkit import _namedtuple
from spawnkit._namedtuple import NamedTuple
from spawnkit.errors import MissingExtraError


class Ours(NamedTuple):
    """A site."""

    module: str
    line: int | None = None
    tags: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"

    def bump(self) -> Ours:
        return self._replace(line=(self.line or 0) + 1)


class Theirs(typing.NamedTuple):
    """A site."""

    module: str
    line: int | None = None
    tags: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"

    def bump(self) -> Theirs:
        return self._replace(line=(self.line or 0) + 1)


class Single(NamedTuple):
    only: str


class Empty(NamedTuple):
    pass


def _same(ours: Any, theirs: Any) -> None:
    assert repr(ours).replace("Ours", "X") == repr(theirs).replace("Theirs", "X")
    assert ours == theirs and hash(ours) == hash(theirs) and tuple(ours) == tuple(theirs)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("m",), {}), (("m", 3), {}), (("m",), {"tags": ("a",)}), ((), {"module": "m", "line": 1})],
)
def test_construction_repr_equality_and_hash_match_typing(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    _same(Ours(*args, **kwargs), Theirs(*args, **kwargs))


def test_the_class_surface_matches_typing() -> None:
    assert Ours._fields == Theirs._fields == ("module", "line", "tags")
    assert Ours._field_defaults == Theirs._field_defaults == {"line": None, "tags": ()}
    assert Ours.__match_args__ == Theirs.__match_args__
    assert Ours.__doc__ == Theirs.__doc__ == "A site."
    assert Ours.line.__doc__ == Theirs.line.__doc__ == "Alias for field number 1"
    assert Ours.__new__.__doc__.replace("Ours", "X") == Theirs.__new__.__doc__.replace(
        "Theirs", "X"
    )
    assert Ours.__mro__ == (Ours, tuple, object)
    assert Ours.__qualname__ == "Ours" and Ours.__module__ == __name__
    assert list(inspect.signature(Ours).parameters) == ["module", "line", "tags"]
    assert str(inspect.signature(Ours)) == "(module: 'str', line: 'int | None' = None, tags: " + (
        "'tuple[str, ...]' = ())"
    )
    assert typing.get_type_hints(Ours) == typing.get_type_hints(Theirs)
    # no docstring: the generated one, as namedtuple writes it
    assert Single.__doc__ == "Single(only)" and Empty() == () and Empty._fields == ()


def test_methods_properties_and_helpers_match_typing() -> None:
    o, t = Ours("m", 1), Theirs("m", 1)
    assert o.where == t.where == "m:1"
    _same(o.bump(), t.bump())
    _same(o._replace(tags=("x",)), t._replace(tags=("x",)))
    _same(Ours._make(["a", 2, ()]), Theirs._make(["a", 2, ()]))
    assert o._asdict() == t._asdict() == {"module": "m", "line": 1, "tags": ()}
    assert Single("s").only == "s" and Single(only="s") == ("s",)
    if sys.version_info >= (3, 13):
        _same(copy.replace(o, line=9), copy.replace(t, line=9))  # type: ignore[attr-defined]


def test_instances_pickle_as_themselves() -> None:
    o = Ours("m", 1, ("a",))
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(o, protocol))
        assert type(back) is Ours and back == o
    assert copy.copy(o) == o and copy.deepcopy(o) == o


def _error(call: Any) -> str:
    with pytest.raises((TypeError, ValueError, AttributeError)) as info:
        call()
    return f"{type(info.value).__name__}: {info.value}".replace("Ours", "X").replace("Theirs", "X")


@pytest.mark.parametrize(
    "call",
    [
        lambda cls: cls(),
        lambda cls: cls("m", 1, (), 4),
        lambda cls: cls("m", nope=1),
        lambda cls: cls("m", module="n"),
        lambda cls: cls("m")._replace(nope=1),
        lambda cls: cls._make(["m"]),
        lambda cls: cls("m").__setattr__("line", 2),
    ],
    ids=["missing", "too-many", "unknown-keyword", "twice", "replace-unknown", "make-short", "set"],
)
def test_misuse_raises_what_typing_raises(call: Any) -> None:
    assert _error(lambda: call(Ours)) == _error(lambda: call(Theirs))


def test_a_malformed_class_is_refused_as_typing_refuses_it() -> None:
    def non_default_after_default() -> None:
        class Bad(NamedTuple):
            a: int = 1
            b: int

    def overwrites_a_tuple_method() -> None:
        class Bad(NamedTuple):
            a: int

            def _asdict(self) -> dict[str, Any]:
                return {}

    def private_field() -> None:
        class Bad(NamedTuple):
            _a: int

    assert "cannot follow default field" in _error(non_default_after_default)
    assert "Cannot overwrite NamedTuple attribute _asdict" in _error(overwrites_a_tuple_method)
    assert "cannot start with an underscore" in _error(private_field)
    with pytest.raises(TypeError, match="class syntax only"):
        NamedTuple("P", [("x", int)])


def test_one_new_per_arity_is_compiled_and_each_class_gets_its_own_names() -> None:
    class Two(NamedTuple):
        left: int
        right: int

    class AlsoTwo(NamedTuple):
        up: str
        down: str

    assert Two.__new__.__code__.co_code == AlsoTwo.__new__.__code__.co_code
    assert Two.__new__.__code__.co_varnames == ("_cls", "left", "right")
    assert AlsoTwo.__new__.__code__.co_varnames == ("_cls", "up", "down")
    assert AlsoTwo(down="d", up="u") == ("u", "d")


def _spawnkit_modules() -> list[str]:
    names = ["spawnkit"]
    for info in pkgutil.walk_packages(spawnkit.__path__, "spawnkit."):
        names.append(info.name)
    return names


def test_every_spawnkit_tuple_class_is_built_by_spawnkit_not_typing() -> None:
    # A typing.NamedTuple costs a cold worker 150-200 us a class (issue #23): this fails when one
    # comes back, in any module and through any import form.
    typing_made, ours, skipped = [], 0, []
    for name in _spawnkit_modules():
        try:
            module = importlib.import_module(name)
        except MissingExtraError as exc:  # spawnkit's refusal to load without an extra (torch)
            assert exc.extra, exc
            skipped.append(name)
            continue
        except ImportError as exc:  # an optional package absent here: only a foreign one may miss
            assert exc.name and not exc.name.startswith("spawnkit"), exc
            skipped.append(name)
            continue
        for value in list(vars(module).values()):
            if not (isinstance(value, type) and issubclass(value, tuple)):
                continue
            if value.__module__ != name or not hasattr(value, "_fields"):
                continue
            if value._replace is _namedtuple._replace:  # type: ignore[attr-defined]
                ours += 1
            else:
                typing_made.append(f"{name}.{value.__qualname__}")
    assert typing_made == []
    assert ours >= 26, (ours, skipped)  # the worker path alone has 26
