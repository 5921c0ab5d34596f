"""A class a class decorator copied: ``@dataclass(slots=True)`` makes a new class with the
same functions and the first one stays referred to (a frozen one's ``__setattr__``
closure, 3.10's ``__weakref__`` descriptor, a registry decorator below it).  Its method is
set to the hooked object, not named as a holder no sweep reads."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

_FROZEN = """
import dataclasses

@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: int = 1

    def total(self):
        return ("orig", self.x)
"""

_REGISTERED = """
import dataclasses

OPS = {}

def register(cls):
    OPS[cls.__name__] = cls  # the class before the copy: what the registry makes
    return cls

@dataclasses.dataclass(slots=True)
@register
class Op:
    x: int = 1

    def total(self):
        return ("orig", self.x)

    @staticmethod
    def make():
        return "orig"
"""


def _hooked(*args: Any, **kwargs: Any) -> str:
    return "hooked"


_NESTED = """
import dataclasses

class Outer:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Point:
        x: int = 1

        def total(self):
            return ("orig", self.x)

Point = Outer.Point
"""


@pytest.mark.parametrize("source", [_FROZEN, _NESTED], ids=["module-level", "nested"])
def test_a_frozen_slotted_dataclass_method_is_applied_with_nothing_named(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture, source: str
) -> None:
    module = mods.load("pt", source)
    target = mods.name("pt.Point.total" if source is _FROZEN else "pt.Outer.Point.total")
    registry.register(target, _hooked, HookType.REPLACE)
    with caplog.at_level(logging.WARNING, logger="spawnkit"):
        registry.apply_hooks()
    assert module.Point().total() == "hooked"
    assert [(row.target, row.state) for row in registry.status()] == [(target, "applied")]
    assert registry.stale_holders() == []
    assert not [r for r in caplog.records if "could not be rebound" in r.getMessage()]
    registry.unapply()
    assert module.Point().total() == ("orig", 1)


def test_the_class_a_registry_kept_before_the_copy_runs_the_hook_until_unapply(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    module = mods.load("ops", _REGISTERED)
    first = module.OPS["Op"]
    assert first is not module.Op  # what the registry makes is the class before the copy
    originals = (vars(first)["total"], vars(first)["make"])
    registry.register(mods.name("ops.Op.total"), _hooked, HookType.REPLACE)
    registry.register(mods.name("ops.Op.make"), _hooked, HookType.REPLACE)
    registry.apply_hooks()
    assert module.Op().total() == "hooked"
    assert first().total() == "hooked" and first.make() == "hooked"
    assert {row.state for row in registry.status()} == {"applied"}
    assert registry.stale_holders() == []
    labels = {label for t in registry.applied_targets() for _, label in t.propagated_to}
    assert "Op.total (the class before a class decorator copied it)" in labels
    registry.unapply()
    assert (vars(first)["total"], vars(first)["make"]) == originals  # the very objects
    assert first().total() == ("orig", 1) and first.make() == "orig"
    assert module.Op().total() == ("orig", 1)
