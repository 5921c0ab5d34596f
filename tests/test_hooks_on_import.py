"""``on_import=True``: a hook waits for its module's first import instead of forcing it."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError
from spawnkit.hooks import HookRegistry, HookSource, HookType, _on_import

if TYPE_CHECKING:
    from _hooks_support import Modules

SRC = HookSource("diffusion-shims", "shim-dist", "1.0")


def _plus_one(result: int, *args: object) -> int:
    return result + 1


def test_apply_does_not_import_and_first_import_applies(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\n")
    mods.write("user", "from PKG.heavy import f\n")
    target = mods.name("heavy.f")
    registry.register(target, _plus_one, HookType.AFTER, on_import=True, source=SRC)
    assert registry.apply_hooks() == []
    assert mods.name("heavy") not in sys.modules
    (row,) = registry.status()
    assert row.state == "pending" and mods.name("heavy") in row.reason
    assert _on_import.installed()
    user = mods.load("user")  # imports heavy, whose first import applies the hook
    assert user.f(1) == 2  # the importer's `from heavy import f` bound the hooked function
    assert sys.modules[mods.name("heavy")].f(1) == 2
    (row,) = registry.status()
    assert row.state == "applied" and "first imported" in row.reason
    assert not _on_import.waiting()  # nothing pending
    assert mods.name("heavy") in _on_import.followed()  # patched: a reload patches it again
    assert registry.is_hook_applied(target, _plus_one)


def test_already_imported_is_applied_at_once(mods: Modules, registry: type[HookRegistry]) -> None:
    heavy = mods.load("heavy", "def f(x):\n    return x\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True)
    assert registry.apply_hooks() == [mods.name("heavy.f")]
    assert heavy.f(1) == 2
    assert not _on_import.waiting()


def test_dotted_target_waits_for_the_submodule_not_the_package(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("sub.inner", "class C:\n    def m(self):\n        return 1\n")
    registry.register(mods.name("sub.inner.C.m"), lambda r, s: r + 10, on_import=True)
    registry.apply_hooks()
    mods.load("sub")  # the package alone does not make the target resolvable
    assert registry.status()[0].state == "pending"
    inner = mods.load("sub.inner")
    assert inner.C().m() == 11
    assert registry.status()[0].state == "applied"


def test_unapply_removes_pending_hooks_and_the_finder(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True)
    registry.apply_hooks()
    assert _on_import.installed()
    registry.unapply()
    assert not _on_import.waiting()
    assert mods.name("heavy") not in _on_import.followed()
    assert mods.load("heavy").f(1) == 1  # nothing applied on import any more


def test_unapply_restores_a_target_applied_on_import(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\n")
    mods.write("user", "from PKG.heavy import f\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True)
    registry.apply_hooks()
    user = mods.load("user")
    assert user.f(1) == 2
    registry.unapply()
    assert user.f(1) == 1 and sys.modules[mods.name("heavy")].f(1) == 1


def test_strict_failure_raises_from_the_import_naming_plugin_hook_target(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\nclass K:\n    pass\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True, source=SRC)
    registry.register(mods.name("heavy.K"), _plus_one, on_import=True, source=SRC)  # not REPLACE
    registry.apply_hooks()
    with pytest.raises(HookApplyError) as info:
        mods.load("heavy")
    text = str(info.value)
    assert "first imported" in text and mods.name("heavy") in text
    assert "_plus_one" in text and "shim-dist" in text and mods.name("heavy.K") in text
    assert mods.name("heavy") not in sys.modules  # the import failed as a whole
    states = {r.target: r.state for r in registry.status()}
    assert states[mods.name("heavy.K")] == "failed"
    assert not _on_import.waiting()
    assert mods.name("heavy") not in _on_import.followed()


def test_lenient_failure_is_logged_with_traceback_and_the_rest_applied(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    mods.write("heavy", "def f(x):\n    return x\nclass K:\n    pass\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True, source=SRC)
    registry.register(mods.name("heavy.K"), _plus_one, on_import=True, source=SRC)
    registry.apply_hooks(strict=False)
    with caplog.at_level(logging.ERROR, logger="spawnkit.hooks"):
        heavy = mods.load("heavy")
    assert heavy.f(1) == 2
    (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert mods.name("heavy.K") in error.getMessage() and error.exc_info is not None
    states = {r.target: (r.state, r.reason) for r in registry.status()}
    assert states[mods.name("heavy.f")][0] == "applied"
    assert states[mods.name("heavy.K")][0] == "failed"
    assert "is a class" in states[mods.name("heavy.K")][1]


def test_an_eager_hook_on_the_same_target_imports_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True)
    registry.register(mods.name("heavy.f"), lambda r, x: r * 10)
    registry.apply_hooks()
    assert sys.modules[mods.name("heavy")].f(1) == 20
    assert {r.state for r in registry.status()} == {"applied"}


def test_discarding_the_plugin_of_a_pending_hook_stops_watching(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True, source=SRC)
    registry.apply_hooks()
    assert _on_import.installed()
    assert registry.discard_source(SRC) == 1
    assert not _on_import.waiting()
    assert mods.load("heavy").f(1) == 1


def test_module_imported_behind_the_finders_back_is_applied_by_the_next_call(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("heavy", "def f(x):\n    return x\n")
    registry.register(mods.name("heavy.f"), _plus_one, on_import=True)
    registry.apply_hooks()
    with registry.isolated():  # the outer state's watcher finds nothing to do meanwhile
        heavy = mods.load("heavy")
    assert heavy.f(1) == 1 and registry.status()[0].state == "pending"
    registry.apply_hooks()
    assert heavy.f(1) == 2 and registry.status()[0].state == "applied"
    assert not _on_import.waiting()


_LAYERS = {"layers.attention": "def forward(x):\n    return x\n"}


def test_an_on_import_target_its_imported_package_lacks_is_refused_at_once(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """``eng.layers.atention.forward`` (one slip off, or renamed by this engine version) with
    ``eng.layers`` already imported: no import can ever bring the module, and the hook waited
    'pending' for the whole run, never running.  Now it is resolved at once: strict, the
    missing target's error with its did-you-mean; optional, skipped with a warning."""
    mods.write("layers.attention", _LAYERS["layers.attention"])
    mods.load("layers")
    registry.register(mods.name("layers.atention.forward"), _plus_one, on_import=True)
    with pytest.raises(HookApplyError, match="Did you mean 'attention'"):
        registry.apply_hooks()
    registry.reset()
    registry.register(mods.name("layers.atention.forward"), _plus_one, on_import=True,
                      optional=True)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        registry.apply_hooks()
    (row,) = registry.status()
    assert row.state == "skipped" and "atention" in row.reason
    assert "'attention'" in caplog.text and not _on_import.waiting()


def test_an_on_import_target_its_package_turns_out_to_lack_fails_that_import(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """The package is imported later, by the engine: its import raises, naming the target."""
    mods.write("layers.attention", _LAYERS["layers.attention"])
    registry.register(mods.name("layers.atention.forward"), _plus_one, on_import=True)
    assert registry.apply_hooks() == [] and registry.status()[0].state == "pending"
    with pytest.raises(HookApplyError, match="Did you mean 'attention'"):
        mods.load("layers")


def test_an_on_import_target_that_may_still_come_keeps_waiting(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Controls: a submodule that exists but is not imported yet; a package with a module
    ``__getattr__`` (it may make anything); a subpackage not imported yet."""
    mods.write("layers.attention", _LAYERS["layers.attention"])
    mods.write("lazy.__init__", "def __getattr__(name):\n    raise AttributeError(name)\n")
    mods.write("deep.sub.mod", "def f(x):\n    return x\n")
    mods.load("layers")
    mods.load("lazy")
    mods.load("deep")
    for target in ("layers.attention.forward", "lazy.atention.forward", "deep.sub.mod.f"):
        registry.register(mods.name(target), _plus_one, on_import=True)
    assert registry.apply_hooks() == []
    assert {row.state for row in registry.status()} == {"pending"}
    assert mods.load("layers.attention").forward(1) == 2


@pytest.mark.parametrize("via", ["condition", "hook string"])
def test_an_on_import_target_first_imported_while_another_is_applied_is_applied(
    mods: Modules, registry: type[HookRegistry], via: str
) -> None:
    """A worker's first engine import is one on_import target (``kernels``); applying its hook
    imports another target's module (``common``) for the first time: the README's condition
    (``from eng.utils.common import is_hip`` inside it) or a ``'module:hook'`` whose module
    imports engine code.  That import's finder call found the registry busy and returned, so
    ``common``'s hooks waited, pending, for a first import that was over: a platform's
    ``is_hip`` REPLACE never ran, and the condition read the original and skipped its hook."""
    mods.write("common", "def is_hip():\n    return False\n\ndef name():\n    return 'cuda'\n")
    mods.write("kernels", "def can_use_fused():\n    return True\n")
    common = mods.name("common")
    mods.write("gate", f"import {common}\n\ndef is_hip():\n    return {common}.is_hip()\n")
    mods.write("plug", f"import {common}\n\ndef no():\n    return False\n")
    registry.register(f"{common}.is_hip", lambda: True, HookType.REPLACE, on_import=True)
    registry.register(f"{common}.name", lambda r: r + "+hip", HookType.AFTER, on_import=True)
    if via == "condition":

        def on_hip() -> bool:  # imports `gate`, which imports `common`, when first asked
            return bool(mods.load("gate").is_hip())

        shim = (lambda: False, {"condition": on_hip})
    else:
        shim = (f"{mods.name('plug')}:no", {})
    registry.register(
        mods.name("kernels.can_use_fused"), shim[0], HookType.REPLACE, on_import=True, **shim[1]
    )
    assert registry.apply_hooks() == []
    assert common not in sys.modules
    kernels = mods.load("kernels")  # the first import: applying its hook imports `common`
    assert sys.modules[common].is_hip() is True
    assert sys.modules[common].name() == "cuda+hip"
    assert kernels.can_use_fused() is False  # the condition saw the platform's is_hip
    assert {row.target: row.state for row in registry.status()} == dict.fromkeys(
        [f"{common}.is_hip", f"{common}.name", mods.name("kernels.can_use_fused")], "applied"
    )
    assert not _on_import.waiting()
