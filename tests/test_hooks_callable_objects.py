"""A hook target that is a callable object, not a function: its interface survives the hook.

A hook puts a function in the target's place.  For an ``@lru_cache`` function that lost
``cache_clear()``/``cache_info()`` (the engine's ``is_hip.cache_clear()`` became an
AttributeError), and for an object callers also subscript (a triton kernel:
``kernel[grid](...)``) every launch raised TypeError once the engine reached it, even when a
plugin REPLACEd the kernel with another kernel; ``status()`` said applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

CACHED = """
import functools


@functools.lru_cache(maxsize=None)
def is_hip():
    return False


@functools.cache
def device_count():
    return 1


scaled = functools.partial(pow, 2)
"""

KERNELS = """
class Kernel:
    '''A triton JITFunction's shape: called, and subscripted to launch.'''

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def __getitem__(self, grid):
        return lambda *args: ("launched", grid, self.fn(*args))

    def warmup(self):
        return "warm"


def _add(x):
    return x + 1


def _mul(x):
    return x * 10


add_kernel = Kernel(_add)
mul_kernel = Kernel(_mul)
"""


def test_a_cached_function_keeps_cache_clear_and_cache_info(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    cached = mods.load("cached", CACHED)
    original = cached.device_count
    registry.register(mods.name("cached.is_hip"), lambda: True, HookType.REPLACE)
    registry.register(mods.name("cached.device_count"), lambda result: result + 1)
    registry.register(mods.name("cached.scaled"), lambda result, x: result)
    registry.apply_hooks()
    assert cached.is_hip() is True and cached.device_count() == 2
    assert cached.device_count.cache_info().currsize == 1  # the original's cache, behind it
    cached.device_count.cache_clear()
    assert original.cache_info().currsize == 0
    cached.is_hip.cache_clear()  # the engine's own call: no AttributeError
    assert (cached.scaled.func, cached.scaled.args) == (pow, (2,))
    assert all(row.state == "applied" for row in registry.status())


def test_a_kernel_replaced_by_a_kernel_is_installed_as_it_is(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    kernels = mods.load("kernels", KERNELS)
    original = kernels.add_kernel
    registry.register(
        mods.name("kernels.add_kernel"), f"{mods.pkg}.kernels:mul_kernel", HookType.REPLACE
    )
    registry.apply_hooks()
    assert kernels.add_kernel is kernels.mul_kernel
    assert kernels.add_kernel[8](1) == ("launched", 8, 10)
    registry.unapply()
    assert kernels.add_kernel is original and kernels.add_kernel[8](1) == ("launched", 8, 2)


@pytest.mark.parametrize(
    ("hook", "hook_type"),
    [
        (lambda original_fn, *a: original_fn(*a), HookType.AROUND),
        (lambda *a: None, HookType.BEFORE),
        (lambda x: x, HookType.REPLACE),  # a function where a kernel is launched
    ],
    ids=["around", "before", "replace-by-function"],
)
def test_a_hook_that_would_put_a_function_where_a_kernel_is_launched_is_refused(
    mods: Modules, registry: type[HookRegistry], hook: object, hook_type: HookType
) -> None:
    kernels = mods.load("kernels", KERNELS)
    original = kernels.add_kernel
    registry.register(mods.name("kernels.add_kernel"), hook, hook_type)  # type: ignore[arg-type]
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert "the target is a Kernel object that callers also use as obj[key]" in text
    assert "Hook the function it runs instead, or REPLACE it with an object of its kind" in text
    assert kernels.add_kernel is original  # nothing half-patched
