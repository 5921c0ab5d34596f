"""Descriptors and metadata: each kind of class attribute is wrapped the way it binds."""

from __future__ import annotations

import inspect
import logging
import pickle
import warnings
from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError, HookTargetError
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.hooks.types import HookSource

CLASSES = """
class Base:
    def inherited(self, x):
        return ('base', x)

    @classmethod
    def make(cls, x):
        return (cls, x)

    @staticmethod
    def static(a, b=1):
        return a + b

    @property
    def prop(self):
        return 1

class Derived(Base):
    def own(self, x: int, *, scale: int = 2) -> int:
        '''Scale x.'''
        return x * scale

class Sub(Derived):
    pass
"""

if TYPE_CHECKING:
    from _hooks_support import Modules


def test_instance_method_hooks_receive_self(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("c", CLASSES)
    seen = []

    def before(self, x, **kw):  # type: ignore[no-untyped-def]
        seen.append(self)
        return None

    registry.register(mods.name("c.Derived.own"), before, HookType.BEFORE)
    registry.apply_hooks()
    d = m.Derived()
    assert d.own(3) == 6 and seen == [d]
    assert m.Sub().own(1, scale=5) == 5  # subclasses inherit the hooked method


def test_inherited_method_is_patched_on_named_class_only(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("c", CLASSES)
    base_raw = m.Base.__dict__["inherited"]
    registry.register(mods.name("c.Derived.inherited"), lambda r, s, x: ("hooked", *r))
    registry.apply_hooks()
    assert m.Derived().inherited(1) == ("hooked", "base", 1)
    assert m.Base().inherited(1) == ("base", 1)
    assert m.Base.__dict__["inherited"] is base_raw
    assert "inherited" in vars(m.Derived)
    registry.unapply()
    assert "inherited" not in vars(m.Derived)  # removed, not shadowed by a copy
    assert m.Base.__dict__["inherited"] is base_raw


def test_classmethod_keeps_subclass_cls(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("c", CLASSES)
    raw = m.Base.__dict__["make"]
    calls = []

    def around(orig, cls, x):  # type: ignore[no-untyped-def]
        calls.append(cls)
        return orig(cls, x + 1)

    registry.register(mods.name("c.Base.make"), around, HookType.AROUND)
    registry.apply_hooks()
    assert isinstance(m.Base.__dict__["make"], classmethod)
    assert m.Base.make(1) == (m.Base, 2)
    assert m.Derived.make(1) == (m.Derived, 2)
    assert m.Sub().make(1) == (m.Sub, 2)
    assert calls == [m.Base, m.Derived, m.Sub]
    registry.unapply()
    assert m.Base.__dict__["make"] is raw


def test_staticmethod_stays_static(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("c", CLASSES)
    registry.register(mods.name("c.Base.static"), lambda r, a, b=1: r * 10)
    registry.apply_hooks()
    assert isinstance(m.Base.__dict__["static"], staticmethod)
    assert m.Base.static(1) == 20
    assert m.Derived().static(1, b=2) == 30  # no extra self through an instance


def test_inherited_classmethod_on_subclass(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("c", CLASSES)
    registry.register(mods.name("c.Derived.make"), lambda r, cls, x: ("hooked", r))
    registry.apply_hooks()
    assert m.Derived.make(1) == ("hooked", (m.Derived, 1))
    assert m.Sub.make(1) == ("hooked", (m.Sub, 1))
    assert m.Base.make(1) == (m.Base, 1)


def test_property_and_builtin_slot_are_refused(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("c", CLASSES)
    registry.register(mods.name("c.Base.prop"), lambda r, s: r)
    registry.register(mods.name("c.Derived.__repr__"), lambda r, s: r)  # object.__repr__ slot
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert "is a property" in text and "builtin slot" in text and "inherited from object" in text
    assert set(info.value.failures) == {mods.name("c.Base.prop"), mods.name("c.Derived.__repr__")}
    assert "__repr__" not in vars(m.Derived) and isinstance(vars(m.Base)["prop"], property)


def test_property_error_type_in_non_strict(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    mods.load("c", CLASSES)
    registry.register(mods.name("c.Base.prop"), lambda r, s: r)
    with caplog.at_level(logging.ERROR, logger="spawnkit.hooks"):
        assert registry.apply_hooks(strict=False) == []
    assert HookTargetError.__name__ in caplog.text


def test_metadata_and_signature_are_kept(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("c", CLASSES)
    original = m.Derived.__dict__["own"]
    sig = inspect.signature(original)
    for t in (HookType.BEFORE, HookType.AFTER, HookType.AROUND, HookType.REPLACE):
        with HookRegistry.isolated() as reg:
            hook = {
                HookType.BEFORE: lambda *a, **k: None,
                HookType.AFTER: lambda r, *a, **k: None,
                HookType.AROUND: lambda o, *a, **k: o(*a, **k),
                HookType.REPLACE: lambda self, x, *, scale=2: x,
            }[t]
            reg.register(mods.name("c.Derived.own"), hook, t)
            reg.apply_hooks()
            w = m.Derived.__dict__["own"]
            assert w is not original
            assert w.__name__ == "own" and w.__qualname__ == "Derived.own"
            assert w.__doc__ == "Scale x." and w.__module__ == m.__name__
            assert w.__wrapped__ is original
            assert inspect.signature(w) == sig
            assert inspect.signature(m.Derived().own) == inspect.signature(
                m.Derived().own.__func__.__wrapped__.__get__(m.Derived())
            )
        assert m.Derived.__dict__["own"] is original


def test_patched_function_still_pickles_by_reference(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("f", "def f(x):\n    return x\n")
    registry.register(mods.name("f.f"), lambda r, x: r + 1)
    registry.apply_hooks()
    assert pickle.loads(pickle.dumps(m.f)) is m.f


def test_class_replace_keeps_isinstance_and_method_hooks_land_on_it(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    m = mods.load("c", CLASSES)
    original = m.Derived

    class Better(original):  # type: ignore[misc, valid-type]
        def own(self, x, *, scale=2):  # type: ignore[no-untyped-def]
            return -x

    registry.register(mods.name("c.Derived.inherited"), lambda r, s, x: ("h", r))
    registry.register(mods.name("c.Derived"), Better, HookType.REPLACE, source=None)
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.register(
            mods.name("c.Derived.own"), lambda self, x, *, scale=2: 0, HookType.REPLACE
        )
        patched = registry.apply_hooks()
    assert patched[0] == mods.name("c.Derived")
    assert m.Derived is Better
    obj = m.Derived()
    assert isinstance(obj, original) and issubclass(m.Derived, m.Base)
    assert obj.inherited(1) == ("h", ("base", 1))
    assert "inherited" not in vars(original)  # landed on the replacement only
    assert obj.own(5) == 0
    assert "overrides the implementation" in caplog.text and "Better" in caplog.text
    registry.unapply()
    assert m.Derived is original and "inherited" not in vars(Better)
    assert vars(Better)["own"](obj, 5) == -5


def test_class_replace_with_non_subclass_warns(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    m = mods.load("c", CLASSES)

    class Unrelated:
        pass

    registry.register(mods.name("c.Base"), Unrelated, HookType.REPLACE)
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.apply_hooks()
    assert m.Base is Unrelated
    assert "not a subclass" in caplog.text


def test_nested_class_replace_and_rebuild_moves_method_hooks(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load(
        "n",
        """
        class Outer:
            class Inner:
                def m(self):
                    return 'inner'
        """,
    )
    original = m.Outer.Inner
    first = type("First", (original,), {})
    second = type("Second", (original,), {})
    registry.register(mods.name("n.Outer.Inner"), first, HookType.REPLACE)
    registry.register(mods.name("n.Outer.Inner.m"), lambda r, s: r + "!")
    registry.apply_hooks()
    assert m.Outer.Inner is first and m.Outer.Inner().m() == "inner!"
    registry.register(mods.name("n.Outer.Inner"), second, HookType.REPLACE)
    registry.apply_hooks()
    assert m.Outer.Inner is second and m.Outer.Inner().m() == "inner!"
    assert "m" not in vars(first)  # the method hook moved to the new replacement
    registry.unapply()
    assert m.Outer.Inner is original and "m" not in vars(second)


def test_class_replace_registered_after_method_hook_was_applied_moves_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load(
        "late",
        """
        class C:
            def m(self):
                return 'orig'
        """,
    )
    original = m.C
    registry.register(mods.name("late.C.m"), lambda r, s: r + "!")
    registry.apply_hooks()
    assert m.C().m() == "orig!"
    better = type("Better", (original,), {"m": lambda self: "better"})
    registry.register(mods.name("late.C"), better, HookType.REPLACE)
    registry.apply_hooks()
    assert m.C is better and m.C().m() == "better!"  # the hook moved onto the replacement
    assert vars(original)["m"](original()) == "orig"  # and left the original class
    registry.unapply()
    assert m.C is original and original().m() == "orig"
    assert vars(better)["m"](better()) == "better"


def test_discarded_class_replace_moves_method_hooks_back_to_the_original(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load(
        "back",
        """
        class C:
            def m(self):
                return 'orig'
        """,
    )
    original = m.C
    better = type("Better", (original,), {"m": lambda self: "better"})
    registry.register(mods.name("back.C.m"), lambda r, s: r + "!")
    registry.register(mods.name("back.C"), better, HookType.REPLACE, source=HookSource("cls"))
    registry.apply_hooks()
    assert m.C is better and m.C().m() == "better!"
    registry.discard_source(HookSource("cls"))  # e.g. the class plugin failed in lenient mode
    registry.apply_hooks()
    assert m.C is original and m.C().m() == "orig!"  # the method hook is still in force
    assert vars(better)["m"](better()) == "better"  # and left the dropped replacement
    registry.unapply()
    assert vars(original)["m"](original()) == "orig"


def test_non_descriptor_callable_in_class(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load(
        "k",
        """
        class _Adder:
            def __init__(self, n):
                self.n = n

            def __call__(self, b):
                return self.n + b

        class K:
            add1 = _Adder(1)
        """,
    )
    raw = vars(m.K)["add1"]
    registry.register(mods.name("k.K.add1"), lambda r, b: r * 2)
    registry.apply_hooks()
    assert m.K().add1(2) == 6 and m.K.add1(2) == 6  # still unbound, like the callable
    registry.unapply()
    assert vars(m.K)["add1"] is raw


# A partial stored in a class: no descriptor before 3.13, a __get__ that returns the partial
# itself (with a FutureWarning) in 3.13, a method descriptor from 3.14.  The subclasses below
# give each behaviour on any version, so both ways of wrapping are tested everywhere.
PARTIALS = """
import functools
import types

def _args(*args):
    return args

class BindingPartial(functools.partial):  # 3.14's partial: binds like a function
    def __get__(self, obj, owner=None):
        return self if obj is None else types.MethodType(self, obj)

class SelfPartial(functools.partial):  # 3.13's partial, minus the warning
    def __get__(self, obj, owner=None):
        return self

class OddPartial(functools.partial):  # neither: an unknown descriptor
    def __get__(self, obj, owner=None):
        return lambda *a: ('odd', a)

class K:
    plain = functools.partial(_args, 'p')
    binding = BindingPartial(_args, 'p')
    itself = SelfPartial(_args, 'p')
    odd = OddPartial(_args, 'p')
"""


def _tagged(result: object, *args: object) -> tuple[str, object]:
    return ("hooked", result)


def test_partial_in_class_is_hooked_the_way_it_binds_on_this_python(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("parts", PARTIALS)
    k = m.K()
    with warnings.catch_warnings():  # 3.13: "partial will be a method descriptor"
        warnings.simplefilter("ignore", FutureWarning)
        unhooked = (k.plain(2), m.K.plain(2))
    raw = vars(m.K)["plain"]
    registry.register(mods.name("parts.K.plain"), _tagged)
    registry.apply_hooks()
    assert (k.plain(2), m.K.plain(2)) == tuple(("hooked", r) for r in unhooked)
    registry.unapply()
    assert vars(m.K)["plain"] is raw


def test_partial_that_binds_like_a_method_gets_the_instance(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("parts", PARTIALS)
    k = m.K()
    assert k.binding(2) == ("p", k, 2)  # the behaviour the hook must keep
    raw = vars(m.K)["binding"]
    registry.register(mods.name("parts.K.binding"), _tagged)
    registry.apply_hooks()
    assert k.binding(2) == ("hooked", ("p", k, 2))
    assert m.K.binding(2) == ("hooked", ("p", 2))  # on the class: unbound, as unhooked
    registry.unapply()
    assert vars(m.K)["binding"] is raw and k.binding(2) == ("p", k, 2)


def test_partial_whose_get_returns_itself_stays_unbound(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("parts", PARTIALS)
    k = m.K()
    registry.register(mods.name("parts.K.itself"), _tagged)
    registry.apply_hooks()
    assert k.itself(2) == ("hooked", ("p", 2)) and m.K.itself(2) == ("hooked", ("p", 2))


def test_partial_with_an_unknown_get_is_refused(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("parts", PARTIALS)
    registry.register(mods.name("parts.K.odd"), _tagged)
    with pytest.raises(HookApplyError, match="OddPartial descriptor"):
        registry.apply_hooks()
    assert m.K().odd(2) == ("odd", (2,))


def test_module_getattr_attribute_restored_by_deletion(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load(
        "lazy",
        """
        def _real(x):
            return x

        def __getattr__(name):
            if name == 'lazy_fn':
                return _real
            raise AttributeError(name)
        """,
    )
    registry.register(mods.name("lazy.lazy_fn"), lambda r, x: r + 1)
    registry.apply_hooks()
    assert m.lazy_fn(1) == 2
    registry.unapply()
    assert "lazy_fn" not in vars(m) and m.lazy_fn(1) == 1


def test_builtin_module_function_can_be_hooked(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("b", "from os import getpid as pid\nlength = len\n")
    registry.register(mods.name("b.length"), lambda r, x: r + 100)
    registry.apply_hooks()
    assert m.length("ab") == 102 and len("ab") == 2
