"""An ``lru_cache`` that answered from an original before the hooks: named, never silent.

``@lru_cache def is_flashinfer_available(): return is_cuda()`` (SGLang's utils) called by one
plugin's register function, before another plugin's REPLACE of ``is_cuda`` was applied: the
cache kept the original's answer for the whole worker (``is_cuda()`` False, the cached helper
True) while ``status()`` said applied.  A result cannot be rebound, and clearing a cache
could run again what it ran once, so the apply names it (``hooks/_caches.py``): a stale
holder, ``ImportGuardError`` in a worker, a warning under ``<PREFIX>_IMPORT_GUARD=warn``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _hooks_support import Modules
from _plugin_app import LAUNCH, MAIN, guard_stops_then_warns, write_app
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.hooks._stale import FILLED

_UTILS = """
import functools

def is_cuda():
    return True

@functools.lru_cache(maxsize=None)
def is_flashinfer_available():
    return is_cuda()

@functools.lru_cache(maxsize=None)
def never_called():
    return is_cuda()

@functools.cache
def device_count():
    return 1  # names no target
"""

_ENV = """
import functools

from PKG import utils
from PKG.utils import is_cuda

@functools.lru_cache(maxsize=None)
def through_module():
    return utils.is_cuda()

@functools.cache
def through_name(n):
    return is_cuda() and n
"""


def _filled(registry: type[HookRegistry]) -> set[tuple[str, str]]:
    return {(h["name"], h["target"]) for h in registry.stale_holders() if h["kind"] == FILLED}


def test_a_cache_filled_from_the_original_before_the_hooks_is_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    utils, env = mods.load("utils", _UTILS), mods.load("env", _ENV)
    assert utils.is_flashinfer_available() and env.through_module() and env.through_name(2)
    utils.device_count()
    target = mods.name("utils.is_cuda")
    registry.register(target, lambda: False, HookType.REPLACE)
    registry.apply_hooks()
    assert (utils.is_cuda(), utils.is_flashinfer_available()) == (False, True)  # what is named
    assert _filled(registry) == {
        ("is_flashinfer_available", target),
        ("through_module", target),
        ("through_name", target),
    }  # not the empty cache, nor the one that names no target
    assert [row.state for row in registry.status()] == ["partial"]
    registry.unapply()
    assert _filled(registry) == set()


def test_a_cache_filled_after_the_hook_is_in_place_is_not_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """The module is imported by the apply itself, and a module imported after the hook was
    installed fills the cache: its result is the hook's."""
    mods.write("utils", _UTILS)
    mods.write("later", "from PKG.utils import is_flashinfer_available as fi\nFI = fi()\n")
    mods.write("first", "import PKG.utils\nimport PKG.later\n\ndef go():\n    pass\n")
    registry.register(mods.name("utils.is_cuda"), lambda: False, HookType.REPLACE)
    registry.register(mods.name("first.go"), lambda r: r, HookType.AFTER)  # imported first
    registry.apply_hooks()
    later = mods.load("later")
    assert later.FI is False and _filled(registry) == set()
    assert sys.modules[mods.name("utils")].is_flashinfer_available() is False


_A_TRACER = """
def register():  # decides which hooks it needs from an engine helper, before any hook exists
    from {pkg}.utils import is_flashinfer_available
    if is_flashinfer_available():
        pass
"""

_B_PLATFORM = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def register():  # a device that is not CUDA: the gate answers False
    get_namespace({tag!r}).hooks.register("{pkg}.utils.is_cuda", lambda: False, HookType.REPLACE)
"""

_ENTRY = """
def main():
    from {pkg}.utils import is_cuda, is_flashinfer_available
    return is_cuda(), is_flashinfer_available()
"""


def test_a_workers_cache_filled_by_a_plugin_before_the_hooks_stops_it(tmp_path: Path) -> None:
    modules = {
        "utils": _UTILS,
        "entry": _ENTRY,
        "a_tracer": _A_TRACER,
        "b_platform": _B_PLATFORM,
    }
    plugins = {"a_tracer": "a_tracer:register", "b_platform": "b_platform:register"}
    app = write_app(tmp_path, "cache", LAUNCH + MAIN, plugins, modules)
    stopped, results, warned = guard_stops_then_warns(app, "spawn")
    assert f"{app.pkg}.utils.is_flashinfer_available ({FILLED})" in stopped
    assert "cache_clear()" in stopped and f"{app.pkg}.utils.is_cuda" in stopped
    assert results == [(False, True)]  # under warn: the cached answer is the original's
    assert "is_flashinfer_available" in warned
