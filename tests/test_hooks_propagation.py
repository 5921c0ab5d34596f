"""Stale ``from X import Y`` bindings: rebound, restored, hook modules spared."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from _plugin_app import LAUNCH, MAIN, run_script, warned, write_app
from spawnkit.errors import HookApplyError, HookError
from spawnkit.hooks import HookRegistry, HookType

LIB = """
def get_rope(x):
    return ('rope', x)

class Engine:
    def run(self):
        return 'run'
"""

if TYPE_CHECKING:
    from _hooks_support import Modules


def test_from_import_bindings_are_rebound_and_restored(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", LIB)
    original = lib.get_rope
    user = mods.load(
        "user", "from PKG.lib import get_rope\nfrom PKG.lib import get_rope as alias\n"
    )
    pkg_init = sys.modules[mods.pkg]
    pkg_init.get_rope = original  # a package re-export, as in ``pkg/__init__.py``
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks()
    assert lib.get_rope(1) == ("hooked", "rope", 1)
    assert user.get_rope is lib.get_rope and user.alias is lib.get_rope
    assert pkg_init.get_rope is lib.get_rope
    applied = registry.applied_targets()[0]
    assert set(applied.propagated_to) == {
        (user.__name__, "get_rope"),
        (user.__name__, "alias"),
        (mods.pkg, "get_rope"),
    }
    registry.unapply()
    assert lib.get_rope is original and user.get_rope is original and user.alias is original
    assert pkg_init.get_rope is original


def test_hook_module_keeps_original_so_replacement_does_not_recurse(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", LIB)
    user = mods.load("user", "from PKG.lib import get_rope\n")
    plugin = mods.load(
        "plugin",
        """
        from PKG.lib import get_rope

        def better_rope(x):
            return ('better', get_rope(x))
        """,
    )
    original = lib.get_rope
    registry.register(mods.name("lib.get_rope"), plugin.better_rope, HookType.REPLACE)
    registry.apply_hooks()
    assert plugin.get_rope is original  # the hook's own import is left alone
    assert user.get_rope(1) == ("better", ("rope", 1))
    assert registry.hook_modules(mods.name("lib.get_rope")) == [plugin.__name__]


def test_class_replace_propagates_to_importers(mods: Modules, registry: type[HookRegistry]) -> None:
    lib = mods.load("lib", LIB)
    user = mods.load("user", "from PKG.lib import Engine\n")
    plugin = mods.load(
        "plugin",
        """
        from PKG.lib import Engine

        class FastEngine(Engine):
            def run(self):
                return 'fast ' + super().run()
        """,
    )
    kept = mods.load("kept", "from PKG.plugin import FastEngine\n")  # the plugin's own name
    original, fast = lib.Engine, plugin.FastEngine
    registry.register(mods.name("lib.Engine"), plugin.FastEngine, HookType.REPLACE)
    registry.apply_hooks()
    assert user.Engine is plugin.FastEngine and user.Engine().run() == "fast run"
    assert plugin.Engine is original
    late = mods.load("late", "from PKG.lib import Engine\nfrom PKG.plugin import FastEngine\n")
    registry.unapply()
    assert user.Engine is original and lib.Engine is original and late.Engine is original
    # undo once made every name of the replacement class the original, its own included
    assert plugin.FastEngine is fast and kept.FastEngine is fast and late.FastEngine is fast


def test_late_importer_of_wrapper_is_restored_and_reapply_updates(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", LIB)
    early = mods.load("early", "from PKG.lib import get_rope\n")
    original = lib.get_rope
    target = mods.name("lib.get_rope")
    registry.register(target, lambda r, x: ("a", *r))
    registry.apply_hooks()
    late = mods.load("late", "from PKG.lib import get_rope\n")  # imports the wrapper itself
    first = lib.get_rope
    assert late.get_rope is first and early.get_rope is first
    registry.register(target, lambda r, x: ("b", *r))
    registry.apply_hooks()
    second = lib.get_rope
    assert second is not first
    assert early.get_rope is second and late.get_rope is second
    assert second(1) == ("b", "a", "rope", 1)
    registry.unapply()
    assert early.get_rope is original and late.get_rope is original


def test_module_that_rebound_its_name_is_not_clobbered(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("lib", LIB)
    user = mods.load("user", "from PKG.lib import get_rope\n")
    registry.register(mods.name("lib.get_rope"), lambda r, x: r)
    registry.apply_hooks()

    def own(x):  # type: ignore[no-untyped-def]
        return x

    user.get_rope = own
    registry.unapply()
    assert user.get_rope is own


def test_stale_bindings_report(mods: Modules, registry: type[HookRegistry]) -> None:
    lib = mods.load("lib", LIB)
    user = mods.load("user", "from PKG.lib import get_rope, Engine\n")
    plugin = mods.load("plugin", "from PKG.lib import get_rope\n\ndef hook(r, x):\n    return r\n")
    target = mods.name("lib.get_rope")
    registry.register(target, plugin.hook)
    assert registry.stale_bindings(target) == [(user.__name__, "get_rope")]  # not the plugin
    assert registry.stale_bindings(mods.name("lib.Engine.run")) == []  # shared via the class
    assert registry.stale_bindings(mods.name("notimported.f")) == []
    registry.apply_hooks()
    assert registry.stale_bindings(target) == []
    assert lib.get_rope is user.get_rope


METHODS = """
class Engine:
    def run(self):
        return 'run'

    @staticmethod
    def helper(x):
        return ('helper', x)

    go = run  # an alias in the class body holds the same function
"""

COPIES = """
from PKG.lib import Engine

run = Engine.run  # the function itself, as ``from lib import f`` holds a module function
helper = Engine.helper
TABLE = {"run": Engine.run}

class Sub(Engine):
    again = Engine.run
"""


def test_copies_of_a_method_target_are_rebound_and_restored(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``run = Engine.run`` in another module ran the original while the hook said applied."""
    lib = mods.load("lib", METHODS)
    run, helper = vars(lib.Engine)["run"], lib.Engine.helper
    holder = mods.load("holder", COPIES)
    registry.register(mods.name("lib.Engine.run"), lambda r, s: r + "!")
    registry.register(mods.name("lib.Engine.helper"), lambda r, x: ("hooked", *r))
    registry.apply_hooks()
    engine = lib.Engine()
    assert engine.run() == engine.go() == "run!"
    assert holder.run(engine) == holder.TABLE["run"](engine) == holder.Sub().again() == "run!"
    assert holder.helper(1) == ("hooked", "helper", 1)
    assert holder.run is vars(lib.Engine)["run"] is vars(lib.Engine)["go"]
    propagated = {label for t in registry.applied_targets() for _, label in t.propagated_to}
    assert {"run", "TABLE['run']", "Sub.again", "Engine.go", "helper"} <= propagated
    assert registry.stale_holders() == []
    registry.unapply()
    assert holder.run is run and holder.TABLE["run"] is run and vars(holder.Sub)["again"] is run
    assert vars(lib.Engine)["go"] is run and holder.helper is helper
    assert engine.run() == holder.run(engine) == "run"


def test_a_function_assigned_into_a_class_is_hooked_on_that_class_only(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``act = helper`` in a class body: the function's home is its module, and hooking
    ``Engine.act`` must not hook every other caller of ``helper``."""
    lib = mods.load(
        "lib", "def helper(self):\n    return 'helper'\n\nclass Engine:\n    act = helper\n"
    )
    user = mods.load("user", "from PKG.lib import helper\n")
    registry.register(mods.name("lib.Engine.act"), lambda r, s: r + "!")
    registry.apply_hooks()
    assert lib.Engine().act() == "helper!"
    assert lib.helper(None) == user.helper(None) == "helper"


WRAPPED = """
import functools
from PKG import lib

ENGINE = lib.Engine()
RUN = ENGINE.run  # a bound method: its __func__ is the original
ROPE = functools.partial(lib.get_rope, 1)
CACHED = functools.lru_cache(maxsize=None)(lib.get_rope)

def traced(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper

TRACED = traced(lib.get_rope)  # a decorator's wrapper: the original is in its closure

def looked_up(x):  # resolves lib.get_rope when called: hooked, nothing to report
    return lib.get_rope(x)
"""


def test_wrappers_made_before_the_hooks_holding_an_original_are_reported_not_hidden(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """A bound method, a ``functools.partial``, an ``lru_cache`` or a decorator's wrapper made
    at import, before the hooks, calls the original; none can be rebound in place, so each is
    named, and the target's status says ``partial``."""
    lib = mods.load("lib", LIB)
    holder = mods.load("holder", WRAPPED)
    run, rope = mods.name("lib.Engine.run"), mods.name("lib.get_rope")
    registry.register(run, lambda r, s: r + "!")
    registry.register(rope, lambda r, x: ("hooked", *r))
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.apply_hooks()
    assert lib.Engine().run() == "run!" and holder.ENGINE.run() == "run!"
    assert holder.RUN() == "run" and holder.ROPE() == ("rope", 1)  # left as they are: said so
    assert holder.CACHED(2) == holder.TRACED(2) == ("rope", 2)
    assert holder.looked_up(2) == ("hooked", "rope", 2)
    stale = registry.stale_holders()
    assert sorted((h["name"], h["kind"], h["target"]) for h in stale) == [
        ("CACHED", "functools.lru_cache", rope),
        ("ROPE", "functools.partial", rope),
        ("RUN", "bound method", run),
        ("TRACED() closure", "closure variable", rope),
    ]
    (warning,) = [m for m in (r.getMessage() for r in caplog.records) if "rebound" in m]
    assert f"{holder.__name__}.RUN (bound method)" in warning
    assert f"{holder.__name__}.ROPE (functools.partial)" in warning
    assert "after the hooks are applied" in warning  # the fix
    # the hooked targets' own chains hold the originals in their closures: not reported
    assert {h["module"] for h in stale} == {holder.__name__}
    states = {s.target: s.state for s in registry.status()}
    assert states[run] == states[rope] == "partial"
    registry.unapply()
    assert registry.stale_holders() == []


def test_clean_modules_are_not_swept(mods: Modules, registry: type[HookRegistry]) -> None:
    """The bootstrap vouches for modules imported before any target: the sweep skips them.

    Only modules named clean are skipped; every other holder is still rebound.
    """
    lib = mods.load("lib", LIB)
    original = lib.get_rope
    vouched = mods.load("vouched", "from PKG.lib import get_rope\n")
    other = mods.load("other", "from PKG.lib import get_rope\n")
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks(clean_modules={vouched.__name__})
    assert other.get_rope is lib.get_rope is not original
    assert vouched.get_rope is original
    registry.unapply()
    assert other.get_rope is original and lib.get_rope is original


CONTAINERS = """
from PKG import lib

TABLE = {"rope": lib.get_rope, "n": 1}
HANDLERS = [len, lib.get_rope]
CLASSES = {"engine": lib.Engine}
PAIRS = (lib.get_rope,)

def run(x, fn=lib.get_rope, *, kw=lib.get_rope):
    return fn(x)
"""


def test_originals_one_level_inside_module_containers(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    lib = mods.load("lib", LIB)
    rope, engine = lib.get_rope, lib.Engine
    holder = mods.load("holder", CONTAINERS)
    plugin = mods.load(
        "plugin",
        "from PKG.lib import Engine\nKEEP = {'mine': Engine}\n"
        "class Fast(Engine):\n    def run(self):\n        return 'fast'\n",
    )
    # a module namespace kept as a value is not a container: the hook module keeps its own
    mods.load("aliaser", "from PKG import plugin\nPLUGIN_NS = vars(plugin)\n")
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.register(mods.name("lib.Engine"), plugin.Fast, HookType.REPLACE)
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.apply_hooks()
    (warning,) = [
        r.getMessage() for r in caplog.records if "could not be rebound" in r.getMessage()
    ]
    assert f"{holder.__name__}.PAIRS[0] (tuple item)" in warning and "without the hooks" in warning
    # dict values and list items are rebound (REPLACE of a class and AROUND-like AFTER alike)
    assert holder.TABLE["rope"] is lib.get_rope and holder.TABLE["n"] == 1
    assert holder.HANDLERS[0] is len and holder.HANDLERS[1] is lib.get_rope
    assert holder.CLASSES["engine"] is plugin.Fast
    assert holder.TABLE["rope"](1) == ("hooked", "rope", 1)
    assert plugin.KEEP["mine"] is engine  # a hook module's own references are left alone
    assert plugin.Engine is engine
    # a tuple item and default arguments cannot be rebound: reported, left as they are
    assert holder.PAIRS[0] is rope and holder.run.__defaults__ == (rope,)
    stale = registry.stale_holders()
    assert sorted((h["name"], h["kind"]) for h in stale) == [
        ("PAIRS[0]", "tuple item"),
        ("run() default of 'fn'", "default argument"),
        ("run() default of 'kw'", "default argument"),
    ]
    assert {h["module"] for h in stale} == {holder.__name__}
    assert {h["target"] for h in stale} == {mods.name("lib.get_rope")}
    assert (holder.__name__, "TABLE['rope']") in registry.applied_targets()[-1].propagated_to
    registry.unapply()
    assert holder.TABLE["rope"] is rope and holder.HANDLERS[1] is rope
    assert holder.CLASSES["engine"] is engine
    assert registry.stale_holders() == []


METHOD_DEFAULTS = """
from PKG import lib


class Model:
    def forward(self, x, fn=lib.get_rope):
        return fn(x)

    @staticmethod
    def plain(x, *, fn=lib.get_rope):
        return fn(x)

    @classmethod
    def build(cls, x, fn=lib.get_rope):
        return fn(x)

    @property
    def size(self):
        return 1
"""


def test_an_original_in_a_methods_default_argument_is_reported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``def forward(self, x, fn=lib.get_rope)`` kept the original: a module-level function's
    default was reported, a method's (plain, static, class) was not: status() said applied."""
    lib = mods.load("lib", LIB)
    rope = lib.get_rope
    holder = mods.load("holder", METHOD_DEFAULTS)
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks()
    assert holder.Model().forward(1) == ("rope", 1)  # the default still calls the original
    assert holder.Model.forward.__defaults__ == (rope,)  # reported, left as it is
    assert sorted((h["name"], h["kind"]) for h in registry.stale_holders()) == [
        ("Model.build() default of 'fn'", "default argument"),
        ("Model.forward() default of 'fn'", "default argument"),
        ("Model.plain() default of 'fn'", "default argument"),
    ]
    (status,) = registry.status()
    assert status.state == "partial" and "Model.forward() default of 'fn'" in status.reason


def test_container_rebinds_roll_back_with_a_failed_apply(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", LIB)
    rope = lib.get_rope
    holder = mods.load("holder", CONTAINERS)
    registry.register(mods.name("lib.get_rope"), lambda r, x: r)
    registry.register(mods.name("lib.no_such_function"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert holder.TABLE["rope"] is rope and holder.HANDLERS[1] is rope
    assert registry.stale_holders() == []  # nothing applied, nothing to report


def test_clean_modules_mutable_containers_are_still_swept(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A registry module imported early is filled later: its dict is searched all the same."""
    registry_mod = mods.load("reg", "OPS = {}\nFROZEN = ()\n")
    lib = mods.load("lib", LIB)
    registry_mod.OPS["rope"] = lib.get_rope
    registry_mod.FROZEN = (lib.get_rope,)  # a clean module's tuples are not searched
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks(clean_modules={registry_mod.__name__})
    assert registry_mod.OPS["rope"] is lib.get_rope
    assert registry.stale_holders() == []


CLASSES_HOLDING = """
from PKG import lib
from PKG.lib import get_rope


def _freeze(cls, name, value):
    raise AttributeError(f"{cls.__name__} is frozen")


class Frozen(type):
    __setattr__ = _freeze


class Engine:
    tokfn = staticmethod(get_rope)
    plain = get_rope
    maker = classmethod(get_rope)
    engine_cls = lib.Engine

    def run(self, x):
        return self.tokfn(x)


class Locked(metaclass=Frozen):
    tokfn = staticmethod(get_rope)
"""


def test_class_attributes_holding_an_original_are_rebound_and_restored_exactly(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``class Engine: tokfn = staticmethod(tokenize)`` defeated the hook while it said applied."""
    lib = mods.load("lib", LIB)
    rope = lib.get_rope
    holder = mods.load("holder", CLASSES_HOLDING)
    engine = holder.Engine
    raw = dict(vars(engine))
    plugin = mods.load("plugin", "from PKG.lib import Engine\nclass Fast(Engine):\n    pass\n")
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.register(mods.name("lib.Engine"), plugin.Fast, HookType.REPLACE)
    registry.apply_hooks()
    assert engine().run(1) == ("hooked", "rope", 1)  # through the staticmethod
    assert engine.tokfn is lib.get_rope and engine.plain is lib.get_rope
    assert isinstance(vars(engine)["tokfn"], staticmethod)
    assert isinstance(vars(engine)["maker"], classmethod)
    assert vars(engine)["maker"].__func__ is lib.get_rope
    assert engine.engine_cls is plugin.Fast
    propagated = {label for t in registry.applied_targets() for _, label in t.propagated_to}
    assert {"Engine.tokfn", "Engine.plain", "Engine.maker", "Engine.engine_cls"} <= propagated
    registry.unapply()
    for name in ("tokfn", "plain", "maker", "engine_cls"):
        assert vars(engine)[name] is raw[name], name  # the very wrapper objects come back
    assert engine.tokfn is rope



@pytest.mark.parametrize("made", ["after", "before"])  # "before": the control, right before too
def test_class_attributes_bound_after_the_apply_get_the_original_back_on_unapply(
    mods: Modules, registry: type[HookRegistry], made: str
) -> None:
    """A class made after ``apply_hooks()`` (the engine module the entry imports, or the one a
    worker's or ``bootstrap_here()``'s apply imported with the target's package) holds the
    chain itself: ``unapply()`` put only module globals back, so ``Engine.tokfn`` kept
    running the hook after the direct call no longer did, unsaid."""
    lib = mods.load("lib", LIB)
    rope = lib.get_rope
    if made == "before":
        holder = mods.load("holder", CLASSES_HOLDING)
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks()
    if made == "after":
        holder = mods.load("holder", CLASSES_HOLDING)
    engine = holder.Engine
    assert engine().run(1) == engine.plain(1) == ("hooked", "rope", 1)
    if made == "after":  # a class refusing setattr holds the chain: named, not passed over
        with pytest.raises(HookError, match=r"holder\.Locked\.tokfn: AttributeError"):
            registry.unapply()
    else:
        registry.unapply()
    assert lib.get_rope is rope and holder.get_rope is rope
    assert engine().run(1) == engine.tokfn(1) == engine.plain(1) == ("rope", 1)
    assert engine.maker() == ("rope", engine)  # was ("hooked", "rope", ...)
    assert isinstance(vars(engine)["tokfn"], staticmethod)
    assert isinstance(vars(engine)["maker"], classmethod)


CLASS_TABLES = """
from PKG.lib import Engine, get_rope


class Ops:
    table = {"rope": get_rope, "n": 1}
    handlers = [len, get_rope]
    pairs = (get_rope, len)
    engines = {"default": Engine}


class Base:
    registry = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        Base.registry[cls.__name__] = cls
"""


def test_dicts_and_lists_in_class_attributes_are_rebound_and_a_tuple_reported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A dispatch table as a class attribute kept the original while status said applied."""
    lib = mods.load("lib", LIB)
    rope, engine = lib.get_rope, lib.Engine
    holder = mods.load("holder", CLASS_TABLES)
    plugin = mods.load("plugin", "from PKG.lib import Engine\nclass Fast(Engine):\n    pass\n")
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.register(mods.name("lib.Engine"), plugin.Fast, HookType.REPLACE)
    registry.apply_hooks()
    ops = holder.Ops
    assert ops.table["rope"](1) == ("hooked", "rope", 1) and ops.table["n"] == 1
    assert ops.handlers == [len, lib.get_rope] and ops.engines["default"] is plugin.Fast
    propagated = {label for t in registry.applied_targets() for _, label in t.propagated_to}
    assert {"Ops.table['rope']", "Ops.handlers[1]", "Ops.engines['default']"} <= propagated
    stale = registry.stale_holders()
    assert [(h["name"], h["kind"]) for h in stale] == [("Ops.pairs[0]", "tuple item")]
    assert {s.state for s in registry.status()} == {"partial", "applied"}
    registry.unapply()
    assert ops.table["rope"] is rope and ops.handlers[1] is rope
    assert ops.engines["default"] is engine


def test_a_clean_modules_class_registry_filled_later_is_swept(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    holder = mods.load("holder", "class Registry:\n    handlers = {}\n    frozen = ()\n")
    lib = mods.load("lib", LIB)
    holder.Registry.handlers["rope"] = lib.get_rope  # filled after the module was built
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks(clean_modules={holder.__name__})
    assert holder.Registry.handlers["rope"] is lib.get_rope
    assert registry.stale_holders() == []


def test_a_class_attribute_that_cannot_be_set_is_reported_not_hidden(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    lib = mods.load("lib", LIB)
    holder = mods.load("holder", CLASSES_HOLDING)
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.apply_hooks()
    assert holder.Locked.tokfn is not lib.get_rope  # left as it was, and said so
    (stale,) = registry.stale_holders()
    assert stale["name"] == "Locked.tokfn" and stale["module"] == holder.__name__
    assert stale["kind"].startswith("class attribute that cannot be set")
    assert stale["target"] == mods.name("lib.get_rope")
    assert any("Locked.tokfn" in r.getMessage() for r in caplog.records)


def test_class_attribute_rebinds_roll_back_with_a_failed_apply(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", LIB)
    rope = lib.get_rope
    holder = mods.load("holder", CLASSES_HOLDING.replace("metaclass=Frozen", ""))
    tokfn = vars(holder.Engine)["tokfn"]
    registry.register(mods.name("lib.get_rope"), lambda r, x: r)
    registry.register(mods.name("lib.no_such_function"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert vars(holder.Engine)["tokfn"] is tokfn and holder.Engine.plain is rope
    assert holder.Locked.tokfn is rope


def test_imported_classes_are_swept_with_the_module_that_defines_them(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A class re-exported by another module is one holder, labelled where it is defined."""
    mods.load("lib", LIB)
    holder = mods.load("holder", CLASSES_HOLDING.replace("metaclass=Frozen", ""))
    mods.load("reexport", "from PKG.holder import Engine\n")
    registry.register(mods.name("lib.get_rope"), lambda r, x: r)
    registry.apply_hooks()
    applied = registry.applied_targets()
    where = [m for t in applied for m, label in t.propagated_to if label == "Engine.tokfn"]
    assert where == [holder.__name__]


def test_batched_queries_answer_as_one_target_at_a_time_from_one_sweep(
    mods: Modules, registry: type[HookRegistry], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The import guard asks about every early target at once; one sweep per target cost a
    # worker whose launcher imported a 100-target engine (and torch) seconds.
    lib = mods.load("lib", LIB + "\ndef other(x):\n    return x\n\nALIAS = other\n")
    mods.load("holder", CONTAINERS)
    mods.load("user", "from PKG.lib import get_rope, other\n")
    plugin = mods.load("plugin", "from PKG.lib import other\n\ndef hook(r, x):\n    return r\n")
    targets = [mods.name(t) for t in ("lib.get_rope", "lib.other", "lib.ALIAS", "lib.Engine.run")]
    targets.append(mods.name("notimported.f"))
    for target in targets:
        registry.register(target, plugin.hook)
    one_by_one = {t: registry.sweep_preview(t) for t in targets}
    bindings = {t: registry.stale_bindings(t) for t in targets}
    from spawnkit.hooks import _propagate  # the sweep the queries import when asked

    sweeps: list[bool] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        sweeps.append(kwargs["containers"])
        return find_holders(*args, **kwargs)

    find_holders = _propagate.find_holders
    monkeypatch.setattr(_propagate, "find_holders", counted)
    previews = registry.sweep_previews(targets)
    # lib.other and lib.ALIAS share one original: the alias needs a second sweep of its own
    assert sweeps == [True, True]
    assert registry.stale_bindings_of(targets) == bindings and sweeps[2:] == [False, False]
    assert previews == one_by_one
    assert one_by_one[mods.name("lib.other")] == (
        [f"{lib.__name__}.ALIAS", f"{mods.name('user')}.other"],
        [],
    )
    assert previews[mods.name("lib.Engine.run")] is None  # a method: the sweep does not vouch
    assert previews[mods.name("notimported.f")] is None
    rope = previews[mods.name("lib.get_rope")]
    assert rope is not None and f"{mods.name('holder')}.TABLE['rope']" in rope[0]
    assert f"{mods.name('holder')}.PAIRS[0] (tuple item)" in rope[1]


def test_the_import_guard_sweeps_twice_per_check_whatever_the_number_of_early_targets(
    mods: Modules, registry: type[HookRegistry], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spawnkit.bootstrap import guard
    from spawnkit.hooks import _propagate  # the sweep the queries import when asked

    libs = [mods.load(f"lib{i}", LIB) for i in range(3)]
    user = mods.load(
        "user", "".join(f"from PKG.lib{i} import get_rope as r{i}\n" for i in range(3))
    )
    for lib in libs:
        registry.register(f"{lib.__name__}.get_rope", lambda r, x: r)
        registry.register(f"{lib.__name__}.Engine.run", lambda r, s: r)
    sweeps: list[bool] = []
    find_holders = _propagate.find_holders

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        sweeps.append(kwargs["containers"])
        return find_holders(*args, **kwargs)

    monkeypatch.setattr(_propagate, "find_holders", counted)
    with pytest.warns(guard.ImportGuardWarning, match="3 hook target module"):
        result = guard.check("ns", registry.default(), "warn", before=frozenset(sys.modules))
    assert sorted(sweeps) == [False, True]  # 6 targets in 3 modules: one sweep of each kind
    assert [v["module"] for v in result.violations] == [lib.__name__ for lib in libs]
    for i, v in enumerate(result.violations):
        assert v["stale_bindings"] == [f"{user.__name__}.r{i}"]
        assert v["rebound_by_sweep"] is False  # a method target: the sweep cannot vouch


def test_a_target_replaced_after_apply_is_reported_and_left_to_its_replacer(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Engine code assigning its own function over a hooked target silently ended the hooks
    there while status() said applied; a wrapper around the chain keeps them in effect."""
    lib = mods.load("lib", LIB)
    rope, run = mods.name("lib.get_rope"), mods.name("lib.Engine.run")
    registry.register(rope, lambda r, x: ("hooked", *r))
    registry.register(run, lambda r, s: r + "!")
    registry.apply_hooks()
    chain = lib.get_rope
    assert {s.state for s in registry.status()} == {"applied"}

    def wrap(fn: Any) -> Any:  # a decorator on top of the chain: the hooks still run
        @functools.wraps(fn)
        def outer(*args: Any) -> Any:
            return fn(*args)

        return outer

    lib.get_rope = wrap(lib.get_rope)
    assert lib.get_rope(1) == ("hooked", "rope", 1)
    assert {s.state for s in registry.status()} == {"applied"} and not registry.stale_holders()

    def fast(x: Any) -> Any:
        return ("fast", x)

    lib.get_rope = fast
    lib.Engine.run = lambda self: "mine"
    states = {s.target: (s.state, s.reason) for s in registry.status()}
    assert states[rope][0] == states[run][0] == "partial"
    assert "replaced after apply_hooks()" in states[rope][1]
    assert f"{__name__}:" in states[rope][1] and "fast" in states[rope][1]  # what replaced it
    holders = {h["name"]: h for h in registry.stale_holders()}
    assert set(holders) == {"get_rope", "Engine.run"}
    assert holders["get_rope"]["module"] == lib.__name__ and holders["get_rope"]["target"] == rope
    assert holders["Engine.run"]["kind"].startswith("replaced after apply_hooks()")
    registry.unapply()  # the replacer's objects stay: undoing ours must not undo theirs
    assert lib.get_rope is fast and lib.Engine().run() == "mine"
    assert chain is not fast and registry.stale_holders() == []


def test_re_applying_a_replaced_target_hooks_the_replacement_not_the_first_original(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """A new hook on a target the engine replaced since: the chain was rebuilt on the first
    original and installed over the replacement, silently undoing the engine's own patch."""
    lib = mods.load("lib", LIB)
    user = mods.load("user", "from PKG.lib import get_rope\n")
    rope = mods.name("lib.get_rope")
    registry.register(rope, lambda r, x: ("first", *r))
    registry.apply_hooks()
    assert user.get_rope(1) == ("first", "rope", 1)

    def fast(x: Any) -> Any:
        return ("fast", x)

    lib.get_rope = fast  # the engine's own patch, after the hooks
    registry.register(rope, lambda r, x: ("second", *r))
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.apply_hooks()
    assert lib.get_rope(1) == ("second", "first", "fast", 1)
    assert user.get_rope is lib.get_rope  # what held the first chain follows the new one
    assert {s.state for s in registry.status()} == {"applied"}
    (message,) = [r.getMessage() for r in caplog.records if "replaced" in r.getMessage()]
    assert rope in message and "fast" in message and "wrap" in message
    run = mods.name("lib.Engine.run")  # a method the engine replaced on its class, the same
    registry.register(run, lambda r, self: r + "!")
    registry.apply_hooks()
    lib.Engine.run = lambda self: "mine"
    registry.register(run, lambda r, self: r + "?")
    registry.apply_hooks()
    assert lib.Engine().run() == "mine!?"
    registry.unapply()
    assert lib.get_rope is fast and lib.Engine().run() == "mine"


OVERRIDES = """
from PKG.lib import Engine

class Calls(Engine):
    def run(self):
        return super().run() + "+calls"

class Skips(Engine):
    def run(self):  # never reaches Engine.run: its instances skip a hook on it
        return "skips"

class Inherits(Engine):
    pass

class Deeper(Inherits):
    def run(self):
        return "deeper"
"""


def test_subclasses_that_override_a_hooked_method_without_calling_it_are_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A plugin hooked ``Engine.run`` while the engine runs a subclass whose ``run`` never
    calls it: applied, and silent.  status() now names those subclasses (gevent's "Subclasses
    (NOT patched)"), including ones defined after the hooks were applied."""
    mods.load("lib", LIB)
    target = mods.name("lib.Engine.run")
    registry.register(target, lambda r, s: r + "!")
    registry.apply_hooks()
    (row,) = registry.status()
    assert (row.state, row.reason) == ("applied", "")
    subs = mods.load("subs", OVERRIDES)
    assert subs.Calls().run() == "run!+calls" and subs.Skips().run() == "skips"
    (row,) = registry.status()
    assert row.state == "applied"  # in effect on Engine and on every subclass that calls it
    for override in ("Skips.run", "Deeper.run"):
        assert f"{subs.__name__}.{override}" in row.reason
    assert "Calls" not in row.reason and "Inherits" not in row.reason
    assert "skip the hook" in row.reason


@pytest.mark.parametrize("base_first", [True, False], ids=["base-first", "subclass-first"])
def test_hooks_on_a_method_and_on_a_subclass_naming_it_are_no_bypass(
    mods: Modules, registry: type[HookRegistry], base_first: bool
) -> None:
    """One plugin hooks ``Engine.run``, another ``Inherits.run`` (the same method, named on a
    subclass that inherits it): both hooks ran, yet the first was said to be skipped by
    "``Inherits.run``", the second plugin's chain, whose code names no method."""
    mods.load("lib", LIB)
    subs = mods.load("subs", OVERRIDES)
    seen: list[str] = []
    hooks = [
        (mods.name("lib.Engine.run"), lambda r, s: seen.append("base") or r),
        (mods.name("subs.Inherits.run"), lambda r, s: seen.append("sub") or r),
    ]
    for target, hook in hooks if base_first else hooks[::-1]:
        registry.register(target, hook)
    registry.apply_hooks()
    assert subs.Inherits().run() == "run" and sorted(seen) == ["base", "sub"]
    deeper, skips = f"{subs.__name__}.Deeper.run", f"{subs.__name__}.Skips.run"
    assert registry.bypassing() == {  # the real ones still named; not the other hook's chain
        mods.name("lib.Engine.run"): [deeper, skips],
        mods.name("subs.Inherits.run"): [deeper],
    }


# One holder each, and nothing else (no local variable here) referencing the original: the
# apply counts references to skip the sweep where nothing could hold one, so a count that
# missed one holder would leave exactly that holder unhooked.
_ONE_HOLDER = {
    "global": ("from PKG.lib import get_rope as H\n", "H", None),
    "dict value": ("from PKG import lib\nH = {'k': lib.get_rope}\n", "H['k']", None),
    "list item": ("from PKG import lib\nH = [lib.get_rope]\n", "H[0]", None),
    "tuple item": ("from PKG import lib\nH = (lib.get_rope,)\n", "H[0]", "tuple item"),
    "default": (
        "from PKG import lib\ndef H(fn=lib.get_rope):\n    return fn\n",
        "H() default of 'fn'",
        "default argument",
    ),
    "closure": (
        "from PKG import lib\ndef wrap(fn):\n    def H():\n        return fn\n    return H\n"
        "H = wrap(lib.get_rope)\n",
        "H() closure",
        "closure variable",
    ),
    "partial": (
        "import functools\nfrom PKG import lib\nH = functools.partial(lib.get_rope, 1)\n",
        "H",
        "functools.partial",
    ),
    "class attribute": (
        "from PKG import lib\nclass C:\n    H = staticmethod(lib.get_rope)\n",
        "C.H",
        None,
    ),
    "method copy": ("from PKG import lib\nH = lib.Engine.run\n", "H", None),
    "property getter": (
        "from PKG import lib\nclass C:\n    H = property(lib.get_rope)\n",
        "C.H",
        None,
    ),
    "cached property": (
        "import functools\nfrom PKG import lib\nclass C:\n"
        "    H = functools.cached_property(lib.get_rope)\n",
        "C.H",
        None,
    ),
    "object attribute": (
        "from PKG import lib\nclass R:\n    pass\nH = R()\nH.fn = lib.get_rope\n",
        "H.fn",
        None,
    ),
    "namespace attribute": (
        "import types\nfrom PKG import lib\nH = types.SimpleNamespace(fn=lib.get_rope)\n",
        "H.fn",
        None,
    ),
    "object's dict": (
        "from PKG import lib\nclass R:\n    def __init__(self):\n        self.ops = {}\n"
        "H = R()\nH.ops['k'] = lib.get_rope\n",
        "H.ops['k']",
        None,
    ),
    "class function default": (
        "from PKG import lib\nclass C:\n    def H(self, fn=lib.get_rope):\n        return fn\n",
        "C.H() default of 'fn'",
        "default argument",
    ),
    "bound method": ("from PKG import lib\nH = lib.Engine().run\n", "H", "bound method"),
}


@pytest.mark.parametrize("case", sorted(_ONE_HOLDER))
def test_a_single_holder_of_an_original_is_found_however_it_holds_it(
    mods: Modules, registry: type[HookRegistry], case: str
) -> None:
    source, label, stale_kind = _ONE_HOLDER[case]
    mods.load("lib", LIB)
    holder = mods.load("holder", source.replace("PKG", mods.pkg))
    target = "lib.Engine.run" if "method" in case else "lib.get_rope"
    registry.register(mods.name(target), lambda r, *a: r)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        registry.apply_hooks()
    (applied,) = registry.applied_targets()
    if stale_kind is None:
        assert (holder.__name__, label) in applied.propagated_to
        assert registry.stale_holders() == []
    else:
        assert [(h["module"], h["name"], h["kind"]) for h in registry.stale_holders()] == [
            (holder.__name__, label, stale_kind)
        ]


def test_an_original_nothing_else_references_is_hooked_without_a_sweep(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Most targets have no copy anywhere: its reference count says so, and no module is read."""
    lib = mods.load("lib", LIB)
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.register(mods.name("lib.Engine.run"), lambda r, self: r.upper())
    registry.apply_hooks()
    assert [r.alone for r in registry.default()._state.applied.values()] == [True, True]
    assert lib.get_rope(1) == ("hooked", "rope", 1) and lib.Engine().run() == "RUN"
    registry.unapply()
    assert lib.get_rope(1) == ("rope", 1) and lib.Engine().run() == "run"
    # the same target with one copy elsewhere is swept, and the copy rebound
    user = mods.load("user", "from PKG.lib import get_rope\n")
    registry.apply_hooks()  # the same registrations: unapply() keeps them
    alone = {r.display: r.alone for r in registry.default()._state.applied.values()}
    assert alone == {mods.name("lib.get_rope"): False, mods.name("lib.Engine.run"): True}
    assert user.get_rope is lib.get_rope and user.get_rope(2) == ("hooked", "rope", 2)


REGISTRY = """
class Registry:
    def __init__(self):
        self._ops = {}
        self.default = None

    def register(self, name):
        def deco(fn):
            self._ops[name] = fn
            self.default = self.default or fn
            return fn
        return deco


OPS = Registry()
"""


def test_a_registry_object_filled_as_the_target_module_was_imported_is_rebound_and_restored(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``@OPS.register("rms")`` ran as ``apply_hooks()`` imported the target's module, so the
    registry object held the original: the engine dispatched through it, unhooked."""
    reg = mods.load("registry", REGISTRY)
    mods.write("ops", "from PKG.registry import OPS\n\n@OPS.register('rms')\ndef rms(x):\n"
               "    return ('rms', x)\n")  # fmt: skip
    registry.register(mods.name("ops.rms"), lambda r, x: (*r, "hooked"))
    registry.apply_hooks()
    assert reg.OPS._ops["rms"](1) == ("rms", 1, "hooked") == reg.OPS.default(1)
    (applied,) = registry.applied_targets()
    assert {label for _, label in applied.propagated_to} >= {"OPS._ops['rms']", "OPS.default"}
    registry.unapply()
    assert reg.OPS._ops["rms"](1) == ("rms", 1) == reg.OPS.default(1)


DISPATCH = """
import functools


@functools.singledispatch
def process(x):
    return ('generic', x)


class Handler:
    @functools.singledispatchmethod
    def handle(self, x):
        return ('generic', x)
"""

DISPATCH_IMPLS = """
from PKG.dispatch import Handler, process


@process.register(int)
def process_int(x):
    return ('int', x)


@Handler.handle.register(str)
def handle_str(self, x):
    return ('str', x)
"""


@pytest.mark.parametrize("vouched", [False, True], ids=["swept", "clean-dispatch-module"])
def test_a_singledispatch_registry_filled_as_a_target_module_was_imported_is_rebound(
    mods: Modules, registry: type[HookRegistry], vouched: bool
) -> None:
    """``@process.register(int)`` (and a ``singledispatchmethod``'s) ran as ``apply_hooks()``
    imported the target's module: dispatch called the original while status said applied.
    A call made before the hooks (the dispatch cache remembering the original) must not
    keep it either; ``unapply()`` puts the original back in the registry."""
    dispatch = mods.load("dispatch", DISPATCH)
    mods.write("impls", DISPATCH_IMPLS)
    assert dispatch.process(1) == ("generic", 1)  # the cache now knows int
    registry.register(mods.name("impls.process_int"), lambda r, x: (*r, "hooked"))
    registry.register(mods.name("impls.handle_str"), lambda r, *a: (*r, "hooked"))
    clean = {dispatch.__name__} if vouched else set()
    registry.apply_hooks(clean_modules=clean)
    assert dispatch.process(1) == ("int", 1, "hooked")
    assert dispatch.Handler().handle("s") == ("str", "s", "hooked")
    labels = {label for a in registry.applied_targets() for _, label in a.propagated_to}
    assert labels == {"process.registry[int]", "Handler.handle.registry[str]"}
    assert registry.stale_holders() == []
    # a hook added later wraps the chain; the registry follows, and is listed once
    registry.register(mods.name("impls.process_int"), lambda r, x: (*r, "again"))
    registry.apply_hooks(clean_modules=clean)
    assert dispatch.process(1) == ("int", 1, "hooked", "again")
    (first,) = [a for a in registry.applied_targets() if a.target.endswith("process_int")]
    assert [label for _, label in first.propagated_to] == ["process.registry[int]"]
    registry.unapply()
    assert dispatch.process(1) == ("int", 1) and dispatch.Handler().handle("s") == ("str", "s")
    assert dispatch.process.registry[int] is sys.modules[mods.name("impls")].process_int


SLOTS = """
import signal
import sys
import threading

got = []


def on_usr1(signum, frame):
    got.append('original')


def report(*args):
    got.append('report')


signal.signal(signal.SIGUSR1, on_usr1)
sys.excepthook = report
threading.excepthook = report


class Server:
    def on_term(self, signum, frame):
        got.append('original on_term')


SERVER = Server()
signal.signal(signal.SIGUSR2, SERVER.on_term)  # a bound method of a module-level instance
"""


@pytest.fixture
def keep_process_slots() -> Iterator[None]:
    """The test's module sets this process's handlers: put the runner's back."""
    saved = signal.getsignal(signal.SIGUSR1), sys.excepthook, threading.excepthook
    usr2 = signal.getsignal(signal.SIGUSR2)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, saved[0])
        signal.signal(signal.SIGUSR2, usr2)
        sys.excepthook, threading.excepthook = saved[1:]


@pytest.mark.usefixtures("keep_process_slots")
def test_signal_handlers_and_interpreter_hooks_set_by_a_target_module_are_rebound(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``signal.signal(SIGUSR1, on_usr1)`` and ``sys.excepthook = report`` ran as
    ``apply_hooks()`` imported the target's module: the interpreter held the originals, so a
    real signal ran the unhooked handler while status said applied."""
    mods.write("slots", SLOTS)
    registry.register(mods.name("slots.on_usr1"), lambda r, *a: slots.got.append("hooked"))
    registry.register(mods.name("slots.report"), lambda r, *a: slots.got.append("hooked report"))
    registry.register(
        mods.name("slots.Server.on_term"), lambda r, *a: slots.got.append("hooked on_term")
    )
    registry.apply_hooks()
    slots = sys.modules[mods.name("slots")]
    os.kill(os.getpid(), signal.SIGUSR1)  # a real signal: the handler runs in the main thread
    sys.excepthook(ValueError, ValueError("x"), None)
    os.kill(os.getpid(), signal.SIGUSR2)
    assert slots.got == [
        "original", "hooked", "report", "hooked report", "original on_term", "hooked on_term"
    ]  # fmt: skip
    held = {holder for a in registry.applied_targets() for holder in a.propagated_to}
    assert held == {
        ("signal", "handler of SIGUSR1"),
        ("signal", "handler of SIGUSR2"),
        ("sys", "excepthook"),
        ("threading", "excepthook"),
    }
    assert signal.getsignal(signal.SIGUSR2).__self__ is slots.SERVER
    registry.unapply()
    assert signal.getsignal(signal.SIGUSR1) is slots.on_usr1
    assert sys.excepthook is slots.report is threading.excepthook
    assert signal.getsignal(signal.SIGUSR2) == slots.SERVER.on_term  # the original's again


@pytest.mark.usefixtures("keep_process_slots")
def test_a_signal_handler_an_apply_in_another_thread_cannot_set_is_reported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Only the main thread may set a handler: the apply reports it instead of failing."""
    mods.load("slots", SLOTS)  # only the main thread may import it: it sets a handler
    registry.register(mods.name("slots.on_usr1"), lambda r, *a: None)
    worker = threading.Thread(target=registry.apply_hooks)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    (held,) = registry.stale_holders()
    assert held["name"] == "handler of SIGUSR1"
    assert held["kind"].startswith("signal handler that cannot be set (ValueError")
    assert [s.state for s in registry.status()] == ["partial"]


DATACLASS = """
import dataclasses

from PKG.lib import get_rope


def default_backend():
    return 'generic'


@dataclasses.dataclass
class Config:
    backend: str = dataclasses.field(default_factory=default_backend)
    fallback: str = dataclasses.field(default_factory=default_backend)
    rope: object = dataclasses.field(default_factory=lambda: get_rope)
"""


def test_a_dataclass_default_factory_is_rebound_in_its_field_and_its_generated_init(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``field(default_factory=default_backend)``: the generated ``__init__`` kept the original in
    its closure, so ``Config()`` got the original's value while status said applied."""
    mods.load("lib", LIB)
    target = mods.name("cfg.default_backend")
    mods.write("cfg", DATACLASS)
    registry.register(target, lambda: "rdna3", HookType.REPLACE)
    registry.apply_hooks()
    cfg = sys.modules[mods.name("cfg")]
    assert (cfg.Config().backend, cfg.Config().fallback) == ("rdna3", "rdna3")
    (applied,) = registry.applied_targets()
    labels = {label for _, label in applied.propagated_to}
    fields = {"Config.backend default_factory", "Config.fallback default_factory"}
    assert fields < labels and len(labels) == 4  # and one closure cell of __init__ per field
    assert all(label.startswith("Config.__init__() ") for label in labels - fields)
    registry.unapply()
    assert (cfg.Config().backend, cfg.Config().fallback) == ("generic", "generic")
    fields = cfg.Config.__dataclass_fields__
    assert fields["backend"].default_factory is cfg.default_backend


PROPERTIES = """
import functools

from PKG.lib import get_rope


def _set(self, value):
    self.set_to = value


class Engine:
    rope = property(get_rope, _set, doc="the rope")
    cached = functools.cached_property(get_rope)
"""


def test_a_property_or_cached_property_whose_getter_is_an_original_is_rebound_exactly(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``rope = property(get_rope)``: every ``engine.rope`` called the original while status
    said applied.  The property keeps its setter and doc; undo puts back the very objects."""
    lib = mods.load("lib", LIB)
    eng = mods.load("eng", PROPERTIES)
    before = dict(vars(eng.Engine))
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks()
    engine = eng.Engine()
    assert engine.rope == ("hooked", "rope", engine) == engine.cached
    engine.rope = 3
    assert engine.set_to == 3 and eng.Engine.rope.__doc__ == "the rope"
    registry.unapply()
    assert (
        vars(eng.Engine)["rope"] is before["rope"]
        and vars(eng.Engine)["cached"] is before["cached"]
    )
    fresh = eng.Engine()
    assert fresh.rope == ("rope", fresh) == fresh.cached and lib.get_rope(1) == ("rope", 1)


PARTIALMETHODS = """
import functools

from PKG.lib import get_rope


class Engine:
    def run(self, x, fast=False):
        return ("run", x, fast)

    run_fast = functools.partialmethod(run, fast=True)
    rope = functools.partialmethod(get_rope)
"""


def test_a_partialmethod_of_an_original_is_rebound_with_its_arguments(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``run_fast = partialmethod(run, fast=True)`` in the class: the sweep read through a
    ``staticmethod`` or a ``property`` but not this, so ``engine.run_fast(1)`` ran the original
    (named by the search for other holders: a worker stopped on a pattern it could rebind)."""
    mods.load("lib", LIB)
    eng = mods.load("eng", PARTIALMETHODS)
    before = dict(vars(eng.Engine))
    registry.register(mods.name("eng.Engine.run"), lambda r, *a, **k: ("hooked", *r))
    registry.register(mods.name("lib.get_rope"), lambda r, x: ("hooked", *r))
    registry.apply_hooks()
    engine = eng.Engine()
    assert engine.run_fast(1) == ("hooked", "run", 1, True)
    assert engine.rope() == ("hooked", "rope", engine)
    assert {row.state for row in registry.status()} == {"applied"}
    assert registry.stale_holders() == []
    registry.unapply()
    assert all(vars(eng.Engine)[name] is before[name] for name in ("run_fast", "rope"))
    assert engine.run_fast(2) == ("run", 2, True) and engine.rope() == ("rope", engine)


# A module that puts a wrapper in its own place in sys.modules, as torch's own
# ``torch.backends.cudnn`` (and ``mkldnn``, ``opt_einsum``, ...) ends.
STANDS_IN = """
import sys
import types

def is_available():
    return False

def pick():  # the module's own code calls the target through its real globals
    return "cudnn" if is_available() else "native"

TABLE = {"available": is_available}
CHECK = is_available

class _Wrapper(types.ModuleType):
    def __init__(self, real, name):
        super().__init__(name)
        self.real = real

    def __getattr__(self, attr):
        return getattr(self.real, attr)

sys.modules[__name__] = _Wrapper(sys.modules[__name__], __name__)
"""


def test_a_module_that_stands_a_wrapper_in_its_place_calls_the_hook_from_its_own_code(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """The target was patched on the wrapper only: ``flags.is_available()`` ran the hook, but
    the module's own functions read the real module's globals, which no ``sys.modules`` entry
    holds, so ``pick()`` and the module's table ran the original while status() said applied."""
    flags = mods.load("flags", STANDS_IN)
    real = vars(flags.real)
    original = real["is_available"]
    registry.register(mods.name("flags.is_available"), lambda *a: True, HookType.REPLACE)
    registry.apply_hooks()
    assert flags.is_available() is True and flags.pick() == "cudnn"
    assert flags.TABLE["available"]() is True and flags.CHECK() is True
    assert {row.state for row in registry.status()} == {"applied"}
    assert registry.stale_holders() == []
    registry.unapply()
    assert flags.pick() == "native" and "is_available" not in vars(flags)
    assert real["is_available"] is original and flags.TABLE["available"] is original
    assert flags.CHECK is original


def test_a_stood_in_modules_globals_roll_back_with_a_failed_apply(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    flags = mods.load("flags", STANDS_IN)
    original = vars(flags.real)["is_available"]
    registry.register(mods.name("flags.is_available"), lambda *a: True, HookType.REPLACE)
    registry.register(mods.name("flags.no_such_function"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert flags.pick() == "native" and vars(flags.real)["is_available"] is original


# Classes in such a module: the module's own code builds the class it finds in its real
# globals.  ``Plain`` defines no function (no ``__globals__`` to reach them through).
STANDS_IN_CLASSES = """
import sys
import types

class Conv:
    def run(self):
        return "orig"

class Plain:
    kind = "orig"

ALIAS = Conv

def make():
    return Conv().run(), ALIAS().run(), Plain.kind

class _Wrapper(types.ModuleType):
    def __init__(self, real, name):
        super().__init__(name)
        self.real = real

    def __getattr__(self, attr):
        return getattr(self.real, attr)

sys.modules[__name__] = _Wrapper(sys.modules[__name__], __name__)
"""

# A wrapper that keeps the real module out of its own attributes (in a closure).
HIDES_THE_MODULE = """
import sys
import types

class Plain:
    kind = "orig"

def make():
    return Plain.kind

def _reader(real):
    def __getattr__(self, attr):
        return getattr(real, attr)
    return __getattr__

class _Wrapper(types.ModuleType):
    __getattr__ = _reader(sys.modules[__name__])

sys.modules[__name__] = _Wrapper(__name__)
"""


def test_a_class_replaced_in_a_module_that_stands_a_wrapper_in_its_place_is_the_one_it_builds(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A class has no ``__globals__``: the REPLACE was set on the wrapper only, while the
    module's own code (``make()``) and its alias built the original class, status() applied."""
    flags = mods.load("flags", STANDS_IN_CLASSES)
    real = vars(flags.real)
    conv, plain = real["Conv"], real["Plain"]
    mine = type("Mine", (conv,), {"run": lambda self: "mine"})
    registry.register(mods.name("flags.Conv"), mine, HookType.REPLACE)
    other = type("P", (plain,), {"kind": "mine"})
    registry.register(mods.name("flags.Plain"), other, HookType.REPLACE)
    registry.apply_hooks()
    assert flags.make() == ("mine", "mine", "mine")
    assert {row.state for row in registry.status()} == {"applied"}
    assert registry.stale_holders() == []
    registry.unapply()
    assert flags.make() == ("orig", "orig", "orig")
    assert (real["Conv"], real["ALIAS"], real["Plain"]) == (conv, conv, plain)
    assert "Conv" not in vars(flags) and "Plain" not in vars(flags)


def test_a_class_of_no_functions_is_found_through_the_wrappers_own_module_attribute(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    flags = mods.load("flags", STANDS_IN_CLASSES)
    plain = vars(flags.real)["Plain"]
    registry.register(mods.name("flags.Plain"), type("P", (plain,), {"kind": "mine"}), "replace")
    registry.apply_hooks()
    assert flags.make()[2] == "mine"
    registry.unapply()
    assert flags.make()[2] == "orig" and vars(flags.real)["Plain"] is plain


def test_a_class_replaced_behind_a_wrapper_that_hides_its_module_is_found_by_reference(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    flags = mods.load("hidden", HIDES_THE_MODULE)
    plain = flags.Plain
    mine = type("P", (plain,), {"kind": "mine"})
    registry.register(mods.name("hidden.Plain"), mine, HookType.REPLACE)
    registry.apply_hooks()
    assert flags.make() == "mine" and registry.stale_holders() == []
    registry.unapply()
    assert flags.make() == "orig" and flags.Plain is plain


def test_a_method_of_a_class_in_a_stood_in_module_and_a_failed_class_replace(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Controls: a method target patches the class object the real module shares; a class
    REPLACE rolled back with a failed apply leaves the real module's global as it was."""
    flags = mods.load("flags", STANDS_IN_CLASSES)
    conv = vars(flags.real)["Conv"]
    registry.register(mods.name("flags.Conv.run"), lambda r, *a: "hooked", HookType.AFTER)
    registry.apply_hooks()
    assert flags.make()[:2] == ("hooked", "hooked") and vars(flags.real)["Conv"] is conv
    registry.unapply()
    registry.register(mods.name("flags.Conv"), type("Mine", (conv,), {}), HookType.REPLACE)
    registry.register(mods.name("flags.no_such_class"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert vars(flags.real)["Conv"] is conv and "Conv" not in vars(flags)


@pytest.mark.needs_torch
def test_torch_backends_mkldnn_verbose_replaced_is_the_real_modules_too(
    registry: type[HookRegistry],
) -> None:
    import torch.backends.mkldnn as mkldnn

    original = mkldnn.verbose
    mine = type("verbose", (original,), {})
    registry.register("torch.backends.mkldnn.verbose", mine, HookType.REPLACE)
    registry.apply_hooks()
    assert vars(mkldnn.m)["verbose"] is mine is mkldnn.verbose
    registry.unapply()
    assert vars(mkldnn.m)["verbose"] is original is mkldnn.verbose


@pytest.mark.needs_torch
def test_torch_backends_cudnn_calls_a_hooked_is_available_from_its_own_functions(
    registry: type[HookRegistry],
) -> None:
    """``torch.backends.cudnn`` replaces itself in ``sys.modules`` with a ``CudnnModule``:
    a platform plugin's hook on ``is_available`` ran for ``cudnn.is_available()`` only, never
    for ``cudnn.flags()`` or ``set_flags()``, which call it from the real module."""
    import torch.backends.cudnn as cudnn

    calls: list[bool] = []
    original = cudnn.is_available
    registry.register("torch.backends.cudnn.is_available", lambda r: calls.append(r))
    registry.apply_hooks()
    with cudnn.flags(enabled=cudnn.enabled):
        pass
    assert calls, "cudnn.flags() ran the original is_available"
    registry.unapply()
    calls.clear()
    with cudnn.flags(enabled=cudnn.enabled):
        pass
    assert calls == [] and cudnn.is_available is original


# A framework base (another package) whose ``__init_subclass__`` wraps each inherited public
# method into the subclass's own __dict__, as tracing and profiling frameworks do.
TRACING = """
import functools

def traced(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

class Traced:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for klass in cls.__mro__[1:]:
            for name, value in list(vars(klass).items()):
                if callable(value) and not name.startswith("_") and name not in vars(cls):
                    setattr(cls, name, traced(value))
"""

# The target's module: the concrete class beside its base, made as the apply imports it
# (before the hooks); and overrides a decorator wraps, which call up.
TRACED_SCHED = """
from PKG.fw import Traced, traced

class Scheduler:
    def step(self):
        return "step"

class LocalGpuScheduler(Scheduler, Traced):
    pass

class CallsUp(Scheduler):
    @traced
    def step(self):
        return super().step() + "+up"

class CallsThroughTheClass(Scheduler):
    @traced
    def step(self):
        return Scheduler.step(self) + "+cls"
"""


def test_a_wrapper_of_the_original_a_framework_put_in_a_subclass_is_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``__init_subclass__`` set ``LocalGpuScheduler.step = traced(Scheduler.step)`` before the
    hooks: its instances ran the original while ``bypassing()`` said nothing, since the
    wrapper's ``__wrapped__`` is the original, taken for spawnkit's own chain."""
    fw = mods.load("fw", TRACING)
    target = mods.name("sched.Scheduler.step")
    registry.register(target, lambda r, s: r + "!")
    mods.write("sched", TRACED_SCHED)
    registry.apply_hooks()
    sched = sys.modules[mods.name("sched")]
    assert sched.LocalGpuScheduler().step() == "step"  # the hook never runs there
    assert sched.CallsUp().step() == "step!+up"
    assert sched.CallsThroughTheClass().step() == "step!+cls"
    assert registry.bypassing() == {target: [f"{sched.__name__}.LocalGpuScheduler.step"]}
    (row,) = registry.status()
    assert row.state == "applied" and "a wrapper of the original step" in row.reason
    _, reason, fix = registry._bypass_report()[target]
    assert "LocalGpuScheduler.step" in reason and "CallsUp" not in reason
    assert "define the subclass after the hooks are applied" in fix

    class Later(sched.Scheduler, fw.Traced):  # made after the hooks: wraps the chain
        pass

    assert Later().step() == "step!"
    assert registry.bypassing() == {target: [f"{sched.__name__}.LocalGpuScheduler.step"]}


def test_a_framework_wrapper_its_subclasses_reach_is_still_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Control: a wrapper holder with subclasses is named where one of them runs its wrapper,
    by wrapping it again (``__init_subclass__`` on ``DeeperA``) or by ``super().step()``."""
    mods.load("fw", TRACING)
    target = mods.name("sched.Scheduler.step")
    registry.register(target, lambda r, s: r + "!")
    mods.write("sched", TRACED_SCHED.split("class LocalGpuScheduler")[0] + (
        "class GpuA(Scheduler, Traced):\n    pass\n\n"
        "class DeeperA(GpuA):\n    pass\n\n"
        "class GpuB(Scheduler, Traced):\n    pass\n\n"
        "class MineB(GpuB):\n    def step(self):\n        return super().step() + '+mine'\n"
    ))  # fmt: skip
    registry.apply_hooks()
    sched = sys.modules[mods.name("sched")]
    assert sched.DeeperA().step() == "step" and sched.MineB().step() == "step+mine"
    assert registry.bypassing() == {
        target: [f"{sched.__name__}.{c}.step" for c in ("DeeperA", "GpuA", "GpuB")]
    }


# matplotlib's pattern: ``Artist.__init_subclass__`` wraps the inherited ``draw`` of each
# direct subclass without its own (to stop rasterization), so bases between hold a wrapper of
# the original; which of them any class runs is what the subclasses below say.
RASTER = """
import functools

def _prevent_rasterization(draw):
    @functools.wraps(draw)
    def draw_wrapper(artist, *args):
        return draw(artist, *args)

    draw_wrapper._supports_rasterization = False
    return draw_wrapper

class Artist:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not hasattr(cls.draw, "_supports_rasterization"):
            cls.draw = _prevent_rasterization(cls.draw)

    def draw(self):
        return "artist"

class FigureBase(Artist):  # a base: each subclass draws itself
    pass

class Figure(FigureBase):
    def draw(self):
        return "figure"

class SubFigure(FigureBase):
    def draw(self):  # names ``draw``, of another object: no call up to FigureBase
        return self.parent.draw()

class ColorizingArtist(Artist):  # a base whose subclasses' calls up stop at Collection
    pass

class Collection(ColorizingArtist):
    def draw(self):
        return "collection"

class Sized(Collection):
    def draw(self):
        return super().draw() + "+sized"

class Lines(Collection):
    pass

class Text(Artist):  # a base a subclass inherits draw from: Annotation runs its wrapper
    pass

class Annotation(Text):
    pass

class Patch(Artist):  # a base a subclass calls up to: Rectangle runs its wrapper
    pass

class Rectangle(Patch):
    def draw(self):
        return super().draw() + "+rect"
"""


def test_a_framework_wrapper_of_the_original_no_class_runs_is_not_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``FigureBase`` and ``ColorizingArtist`` hold ``Artist.__init_subclass__``'s wrapper of
    the original ``draw``, but every subclass has its own that never reaches it: they were
    named, a conflict that stops a worker under ``<PREFIX>_HOOK_CONFLICTS=error``.  Control:
    ``Text`` (inherited by ``Annotation``) and ``Patch`` (``super().draw()`` of ``Rectangle``)
    are run, and named."""
    target = mods.name("raster.Artist.draw")
    registry.register(target, lambda r, s: r + "!")
    mods.write("raster", RASTER)
    registry.apply_hooks()
    raster = sys.modules[mods.name("raster")]
    assert raster.Artist().draw() == "artist!"
    assert raster.Annotation().draw() == "artist" and raster.Rectangle().draw() == "artist+rect"
    assert raster.Sized().draw() == "collection+sized" and raster.Figure().draw() == "figure"
    pkg = raster.__name__
    assert registry.bypassing() == {
        target: [f"{pkg}.{c}.draw" for c in ("Collection", "Figure", "Patch", "Text")]
    }  # Collection and Figure: overrides that never refer to draw, named before
    (row,) = registry.status()
    assert "FigureBase" not in row.reason and "ColorizingArtist" not in row.reason
    assert "wrapper of the original draw" in row.reason
    assert row.reason.endswith(f"skip the hook: {pkg}.Patch.draw, {pkg}.Text.draw")


def test_matplotlibs_rasterization_wrappers_on_its_bases_are_not_named(
    registry: type[HookRegistry],
) -> None:
    """The real one: ``FigureBase.draw`` and ``ColorizingArtist.draw`` are wrappers no
    matplotlib class runs.  Control: ``Collection.draw`` (never calls up) is still named."""
    pytest.importorskip("matplotlib")
    import matplotlib.collections
    import matplotlib.figure
    import matplotlib.image

    base = matplotlib.figure.FigureBase
    assert vars(base)["draw"].__wrapped__ is vars(matplotlib.artist.Artist)["draw"]
    registry.register("matplotlib.artist.Artist.draw", lambda r, *a, **k: r)
    registry.apply_hooks()
    (names,) = registry.bypassing().values()
    assert "matplotlib.figure.FigureBase.draw" not in names
    assert not [n for n in names if n.endswith("ColorizingArtist.draw")]
    assert "matplotlib.collections.Collection.draw" in names


_TRACED_APP = {
    "fw": TRACING,
    "sched": TRACED_SCHED.replace("PKG", "{pkg}").split("class CallsUp")[0],
    "entry": """
def main():
    from {pkg}.sched import LocalGpuScheduler, Scheduler
    return Scheduler().step(), LocalGpuScheduler().step()
""",
    "plugin": """
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.sched.Scheduler.step", lambda result, self: result + "!"
    )
""",
}


def test_a_worker_names_a_framework_wrapper_of_the_original_and_refuses_it_on_error(
    tmp_path: Path,
) -> None:
    app = write_app(tmp_path, "trc", LAUNCH + MAIN, {"p": "plugin:register"}, _TRACED_APP)
    proc = run_script(app.script, "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('step!', 'step')]"
    (line,) = warned(proc, "HookConflictWarning")
    assert f"{app.pkg}.sched.LocalGpuScheduler.step" in line
    assert "Fix: hook the subclass's own name" in proc.stderr
    refused = run_script(
        app.script, "spawn", env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"}
    )
    assert refused.returncode != 0
    assert "HookConflictError" in refused.stderr and "resolve_entry" in refused.stderr
    assert f"{app.pkg}.sched.LocalGpuScheduler.step" in refused.stderr


# transformers' ``copy_func``: a new function of the same code, globals and closure, to give a
# subclass its own docstring; ``auto`` runs it on the installed chain (the package imports it
# after ``ops``, as the apply imports ``ops``).
CHAIN_COPIES = {
    "util": """
import functools
import types

def copy_func(f):
    g = types.FunctionType(f.__code__, f.__globals__, name=f.__name__,
                           argdefs=f.__defaults__, closure=f.__closure__)
    g = functools.update_wrapper(g, f)
    g.__kwdefaults__ = f.__kwdefaults__
    return g
""",
    "eng.ops": """
class Base:
    @classmethod
    def from_config(cls, config):
        return cls.__name__

# another holder of the original, rebound by the sweep (which runs only where one is)
FACTORIES = {"base": Base.__dict__["from_config"].__func__}
""",
    "eng.auto": """
from PKG.eng.ops import Base
from PKG.util import copy_func

class AutoModel(Base):
    pass

_f = copy_func(Base.__dict__["from_config"].__func__)
_f.__doc__ = "AutoModel's own docs"
AutoModel.from_config = classmethod(_f)
""",
    "eng.__init__": "from PKG.eng import ops, auto\n",
}


def test_a_copy_of_an_installed_chain_is_no_stale_holder(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``_f = copy_func(<the chain>)`` runs the hooks (the chain's code, its closure), yet was
    named ``_f() closure (closure variable)`` holding the original: the hook ``partial``, and
    a worker stopped with ``ImportGuardError``."""
    for short, source in CHAIN_COPIES.items():
        mods.write(short, source)
    target = mods.name("eng.ops.Base.from_config")
    registry.register(target, lambda r, cls, config: r + "!")
    registry.apply_hooks()
    auto, ops = sys.modules[mods.name("eng.auto")], sys.modules[mods.name("eng.ops")]
    assert auto.AutoModel.from_config(1) == "AutoModel!"
    assert ops.FACTORIES["base"](ops.Base, 1) == "Base!"
    assert [(row.state, row.reason) for row in registry.status()] == [("applied", "")]
    assert registry.stale_holders() == [] and registry.bypassing() == {}


_COPIES_APP = {
    **{  # formatted with {pkg}: the sources' own braces doubled
        k: v.replace("{", "{{").replace("}", "}}").replace("PKG", "{pkg}")
        for k, v in CHAIN_COPIES.items()
    },
    "entry": """
def main():
    from {pkg}.eng.auto import AutoModel
    from {pkg}.eng.ops import Base
    return Base.from_config(1), AutoModel.from_config(1)
""",
    "plugin": """
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.eng.ops.Base.from_config", lambda result, cls, config: result + "!"
    )
""",
}


def test_a_worker_runs_with_a_copy_of_an_installed_chain(tmp_path: Path) -> None:
    app = write_app(tmp_path, "cpy", LAUNCH + MAIN, {"p": "plugin:register"}, _COPIES_APP)
    proc = run_script(app.script, "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('Base!', 'AutoModel!')]"
    assert "ImportGuard" not in proc.stderr, proc.stderr
