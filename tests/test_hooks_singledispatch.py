"""A hook on a ``functools.singledispatch`` function runs on every path a call can take.

The chain installed for ``process`` copied the original's ``dispatch`` and ``registry``: code
that looks the implementation up (``process.dispatch(type(x))(x)``, as torch and
serialization libraries do, or an implementation calling the generic one through
``process.dispatch(object)``) called it unhooked while ``status()`` said applied.  And with
the function and one of its implementations hooked in one apply, the implementation's hook
never ran at all: the sweep met the function's chain, not a singledispatch function, and
left its registry alone.  Real modules on ``sys.path``, the real hook engine.
"""

from __future__ import annotations

import importlib
import sys
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.namespace import Namespace

if TYPE_CHECKING:
    from _hooks_support import Modules

DISPATCH = """
import functools


@functools.singledispatch
def process(x):
    return ('generic', x)


@process.register(int)
def process_int(x):
    # an implementation calling the generic one, as a subclass calls super()
    return ('int', x, process.dispatch(object)(x))
"""


def _tag(tag: str) -> Callable[..., tuple[object, ...]]:
    return lambda result, x: (*result, tag)


def test_a_hook_on_a_singledispatch_function_runs_through_dispatch_and_registry(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mod = mods.load("dispatch", DISPATCH)
    original, process_int = mod.process, mod.process_int
    registry.register(mods.name("dispatch.process"), _tag("B"))
    registry.apply_hooks()
    hooked = mod.process
    # the generic one, reached from the int one, runs the hook once (no dispatch again)
    assert hooked(1) == ("int", 1, ("generic", 1, "B"), "B")
    # Before the fix: ('int', 1, ('generic', 1)) for both, and ('generic', 's') below.
    assert hooked.dispatch(int)(1) == hooked(1)
    assert hooked.registry[int](1) == hooked(1)
    assert hooked.dispatch(str)("s") == ("generic", "s", "B") == hooked.registry[object]("s")
    assert set(hooked.registry) == {object, int} and len(hooked.registry) == 2
    # registered after the apply: found by the call and by both look-ups, hooked
    hooked.register(float, lambda x: ("float", x))
    assert hooked(1.5) == hooked.dispatch(float)(1.5) == ("float", 1.5, "B")
    assert hooked.registry[float](1.5) == ("float", 1.5, "B")
    registry.unapply()
    assert mod.process is original
    assert type(original.registry) is types.MappingProxyType
    assert original.dispatch(int) is process_int and original.registry[int] is process_int
    assert original.dispatch(str)("s") == ("generic", "s")


def test_a_replace_of_a_singledispatch_function_is_what_dispatch_hands_out(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mod = mods.load("dispatch", DISPATCH)
    registry.register(mods.name("dispatch.process"), lambda x: ("replaced", x), HookType.REPLACE)
    registry.apply_hooks()
    assert mod.process(1) == mod.process.dispatch(int)(1) == ("replaced", 1)
    assert mod.process.registry[object]("s") == ("replaced", "s")


def test_the_function_and_an_implementation_hooked_in_one_apply_both_run(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Before the fix the implementation's hook ('I') never ran, by any path: the registry
    kept the original, and nothing was listed or said."""
    mod = mods.load("dispatch", DISPATCH)
    process_int = mod.process_int
    registry.register(mods.name("dispatch.process"), _tag("B"))
    registry.register(mods.name("dispatch.process_int"), _tag("I"))
    registry.apply_hooks()
    expected = ("int", 1, ("generic", 1, "B"), "I", "B")
    assert mod.process(1) == mod.process.dispatch(int)(1) == expected
    (impl,) = [a for a in registry.applied_targets() if a.target.endswith("process_int")]
    assert [label for _, label in impl.propagated_to] == ["process.registry[int]"]
    assert registry.stale_holders() == []
    registry.unapply()
    assert mod.process.registry[int] is process_int
    assert mod.process(1) == ("int", 1, ("generic", 1))


ELSEWHERE = """
import PKG.dispatch as dispatching


@dispatching.process.register(complex)
def process_complex(x):
    return ('complex', x)
"""


def test_an_implementation_registered_into_another_package_s_function_is_rebound(
    mods: Modules, registry: type[HookRegistry], tmp_path: Path
) -> None:
    """``import eng.serialize as ser; @ser.to_bytes.register(Blob)`` in an extension of
    another top-level package: the sweep never read that function's registry (not a global
    of the target's module, not in its package), and the climb names no path through a
    function.  Before the fix ('complex', 1j) by every path, nothing listed or said."""
    mod = mods.load("dispatch", DISPATCH)
    ext = f"ext_{mods.pkg}"
    (tmp_path / ext).mkdir()
    (tmp_path / ext / "__init__.py").write_text("")
    (tmp_path / ext / "impls.py").write_text(ELSEWHERE.replace("PKG", mods.pkg))
    try:
        impls = importlib.import_module(f"{ext}.impls")
        registry.register(f"{ext}.impls.process_complex", _tag("C"))
        registry.apply_hooks()
        assert mod.process(1j) == mod.process.dispatch(complex)(1j) == ("complex", 1j, "C")
        (applied,) = registry.applied_targets()
        assert list(applied.propagated_to) == [(mod.__name__, "process.registry[complex]")]
        registry.unapply()
        assert mod.process.registry[complex] is impls.process_complex
        assert mod.process(1j) == ("complex", 1j)
    finally:
        for name in [n for n in sys.modules if n == ext or n.startswith(ext + ".")]:
            del sys.modules[name]


def test_two_namespaces_hooking_one_singledispatch_function_both_run_through_dispatch(
    mods: Modules,
) -> None:
    """The second namespace's chain wraps the first's: its ``dispatch`` hands out the first's
    hooked implementation inside its own hooks, in the order a call runs them."""
    mod = mods.load("dispatch", DISPATCH)
    tag = uuid.uuid4().hex[:8]
    first = Namespace(f"sda{tag}", env_prefix=f"SDA{tag}".upper())
    second = Namespace(f"sdb{tag}", env_prefix=f"SDB{tag}".upper())
    first.hooks.register(mods.name("dispatch.process"), _tag("A"))
    first.hooks.apply_hooks()
    second.hooks.register(mods.name("dispatch.process"), _tag("B"))
    second.hooks.apply_hooks()
    try:
        assert mod.process("s") == ("generic", "s", "A", "B")
        assert (
            mod.process.dispatch(str)("s") == mod.process.registry[object]("s") == mod.process("s")
        )
    finally:
        second.hooks.reset()
        first.hooks.reset()
    assert mod.process.dispatch(str)("s") == ("generic", "s")


METHOD = """
import functools


class Handler:
    @functools.singledispatchmethod
    def handle(self, x):
        return ('generic', x)

    @handle.register(int)
    def handle_int(self, x):
        return ('int', x)

    @handle.register(bytes)
    def _(self, x):
        return ('bytes', x)

    @handle.register(float)
    def _(self, x):  # the class's ``_`` now: the bytes one has no name left
        return ('float', x)


class Sub(Handler):
    pass
"""


def test_a_hook_on_a_singledispatchmethod_is_refused_naming_the_implementations_to_hook(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A hook on the descriptor would run on no path (``h.handle(x)`` binds what the
    dispatcher's ``dispatch`` finds).  Before the fix the refusal was the generic
    'singledispatchmethod descriptor ... REPLACE the class instead', naming nothing to hook;
    the implementations it names now run their hooks on every path."""
    mod = mods.load("dispatch", METHOD)
    handle = vars(mod.Handler)["handle"]
    for target in ("dispatch.Handler.handle", "dispatch.Sub.handle"):
        with HookRegistry.isolated():
            HookRegistry.register(mods.name(target), _tag("B"))
            with pytest.raises(HookApplyError) as info:
                HookRegistry.apply_hooks()
        text = str(info.value)
        assert f"{mods.name(target)!r} is a functools.singledispatchmethod" in text
        names = f"{mods.name('dispatch.Handler.handle_int')!r}, {mods.name('dispatch.Handler._')!r}"
        assert f"({names}; 1 registered without a name of its own" in text
        assert f"REPLACE the class {target.split('.')[1]} with a subclass" in text
    assert vars(mod.Handler)["handle"] is handle  # nothing was left half-applied
    # what it names: every path runs the hook, and unapply() puts everything back
    impl = vars(mod.Handler)["handle_int"]
    registry.register(mods.name("dispatch.Handler.handle_int"), lambda r, *a: (*r, "I"))
    registry.apply_hooks()
    h, sub = mod.Handler(), mod.Sub()
    assert h.handle(1) == sub.handle(1) == handle.dispatcher.dispatch(int)(h, 1) == ("int", 1, "I")
    assert h.handle("s") == ("generic", "s")
    registry.unapply()
    assert handle.dispatcher.registry[int] is impl is vars(mod.Handler)["handle_int"]
    assert h.handle(1) == sub.handle(1) == ("int", 1)


WRAPPED_METHODS = """
import functools


class Handler:
    @functools.singledispatchmethod
    @classmethod
    def handle(cls, x):
        return ('generic', cls.__name__, x)

    @handle.register(int)
    @classmethod
    def handle_int(cls, x):
        return ('int', cls.__name__, x)

    @functools.singledispatchmethod
    @staticmethod
    def convert(x):
        return ('generic', x)

    @convert.register(int)
    @staticmethod
    def convert_int(x):
        return ('int', x)


class Sub(Handler):
    pass
"""


@pytest.mark.parametrize("vouched", [False, True], ids=["swept", "clean-dispatch-module"])
def test_a_classmethod_or_staticmethod_implementation_of_a_singledispatchmethod_is_rebound(
    mods: Modules, registry: type[HookRegistry], vouched: bool
) -> None:
    """The implementation the refusal above names, when the registry holds it wrapped in a
    ``classmethod``/``staticmethod``: before the fix only ``Handler.handle_int(1)`` ran the
    hook; ``Handler.handle(1)``, ``Sub.handle(1)`` and ``dispatch(int)`` ran the original
    (a 'stale holder' in the log, the registry entry's ``__func__``)."""
    mod = mods.load("dispatch", WRAPPED_METHODS)
    handle, convert = vars(mod.Handler)["handle"], vars(mod.Handler)["convert"]
    first = handle.dispatcher.registry[int], convert.dispatcher.registry[int]
    assert mod.Handler.handle(1) == ("int", "Handler", 1)  # the dispatch cache knows int
    registry.register(mods.name("dispatch.Handler.handle_int"), lambda r, *a: (*r, "I"))
    registry.register(mods.name("dispatch.Handler.convert_int"), lambda r, *a: (*r, "C"))
    registry.apply_hooks(clean_modules={mods.name("dispatch")} if vouched else set())
    h = mod.Handler()
    assert mod.Handler.handle(1) == h.handle(1) == ("int", "Handler", 1, "I")
    assert mod.Sub.handle(1) == ("int", "Sub", 1, "I")
    assert handle.dispatcher.dispatch(int).__get__(None, mod.Handler)(1) == h.handle(1)
    assert mod.Handler.convert(1) == h.convert(1) == mod.Sub.convert(1) == ("int", 1, "C")
    assert mod.Handler.handle("s") == ("generic", "Handler", "s")
    labels = {label for a in registry.applied_targets() for _, label in a.propagated_to}
    assert labels == {"Handler.handle.registry[int]", "Handler.convert.registry[int]"}
    assert registry.stale_holders() == []
    registry.unapply()
    assert (handle.dispatcher.registry[int], convert.dispatcher.registry[int]) == first
    assert first == (vars(mod.Handler)["handle_int"], vars(mod.Handler)["convert_int"])
    assert mod.Sub.handle(1) == ("int", "Sub", 1) and mod.Handler.convert(1) == ("int", 1)
