"""Stale ``from X import Y`` bindings: rebound, restored, hook modules spared."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

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
    original = lib.Engine
    registry.register(mods.name("lib.Engine"), plugin.FastEngine, HookType.REPLACE)
    registry.apply_hooks()
    assert user.Engine is plugin.FastEngine and user.Engine().run() == "fast run"
    assert plugin.Engine is original
    registry.unapply()
    assert user.Engine is original and lib.Engine is original


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


def test_method_targets_do_not_propagate(mods: Modules, registry: type[HookRegistry]) -> None:
    lib = mods.load("lib", LIB)
    raw = vars(lib.Engine)["run"]
    holder = mods.load("holder", "from PKG.lib import Engine\nrun = Engine.run\n")
    registry.register(mods.name("lib.Engine.run"), lambda r, s: r + "!")
    registry.apply_hooks()
    assert lib.Engine().run() == "run!"
    assert holder.run is raw  # a method alias in a module is not a from-import binding


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
