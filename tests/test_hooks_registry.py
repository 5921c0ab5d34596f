"""Registering, ordering, re-applying and querying hooks, on real modules in tmp_path."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from spawnkit.errors import HookConflictError, HookConflictWarning, HookError
from spawnkit.hooks import (
    UNKNOWN_SOURCE,
    HookRegistry,
    HookSource,
    HookType,
    Registration,
    current_plugin_source,
    plugin_hook,
    plugin_source,
)

SCHED = """
class Scheduler:
    def __init__(self, gpu_id=0):
        self.gpu_id = gpu_id

    def get_next_batch_to_run(self, x):
        return x * 2

def helper(a, b=1):
    return a + b
"""

if TYPE_CHECKING:
    from pathlib import Path

    from _hooks_support import Modules

pytest_plugins = ("_hooks_support",)  # the mods and registry fixtures


def test_seed_imperative_and_decorator_forms(
    mods: Modules, registry: type[HookRegistry], capsys: pytest.CaptureFixture[str]
) -> None:
    sched = mods.load("sched", SCHED)
    target = mods.name("sched.Scheduler")

    def my_hook(original_fn, self, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = original_fn(self, *args, **kwargs)
        print(f"Scheduler initialized! gpu_id={self.gpu_id}")
        return result

    HookRegistry.register(f"{target}.__init__", my_hook, HookType.AROUND)

    @plugin_hook(f"{target}.get_next_batch_to_run", type=HookType.AROUND)
    def my_timer(original_fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        return original_fn(*args, **kwargs) + 1

    original = sched.Scheduler

    @plugin_hook(target, type=HookType.REPLACE)
    class MyScheduler(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            print("Enhanced scheduler initialized!")

    assert my_timer.__name__ == "my_timer"  # the decorator returns the object unchanged
    patched = HookRegistry.apply_hooks()
    assert patched[0] == target  # class REPLACE first
    assert set(patched) == {target, f"{target}.__init__", f"{target}.get_next_batch_to_run"}
    s = sched.Scheduler(gpu_id=3)
    assert type(s) is MyScheduler and isinstance(s, original)
    assert s.get_next_batch_to_run(2) == 5
    out = capsys.readouterr().out
    assert "Enhanced scheduler initialized!" in out and "gpu_id=3" in out
    # the method hooks landed on the replacement class; the original is untouched
    assert "get_next_batch_to_run" not in vars(MyScheduler) or MyScheduler is not original
    assert original(1).get_next_batch_to_run(2) == 4


@pytest.mark.filterwarnings("ignore::spawnkit.errors.HookConflictWarning")
def test_order_replace_first_then_registration_order_last_outermost(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return [x]\n")
    trace: list[str] = []
    target = mods.name("m.f")

    def before(x):  # type: ignore[no-untyped-def]
        trace.append("before")
        return ((x + 1,), {})

    def around1(orig, x):  # type: ignore[no-untyped-def]
        trace.append("a1:in")
        r = orig(x)
        trace.append("a1:out")
        return [*r, "a1"]

    def after(result, x):  # type: ignore[no-untyped-def]
        trace.append("after")
        return [*result, "after"]

    def around2(orig, x):  # type: ignore[no-untyped-def]
        trace.append("a2:in")
        r = orig(x)
        trace.append("a2:out")
        return [*r, "a2"]

    def replace(x):  # type: ignore[no-untyped-def]
        trace.append("replace")
        return ["R", x]

    registry.register(target, before, HookType.BEFORE)
    registry.register(target, around1, HookType.AROUND)
    registry.register(target, after, HookType.AFTER)
    registry.register(target, around2, HookType.AROUND)
    registry.register(target, replace, HookType.REPLACE)  # registered last, applied first
    registry.apply_hooks()
    assert m.f(1) == ["R", 2, "a1", "after", "a2"]
    # chain: replace <- before <- around1 <- after <- around2 (outermost)
    assert trace == ["a2:in", "a1:in", "before", "replace", "a1:out", "after", "a2:out"]


def test_last_replace_wins_and_warns_naming_both(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f():\n    return 'orig'\n")
    target = mods.name("m.f")
    registry.register(target, lambda: "one", HookType.REPLACE, source=HookSource("p1", "d1"))
    registry.register(target, lambda: "two", HookType.REPLACE, source=HookSource("p2", "d2"))
    with pytest.warns(HookConflictWarning) as caught:
        registry.apply_hooks()
    assert m.f() == "two"
    text = "\n".join(str(w.message) for w in caught)
    assert "2 REPLACE hooks" in text and "'p1' (d1)" in text and "'p2' (d2)" in text
    assert caught[0].filename == __file__  # at the caller's apply_hooks() line


def test_warns_on_several_arounds_and_on_replace_mixed_once_per_process(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("m", "def f():\n    return 1\n")
    target = mods.name("m.f")
    registry.register(target, lambda o: o(), HookType.AROUND, source=HookSource("a"))
    registry.register(target, lambda o: o(), HookType.AROUND, source=HookSource("b"))
    registry.register(target, lambda: 2, HookType.REPLACE, source=HookSource("c"))
    with pytest.warns(HookConflictWarning) as caught:
        registry.apply_hooks()
    texts = [str(w.message) for w in caught]
    assert len(texts) == 2, texts
    assert any("2 AROUND hooks" in t and "'a'" in t and "'b'" in t for t in texts)
    assert any("mixes REPLACE" in t and "'c'" in t for t in texts)
    registry.register(mods.name("m.f"), lambda r: r, HookType.AFTER, source=HookSource("d"))
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        registry.apply_hooks()
    # The AROUND conflict was reported; only the changed mix (now naming 'd') comes again.
    assert [str(w.message) for w in again if "2 AROUND hooks" in str(w.message)] == []
    assert any("'d'" in str(w.message) for w in again)


def test_conflict_policy_error_refuses_before_patching(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f():\n    return 'orig'\n")
    target = mods.name("m.f")
    registry.register(target, lambda: "one", HookType.REPLACE, source=HookSource("p1"))
    registry.register(target, lambda: "two", HookType.REPLACE, source=HookSource("p2"))
    with pytest.raises(HookConflictError, match="X_HOOK_CONFLICTS=error") as info:
        registry.apply_hooks(conflicts="error", conflicts_var="X_HOOK_CONFLICTS")
    assert m.f() == "orig"  # nothing patched
    assert "X_HOOK_CONFLICTS=warn" in str(info.value) and len(info.value.conflicts) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookConflictWarning)
        with pytest.raises(HookConflictError, match="escalated") as escalated:
            registry.apply_hooks()
    assert isinstance(escalated.value.__cause__, HookConflictWarning)
    assert m.f() == "orig"


def test_default_type_is_after(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    registry.register(mods.name("m.f"), lambda r, x: r * 3)
    registry.apply_hooks()
    assert m.f(2) == 6
    assert registry.registrations()[0].hook_type is HookType.AFTER


def test_after_returning_none_keeps_result(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("m", "def f(x):\n    return x + 1\n")
    seen = []
    registry.register(mods.name("m.f"), lambda r, x: seen.append((r, x)), HookType.AFTER)
    registry.apply_hooks()
    assert m.f(1) == 2 and seen == [(2, 1)]


def test_before_may_change_args_and_kwargs(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("m", "def f(a, b=0):\n    return (a, b)\n")
    registry.register(mods.name("m.f"), lambda a, b=0: ([a * 10], {"b": b + 1}), HookType.BEFORE)
    registry.apply_hooks()
    assert m.f(1, b=2) == (10, 3)


def test_target_forms_colon_nested_and_subpackage(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write(
        "sub.deep",
        """
        class Outer:
            class Inner:
                def m(self):
                    return 'inner'

        def f():
            return 'f'
        """,
    )
    # nothing imported yet: resolution imports the longest importable prefix itself
    assert mods.name("sub.deep") not in sys.modules
    registry.register(mods.name("sub.deep.Outer.Inner.m"), lambda r, s: r + "!", HookType.AFTER)
    registry.register(f"{mods.name('sub.deep')}:f", lambda r: r + "?", HookType.AFTER)
    registry.register(f"{mods.name('sub.deep')}:Outer.Inner", lambda r, s: r + "#")
    assert mods.name("sub.deep") not in sys.modules  # register imports nothing
    with pytest.raises(Exception, match="class"):
        registry.apply_hooks()  # a class target with a non-REPLACE hook
    registry.reset()
    registry.register(mods.name("sub.deep.Outer.Inner.m"), lambda r, s: r + "!", HookType.AFTER)
    registry.register(f"{mods.name('sub.deep')}:f", lambda r: r + "?", HookType.AFTER)
    registry.apply_hooks()
    deep = sys.modules[mods.name("sub.deep")]
    assert deep.Outer.Inner().m() == "inner!"
    assert deep.f() == "f?"
    assert registry.is_hook_applied(mods.name("sub.deep.f"), registry.registrations()[1].hook)


def test_colon_and_dotted_spellings_share_one_chain(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    registry.register(mods.name("m.f"), lambda r, x: r + 1)
    registry.register(f"{mods.name('m')}:f", lambda r, x: r * 10)
    registry.apply_hooks()
    assert m.f(1) == 20  # one chain of two hooks, not two chains
    assert len(registry.applied_targets()) == 1


def test_string_hook_imported_only_at_apply(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    hooks_mod = mods.write("plugin_hooks", "def triple(result, x):\n    return result * 3\n")
    registry.register(mods.name("m.f"), f"{hooks_mod}:triple", HookType.AFTER)
    assert hooks_mod not in sys.modules
    registry.apply_hooks()
    assert hooks_mod in sys.modules
    assert m.f(2) == 6
    triple = sys.modules[hooks_mod].triple
    assert registry.is_hook_applied(mods.name("m.f"), triple)
    assert registry.is_hook_applied(mods.name("m.f"), f"{hooks_mod}:triple")
    assert registry.hook_modules(mods.name("m.f")) == [hooks_mod]


def test_reapply_applies_new_rebuilds_from_original_never_twice(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return [x]\n")
    original = m.f
    target = mods.name("m.f")
    registry.register(target, lambda r, x: [*r, "a"])
    assert registry.apply_hooks() == [target]
    first = m.f
    assert registry.apply_hooks() == []  # nothing new: no-op
    assert m.f is first
    registry.register(target, lambda r, x: [*r, "b"])
    assert registry.apply_hooks() == [target]
    assert m.f(1) == [1, "a", "b"]  # rebuilt from the original: "a" once
    assert m.f.__wrapped__ is original
    registry.unapply()
    assert m.f is original
    assert registry.apply_hooks() == [target]  # registrations survive unapply
    assert m.f(1) == [1, "a", "b"]


def test_duplicate_registration_is_ignored_with_warning(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")

    def add(r, x):  # type: ignore[no-untyped-def]
        return r + 1

    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.register(mods.name("m.f"), add)
        registry.register(mods.name("m.f"), add)
    registry.apply_hooks()
    assert m.f(0) == 1
    assert "second registration" in caplog.text


def test_sources_from_contextvar_explicit_and_unknown(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("m", "def f():\n    pass\ndef g():\n    pass\n")
    src = HookSource("my_plugin", "my-dist", "1.2")
    assert str(src) == "plugin 'my_plugin' (my-dist 1.2)"
    assert str(HookSource("p", "d")) == "plugin 'p' (d)"
    with plugin_source(src):
        assert current_plugin_source.get() is src
        registry.register(mods.name("m.f"), lambda r: r)
        registry.register(mods.name("m.g"), lambda r: r, source=HookSource("explicit"))
    assert current_plugin_source.get() is None
    registry.register(mods.name("m.g"), lambda r: None, HookType.AFTER)
    regs = registry.registrations()
    assert [r.source for r in regs] == [src, HookSource("explicit"), UNKNOWN_SOURCE]
    assert [r.seq for r in regs] == sorted(r.seq for r in regs)
    registry.apply_hooks()
    applied = {a.target: a for a in registry.applied_targets()}
    assert applied[mods.name("m.f")].sources == (src,)
    assert applied[mods.name("m.g")].kind == "function"
    assert [h.hook_type for h in applied[mods.name("m.g")].hooks] == [HookType.AFTER] * 2


def test_plugin_source_restores_on_error() -> None:
    with pytest.raises(RuntimeError), plugin_source(HookSource("x")):
        raise RuntimeError
    assert current_plugin_source.get() is None


def test_queries_discard_source_and_target_modules(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    mods.write("later", "class K:\n    def m(self):\n        return 1\n")
    bad, good = HookSource("bad"), HookSource("good")
    registry.register(mods.name("m.f"), lambda r, x: r + 1, source=good)
    registry.register(mods.name("m.f"), lambda r, x: r * 100, source=bad)
    registry.register(mods.name("later.K.m"), lambda r, s: r, source=bad)
    registry.register(f"{mods.name('later')}:K", type("K2", (), {}), HookType.REPLACE, source=bad)
    assert registry.registered_targets() == [
        mods.name("m.f"),
        mods.name("later.K.m"),
        f"{mods.name('later')}:K",
    ]
    modules = registry.target_modules()
    assert set(modules) == {mods.name("m"), mods.name("later")}
    assert len(modules[mods.name("later")]) == 2
    assert mods.name("later") not in sys.modules  # found by parsing, not importing
    assert registry.discard_source(bad) == 3
    assert registry.registered_targets() == [mods.name("m.f")]
    registry.apply_hooks()
    assert m.f(1) == 2
    assert registry.registrations(mods.name("m.f"))[0].source == good
    assert isinstance(registry.registrations()[0], Registration)


def test_target_modules_follow_imports_between_two_questions(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """The guard and the apply stage ask in turn and share the guesses, but an import between
    two questions changes what a lowercase target names: the second answer must see it."""
    mods.write("a", "class b:\n    def c(self):\n        return 1\n")
    registry.register(mods.name("a.b.c"), lambda r, s: r)
    # Nothing imported: no part is CapWords, so the guess is all but the last part.
    assert set(registry.target_modules()) == {mods.name("a.b")}
    mods.load("a")
    # Now 'a' is an imported module and 'b' one of its attributes: the module is 'a'.
    assert set(registry.target_modules()) == {mods.name("a")}
    assert set(registry.target_modules(eager=True)) == {mods.name("a")}


def test_discarding_all_hooks_of_applied_target_restores_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    original = m.f
    registry.register(mods.name("m.f"), lambda r, x: r + 1, source=HookSource("p"))
    registry.apply_hooks()
    assert m.f is not original
    registry.discard_source(HookSource("p"))
    assert registry.apply_hooks() == []
    assert m.f is original and registry.applied_targets() == []


def test_instances_are_independent_of_the_default(mods: Modules) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    mine = HookRegistry(name="engine.a")
    with HookRegistry.isolated():
        mine.register(mods.name("m.f"), lambda r, x: r + 1)
        assert HookRegistry.registered_targets() == []
        assert HookRegistry.default().registered_targets() == []
        assert mine.registered_targets() == [mods.name("m.f")]
        mine.apply_hooks()
        assert m.f(1) == 2
        mine.reset()
        assert m.f(1) == 1 and mine.registrations() == []


def test_isolated_restores_outer_state_and_patches(mods: Modules) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    original = m.f
    with HookRegistry.isolated() as outer:
        outer.register(mods.name("m.f"), lambda r, x: r + 1)
        with HookRegistry.isolated() as inner:
            assert inner is HookRegistry.default()
            assert inner.registered_targets() == []
            inner.register(mods.name("m.f"), lambda r, x: r * 10)
            inner.apply_hooks()
            assert m.f(1) == 10
        assert m.f is original  # the inner block's patches are undone
        assert HookRegistry.registered_targets() == [mods.name("m.f")]
    assert HookRegistry.registered_targets() == []


def test_reset_unapplies_and_clears(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    original = m.f
    registry.register(mods.name("m.f"), lambda r, x: r + 1)
    registry.apply_hooks()
    registry.reset()
    assert m.f is original
    assert registry.registrations() == [] and registry.apply_hooks() == []


def test_is_hook_applied_false_when_overwritten(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")

    def hook(r, x):  # type: ignore[no-untyped-def]
        return r

    registry.register(mods.name("m.f"), hook)
    assert not registry.is_hook_applied(mods.name("m.f"), hook)
    registry.apply_hooks()
    assert registry.is_hook_applied(mods.name("m.f"), hook)
    assert registry.is_hook_applied(f"{mods.name('m')}:f", hook)
    assert not registry.is_hook_applied(mods.name("m.f"), lambda r: r)
    m.f = lambda x: x  # someone else replaced it: our hook no longer runs
    assert not registry.is_hook_applied(mods.name("m.f"), hook)


def test_namespace_plugin_hook_uses_its_registry(mods: Modules) -> None:
    from spawnkit.namespace import Namespace, default_namespace

    assert default_namespace().hooks is HookRegistry.default()
    ns = Namespace(f"hooktest.{mods.pkg}", env_prefix=f"HT{mods.pkg[4:]}".upper())
    m = mods.load("m", "def f(x):\n    return x\n")
    try:

        @ns.plugin_hook(mods.name("m.f"), type=HookType.AROUND)
        def around(orig, x):  # type: ignore[no-untyped-def]
            return orig(x) + 5

        assert HookRegistry.default().registrations(mods.name("m.f")) == []
        ns.hooks.apply_hooks()
        assert m.f(1) == 6
    finally:
        ns.hooks.reset()
        Namespace._registry.pop(ns.name, None)


def test_importing_hooks_imports_no_torch_and_no_loader() -> None:
    code = (
        "import sys, spawnkit.hooks as h; "
        "assert 'torch' not in sys.modules, 'torch'; "
        "assert 'spawnkit.hooks.plugins' not in sys.modules, 'plugins'; "
        "print(sorted(h.__all__))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "HookRegistry" in proc.stdout and "load_plugins" in proc.stdout


def test_lazy_loader_names_fail_clearly_or_resolve() -> None:
    import spawnkit.hooks as hooks

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hooks.nope  # noqa: B018
    try:
        import spawnkit.hooks.plugins  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            hooks.load_plugins  # noqa: B018
    else:
        assert callable(hooks.load_plugins)


CHILD = """
def f(x):
    return x

def child_main(queue):
    import sys
    from spawnkit.hooks import HookRegistry, HookType

    mod = sys.modules[__name__]
    HookRegistry.register(__name__ + ".f", __name__ + ":around", HookType.AROUND)
    patched = HookRegistry.apply_hooks()
    queue.put((patched, mod.f(1), f(2)))

def around(orig, x):
    return orig(x) + 100
"""


def test_hooks_apply_in_a_spawned_child_only(mods: Modules) -> None:
    import multiprocessing

    child = mods.load("child", CHILD)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child.child_main, args=(queue,))
    proc.start()
    try:
        patched, via_module, via_global = queue.get(timeout=60)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    assert proc.exitcode == 0
    assert patched == [mods.name("child.f")]
    assert via_module == 101 and via_global == 102  # the module's own global is hooked too
    assert child.f(1) == 1  # the parent was never patched


def test_the_settled_version_changes_with_every_change_and_only_then(mods: Modules) -> None:
    # A warm worker reuses its server's hook report while this number is unchanged: a call
    # that changes what status() says must change it, and a query must not.
    mods.load("sched", SCHED)
    reg = HookRegistry(name="versioned")
    seen = [reg._settled_version()]

    def changed() -> bool:
        now = reg._settled_version()
        seen.append(now)
        return now not in seen[:-1]

    src = HookSource("p", "d", "1")
    reg.register(mods.name("sched.helper"), lambda r, *a, **k: r, HookType.AFTER, source=src)
    assert changed()
    reg.apply_hooks()
    assert changed()
    reg.status(), reg.registrations(), reg.stale_holders(), reg.applied_targets()
    assert not changed()
    reg.unapply()
    assert changed()
    reg.discard_source(src)
    assert changed()
    reg.provide_module(f"{mods.pkg}_absent", factory=lambda name: sys.modules["sys"])
    assert changed()
    # While an on_import target waits, its reason names a module as sys.modules has it now:
    # there is no version to reuse a report by.
    mods.write("later", "def f():\n    pass\n")  # there, not imported: it waits (one that
    # its imported package lacks would never come, and is refused at once)
    reg.register(f"{mods.pkg}.later.f", lambda r, *a, **k: r, HookType.AFTER, on_import=True)
    reg.apply_hooks()
    assert reg._settled_version() is None
    reg.reset()
    assert reg._settled_version() not in seen  # a new state never repeats an old number


# ------------------------------------------------ two registries (namespaces), one target
def _two(mods: Modules) -> tuple[HookRegistry, HookRegistry]:
    return HookRegistry(name=f"{mods.pkg}.a"), HookRegistry(name=f"{mods.pkg}.b")


def test_unapplying_the_inner_registry_keeps_the_outer_ones_hooks(mods: Modules) -> None:
    """B's chain is built on A's; before, ``A.unapply()`` put the original back over B's chain:
    B's hooks stopped running (the holder made in between too), unsaid.  Now B's chain is
    rebuilt on the original, and what held the old one follows."""
    mods.write("user", "from PKG.m import f\n")
    m = mods.load("m", "def f(x):\n    return [x]\n")
    original = m.f
    a, b = _two(mods)
    a.register(mods.name("m.f"), lambda r, x: [*r, "A"])
    b.register(mods.name("m.f"), lambda r, x: [*r, "B"])
    a.apply_hooks()
    b.apply_hooks()
    user = mods.load("user")
    assert m.f(0) == user.f(0) == [0, "A", "B"]
    a.unapply()
    assert m.f(0) == user.f(0) == [0, "B"]  # was [0]: B's hooks gone with A's
    assert [s.state for s in b.status()] == ["applied"]
    b.unapply()
    assert m.f is original and user.f is original
    a.apply_hooks()
    b.apply_hooks()
    b.unapply()  # the outer one first: as before
    assert m.f(0) == user.f(0) == [0, "A"]
    a.unapply()
    assert m.f is original and user.f is original


def test_rebuilding_the_inner_registrys_chain_keeps_the_outer_ones_hooks(mods: Modules) -> None:
    """A hook registered on A after B applied: A's chain is rebuilt, and before it was put over
    B's, dropping B's hooks; now B's is rebuilt on A's new chain (all three run)."""
    m = mods.load("m", "def f(x):\n    return [x]\n")
    original = m.f
    a, b = _two(mods)
    a.register(mods.name("m.f"), lambda r, x: [*r, "A"])
    b.register(mods.name("m.f"), lambda r, x: [*r, "B"])
    a.apply_hooks()
    b.apply_hooks()
    a.register(mods.name("m.f"), lambda r, x: [*r, "A2"])
    a.apply_hooks()
    assert m.f(0) == [0, "A", "A2", "B"]  # was [0, "A", "A2"]
    a.unapply()
    b.unapply()
    assert m.f is original


def _two_names(mods: Modules, source: str, name: str) -> tuple[Any, Any]:
    """A package ``eng`` re-exporting ``name`` from ``eng.impl``: one object, two targets."""
    mods.write("eng.impl", source)
    mods.write("eng.__init__", f"from .impl import {name}\n")
    return mods.load("eng"), mods.load("eng.impl")


@pytest.mark.parametrize("order", ["ab", "ba"])  # "ba": the control, correct before too
def test_unapplying_the_inner_registry_keeps_the_outer_ones_hooks_under_another_name(
    mods: Modules, order: str
) -> None:
    """A hooks ``eng.f``, B ``eng.impl.f`` (the same function): B's chain is built on A's,
    found at ``eng.impl.f``.  Before, in order "ab", ``A.unapply()`` left ``eng.f`` bare (B's
    hooks gone there, B's status() applied) and A's hook running at ``eng.impl.f``, which
    kept it after ``B.unapply()`` too.  Now B's chain is rebuilt on the original at both
    names, and the holder made in between follows."""
    eng, impl = _two_names(mods, "def f(x):\n    return [x]\n", "f")
    mods.write("user", "from PKG.eng import f\n")
    original = impl.f
    a, b = _two(mods)
    a.register(mods.name("eng.f"), lambda r, x: [*r, "A"])
    b.register(mods.name("eng.impl.f"), lambda r, x: [*r, "B"])
    first, second = (a, b) if order == "ab" else (b, a)
    first.apply_hooks()
    user = mods.load("user")
    second.apply_hooks()
    both = [0, *order.upper()]
    assert eng.f(0) == impl.f(0) == user.f(0) == both
    a.unapply()
    assert eng.f(0) == impl.f(0) == user.f(0) == [0, "B"]  # was [0] and [0, "A", "B"]
    assert [s.state for s in b.status()] == ["applied"]
    b.unapply()
    assert eng.f is original and impl.f is original and user.f is original  # A's hook stayed


def test_rebuilding_the_inner_registrys_chain_keeps_the_outer_ones_hooks_under_another_name(
    mods: Modules,
) -> None:
    """A hook registered on A (``eng.f``) after B applied on ``eng.impl.f``: A's chain is
    rebuilt, and B's, standing at the other name, is rebuilt on it (before, ``eng.f`` ran
    A's new chain without B's hooks, ``eng.impl.f`` B's chain on A's old one)."""
    eng, impl = _two_names(mods, "def f(x):\n    return [x]\n", "f")
    original = impl.f
    a, b = _two(mods)
    a.register(mods.name("eng.f"), lambda r, x: [*r, "A"])
    b.register(mods.name("eng.impl.f"), lambda r, x: [*r, "B"])
    a.apply_hooks()
    b.apply_hooks()
    a.register(mods.name("eng.f"), lambda r, x: [*r, "A2"])
    a.apply_hooks()
    assert eng.f(0) == impl.f(0) == [0, "A", "A2", "B"]
    a.unapply()
    assert eng.f(0) == impl.f(0) == [0, "B"]
    b.unapply()
    assert eng.f is original and impl.f is original


def test_a_method_hooked_through_two_spellings_of_its_class_by_two_registries(
    mods: Modules,
) -> None:
    """``eng.Engine.run`` and ``eng.impl.Engine.run``: one place, two keys.  Before,
    ``A.unapply()`` put the original back over B's chain (B's hooks gone, status() applied)."""
    eng, impl = _two_names(mods, "class Engine:\n    def run(self, x):\n        return [x]\n",
                           "Engine")  # fmt: skip
    original = vars(impl.Engine)["run"]
    a, b = _two(mods)
    a.register(mods.name("eng.Engine.run"), lambda r, s, x: [*r, "A"])
    b.register(mods.name("eng.impl.Engine.run"), lambda r, s, x: [*r, "B"])
    a.apply_hooks()
    b.apply_hooks()
    a.unapply()
    assert eng.Engine().run(0) == [0, "B"]  # was [0]
    b.unapply()
    assert vars(impl.Engine)["run"] is original


def test_a_class_replace_of_another_registry_under_another_name_is_not_undone_half(
    mods: Modules,
) -> None:
    """B's class REPLACE at ``eng.impl.C`` derives from A's at ``eng.C``: before,
    ``A.unapply()`` put the original class back at ``eng.C`` and left B's (A's inside it) at
    ``eng.impl.C``; now it names B, both spellings and the fix, and leaves both as they are."""
    eng, impl = _two_names(mods, "class C:\n    pass\n", "C")
    original = impl.C
    a, b = _two(mods)

    class ByA(original):  # type: ignore[misc, valid-type]
        pass

    class ByB(ByA):
        pass

    a.register(mods.name("eng.C"), ByA, HookType.REPLACE)
    b.register(mods.name("eng.impl.C"), ByB, HookType.REPLACE)
    a.apply_hooks()
    b.apply_hooks()
    spelt = mods.name("eng.impl.C")
    with pytest.raises(HookError, match=rf"'{b.name}' replaced it \(as '{spelt}', the same"):
        a.unapply()
    assert eng.C is ByB and impl.C is ByB  # left as it was, not half undone
    b.unapply()
    assert eng.C is ByA and impl.C is ByA
    a.unapply()
    assert eng.C is original and impl.C is original


def test_a_class_replace_of_another_registry_on_top_is_not_undone_half(mods: Modules) -> None:
    """A class REPLACE derives from the class below it, so A's replacement cannot leave from
    under B's: ``A.unapply()`` names B and the target and leaves that target as it is."""
    m = mods.load("m", "class C:\n    def who(self):\n        return 'orig'\n")
    original = m.C
    a, b = _two(mods)

    class ByA(original):  # type: ignore[misc, valid-type]
        def who(self) -> str:
            return "A"

    class ByB(ByA):
        def who(self) -> str:
            return super().who() + "B"

    a.register(mods.name("m.C"), ByA, HookType.REPLACE)
    b.register(mods.name("m.C"), ByB, HookType.REPLACE)
    a.apply_hooks()
    b.apply_hooks()
    with pytest.raises(HookError, match=rf"namespace '{b.name}' replaced it .*Fix: unapply"):
        a.unapply()
    assert m.C is ByB and m.C().who() == "AB"  # left as it was, not half undone
    b.unapply()
    assert m.C is ByA
    a.unapply()  # the fix the error gives
    assert m.C is original


_CROSSED = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from spawnkit.hooks import HookRegistry
import crossed
sys.setswitchinterval(1e-6)  # switch threads as often as it can: the window is short
for i in range(int(sys.argv[2])):
    a, b = HookRegistry(name=f"a{i}"), HookRegistry(name=f"b{i}")
    a.register("crossed.f", lambda r, x: [*r, "A"])
    a.apply_hooks()
    b.register("crossed.f", lambda r, x: [*r, "B"])  # f: B's chain on A's
    b.register("crossed.g", lambda r, x: [*r, "B"])
    b.apply_hooks()
    a.register("crossed.g", lambda r, x: [*r, "A"])  # g: A's chain on B's
    a.apply_hooks()
    assert crossed.f(0) == [0, "A", "B"] and crossed.g(0) == [0, "B", "A"]
    go = threading.Barrier(2)
    threads = [threading.Thread(target=lambda r=r: (go.wait(), r.unapply()), daemon=True)
               for r in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    if any(t.is_alive() for t in threads):
        print(f"hung at round {i}", flush=True)
        import os; os._exit(3)
    assert crossed.f(0) == [0] and crossed.g(0) == [0], (crossed.f(0), crossed.g(0))
print("done")
"""


def test_two_registries_each_inner_to_the_other_unapply_in_two_threads(tmp_path: Path) -> None:
    """``A.unapply()`` rebuilds B's chain on f while ``B.unapply()`` rebuilds A's on g: with a
    lock each, the two threads took them in two orders and both hung for good (within 70
    rounds, 3 runs of 3).  Every registry shares one lock now; each round must end."""
    (tmp_path / "crossed.py").write_text("def f(x):\n    return [x]\n\ndef g(x):\n    return [x]\n")
    proc = subprocess.run(
        [sys.executable, "-c", _CROSSED, str(tmp_path), "150"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stdout + proc.stderr


def test_a_replace_over_another_registrys_hooks_says_they_never_run(mods: Modules) -> None:
    """B's REPLACE applied over A's chain stands in for all of it: before, A's hooks silently
    never ran while A's status() said applied; now a ``HookConflictWarning`` names the
    REPLACE, A's namespace and hooks, and the fix; ``=error`` refuses, nothing patched."""
    m = mods.load("m", "def f(x):\n    return [x]\n")
    original = m.f

    def by_a(original_fn, x):  # type: ignore[no-untyped-def]
        return [*original_fn(x), "A"]

    def by_b(x):  # type: ignore[no-untyped-def]
        return ["B"]

    a, b = _two(mods)
    a.register(mods.name("m.f"), by_a, HookType.AROUND)
    b.register(mods.name("m.f"), by_b, HookType.REPLACE)
    a.apply_hooks()
    with pytest.raises(HookError, match=rf"namespace '{a.name}'.*never run"):
        b.apply_hooks(conflicts="error")
    assert m.f(0) == [0, "A"]  # refused: nothing of B's patched
    with pytest.warns(HookConflictWarning) as caught:
        b.apply_hooks()
    message = str(caught[0].message)
    assert "REPLACE hook" in message and "by_b" in message and "by_a" in message, message
    assert f"namespace '{a.name}'" in message and "hook it with AROUND" in message
    assert m.f(0) == ["B"]
    b.unapply()
    a.unapply()
    assert m.f is original


def test_a_replace_over_another_registrys_hooks_under_another_name_says_they_never_run(
    mods: Modules,
) -> None:
    """A wraps ``eng.f``, B REPLACEs ``eng.impl.f`` (the same function, A's chain propagated
    there): B's replacement stands in for A's chain at both names.  Before, only the same
    spelling was named; this one was silent while A's status() said applied."""
    eng, impl = _two_names(mods, "def f(x):\n    return [x]\n", "f")
    original = impl.f
    a, b = _two(mods)
    a.register(mods.name("eng.f"), lambda r, x: [*r, "A"])
    b.register(mods.name("eng.impl.f"), lambda x: ["B"], HookType.REPLACE)
    a.apply_hooks()
    with pytest.raises(HookError, match=rf"namespace '{a.name}'.*never run"):
        b.apply_hooks(conflicts="error")
    assert eng.f(0) == impl.f(0) == [0, "A"]  # refused: nothing of B's patched
    with pytest.warns(HookConflictWarning) as caught:
        b.apply_hooks()
    message = str(caught[0].message)
    assert f"installed at '{mods.name('eng.f')}', the same object (" in message, message
    assert eng.f(0) == impl.f(0) == ["B"]
    b.unapply()
    a.unapply()
    assert eng.f is original and impl.f is original


def test_hooks_of_another_registry_under_another_name_around_a_replacement_stay_quiet(
    mods: Modules,
) -> None:
    """The control, across two names: B's AROUND wraps A's REPLACE, B's class REPLACE
    derives from A's replacement class.  No warning (``-W error`` holds)."""
    eng, impl = _two_names(mods, "def f(x):\n    return [x]\n\nclass C:\n    pass\n", "f, C")
    a, b = _two(mods)

    class ByA(impl.C):  # type: ignore[misc, name-defined]
        pass

    class ByB(ByA):
        pass

    a.register(mods.name("eng.f"), lambda x: ["A"], HookType.REPLACE)
    b.register(mods.name("eng.impl.f"), lambda r, x: [*r, "B"])
    a.register(mods.name("eng.C"), ByA, HookType.REPLACE)
    b.register(mods.name("eng.impl.C"), ByB, HookType.REPLACE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.apply_hooks()
        b.apply_hooks()
        assert eng.f(0) == impl.f(0) == ["A", "B"] and eng.C is ByB and impl.C is ByB
        b.unapply()
        a.unapply()
    assert eng.f is impl.f and eng.C is impl.C is ByA.__base__


def test_hooks_of_another_registry_around_a_replacement_stay_quiet(mods: Modules) -> None:
    """The control: B's AROUND wraps A's REPLACE (both run), and B's class REPLACE derived
    from A's replacement class keeps it; no warning (``-W error`` holds)."""
    m = mods.load("m", "def f(x):\n    return [x]\n\nclass C:\n    pass\n")
    a, b = _two(mods)

    class ByA(m.C):  # type: ignore[misc, name-defined]
        pass

    class ByB(ByA):
        pass

    a.register(mods.name("m.f"), lambda x: ["A"], HookType.REPLACE)
    b.register(mods.name("m.f"), lambda r, x: [*r, "B"])
    a.register(mods.name("m.C"), ByA, HookType.REPLACE)
    b.register(mods.name("m.C"), ByB, HookType.REPLACE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.apply_hooks()
        b.apply_hooks()
    assert m.f(0) == ["A", "B"] and m.C is ByB
    b.unapply()
    a.unapply()


_THREE_KINDS = """
def f(x):
    return [x]

class E:
    @staticmethod
    def s(x):
        return [x]

    def m(self, x):
        return [x]
"""


def test_a_second_registry_on_the_first_ones_chains_sees_no_holder(mods: Modules) -> None:
    """Control: B's originals are A's chains, which A's record holds (twice: what it
    installed, raw and callable); those references are no holder of the user's, for a
    function, a ``staticmethod`` and a method alike: nothing stale, nothing logged."""
    mods.load("ops", _THREE_KINDS)
    a, b = _two(mods)
    targets = [mods.name(t) for t in ("ops.f", "ops.E.s", "ops.E.m")]
    for target in targets:
        a.register(target, lambda r, *x: [*r, "A"])
        b.register(target, lambda r, *x: [*r, "B"])
    a.apply_hooks()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b.apply_hooks()
    assert b.stale_holders() == []
    assert [s.state for s in b.status()] == ["applied"] * 3


_NAME = "test_a_local_holding_the_first_registrys_chain_is_named_by_the_second"


def test_a_local_holding_the_first_registrys_chain_is_named_by_the_second(
    mods: Modules, caplog: pytest.LogCaptureFixture
) -> None:
    """A local of the running function that applies B, bound to A's chain in between: no
    sweep or search reads the applying thread's frames, so calls through it ran A's hooks
    only while B's ``status()`` said applied, unsaid.  The count of references to A's chain
    says so: a stale holder naming both, the hook ``partial``, the fix logged."""
    ops = mods.load("ops", _THREE_KINDS)
    a, b = _two(mods)
    target = mods.name("ops.f")
    a.register(target, lambda r, x: [*r, "A"])
    b.register(target, lambda r, x: [*r, "B"])
    a.apply_hooks()
    held = ops.f
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        b.apply_hooks()
    assert held(0) == [0, "A"] and ops.f(0) == [0, "A", "B"]
    (holder,) = b.stale_holders()
    assert holder["target"] == target
    assert holder["name"] == f"{_NAME}() local held (namespace {a.name!r}'s hooks only)"
    assert b.status()[0].state == "partial"
    assert "right after the other's" in caplog.text
    assert "run the other namespace's hooks only, not these" in caplog.text, caplog.text
