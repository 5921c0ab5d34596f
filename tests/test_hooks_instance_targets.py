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


MODEL = """
class Model:
    def __call__(self, x):
        return x + 1

    def __len__(self):
        return 3


model = Model()
"""


@pytest.mark.parametrize(("attr", "use"), [("__call__", "obj(...)"), ("__len__", "len(obj)")])
@pytest.mark.parametrize("optional", [False, True])
def test_a_special_method_of_an_instance_is_refused_python_looks_it_up_on_the_class(
    mods: Modules, registry: type[HookRegistry], attr: str, use: str, optional: bool
) -> None:
    """Patched on the instance, ``model(1)`` and ``len(model)`` skipped the hook (2, 3) while
    ``model.__call__(1)`` ran it and status() said applied."""
    m = mods.load("models", MODEL)
    target = mods.name(f"models.model.{attr}")
    registry.register(target, lambda *a: 99, "REPLACE", optional=optional)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    cause = info.value.__cause__
    assert isinstance(cause, HookTargetError) and cause.target == target
    text = str(cause)
    assert f"{attr} of the Model instance" in text and use in text, text
    assert f"'{mods.pkg}.models.Model.{attr}'" in text and "'self is model'" in text, text
    assert attr not in vars(m.model) and (m.model(1), len(m.model)) == (2, 3)  # nothing patched


def test_the_fix_it_names_hooks_every_instance_through_the_class(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("models", MODEL)
    other = m.Model()

    def only_that_one(original, self, x):
        return original(self, x) * (100 if self is m.model else 1)

    registry.register(mods.name("models.Model.__call__"), only_that_one, "AROUND")
    registry.apply_hooks()
    assert (m.model(1), other(1)) == (200, 2)
