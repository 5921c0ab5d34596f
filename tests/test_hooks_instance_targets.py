"""Targets owned by a module-level instance (a platform singleton): patched on that instance.

Before, ``pkg.platforms.current_platform.is_cuda`` was refused as "not a
class or module", so a plugin that wanted to change what the current
platform answers had to patch the instance by hand, outside the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError, HookTargetError
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

PLATFORMS = """
class CudaPlatform:
    def __init__(self):
        self.calls = 0

    def is_cuda(self):
        self.calls += 1
        return True

    def device_name(self, index=0):
        return f"cuda:{index}"


class Slotted:
    __slots__ = ()

    def is_cuda(self):
        return True


class Holder:
    inner = CudaPlatform()


current_platform = CudaPlatform()
slotted = Slotted()
holder = Holder()
other = CudaPlatform()
"""


def test_a_module_level_instance_attribute_is_patched_on_that_instance_and_undone(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    plats = mods.load("platforms", PLATFORMS)
    current = plats.current_platform
    registry.register(mods.name("platforms.current_platform.is_cuda"), lambda: False, "REPLACE")
    registry.register(
        f"{mods.pkg}.platforms:current_platform.device_name",
        lambda original, index=0: original(index).upper(),
        HookType.AROUND,
    )
    registry.apply_hooks()
    assert current.is_cuda() is False
    assert current.device_name(1) == "CUDA:1"  # the original is the bound method: no self
    assert plats.other.is_cuda() is True  # only that instance, not its class
    assert plats.CudaPlatform.is_cuda is vars(plats.CudaPlatform)["is_cuda"]
    applied = {t.target: t for t in registry.applied_targets()}
    target = mods.name("platforms.current_platform.is_cuda")
    assert applied[target].kind == "instance attribute"
    assert registry.is_hook_applied(target, applied[target].hooks[0].hook)
    registry.unapply()
    assert "is_cuda" not in vars(current) and "device_name" not in vars(current)
    assert current.is_cuda() is True and current.calls == 1


def test_an_instance_attribute_it_had_itself_is_put_back_exactly(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    plats = mods.load("platforms", PLATFORMS)
    current = plats.current_platform
    own = current.is_cuda = lambda: "own"
    registry.register(mods.name("platforms.current_platform.is_cuda"), lambda r: r + "!")
    registry.apply_hooks()
    assert current.is_cuda() == "own!"
    registry.unapply()
    assert vars(current)["is_cuda"] is own


def test_instance_targets_roll_back_with_a_failed_apply(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    plats = mods.load("platforms", PLATFORMS)
    registry.register(mods.name("platforms.current_platform.is_cuda"), lambda: False, "REPLACE")
    registry.register(mods.name("platforms.no_such_thing"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert "is_cuda" not in vars(plats.current_platform)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("platforms.slotted.is_cuda", "without a __dict__"),
        ("platforms.holder.inner.is_cuda", "not a module-level object"),
        ("platforms.Holder.inner.is_cuda", "not a module-level object"),
        ("platforms.current_platform.calls", "only callables"),
        ("platforms.current_platform.nothere", "has no attribute 'nothere'"),
    ],
)
def test_instances_that_cannot_own_a_hook_are_refused_with_the_fix(
    mods: Modules, registry: type[HookRegistry], target: str, says: str
) -> None:
    mods.load("platforms", PLATFORMS)
    registry.register(mods.name(target), lambda: False, "REPLACE")
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    cause = info.value.__cause__
    assert isinstance(cause, HookTargetError) and says in str(cause), str(cause)
