"""``provide_module``: a module placed where one is missing, journaled and reported."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError, HookRegistrationError
from spawnkit.hooks import HookRegistry, HookSource

if TYPE_CHECKING:
    from _hooks_support import Modules

SRC = HookSource("rdna3", "rdna3-shims", "0.2")


def _gemm_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.gemm = lambda a, b: "fallback"  # type: ignore[attr-defined]
    return module


def test_missing_module_and_parents_are_provided_then_removed(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    name = f"aiter_{mods.pkg}.ops.triton.gemm"
    registry.provide_module(name, factory=_gemm_module, source=SRC)
    assert registry.status()[0].state == "pending"
    registry.apply_hooks()
    module = sys.modules[name]
    assert module.gemm(1, 2) == "fallback"
    # the importer's statement works, through the created parents
    engine = mods.load("engine", f"from {name} import gemm\n")
    assert engine.gemm(1, 2) == "fallback"
    assert sys.modules[f"aiter_{mods.pkg}.ops"].triton.gemm is module
    (row,) = registry.status()
    assert (row.target, row.hook_type, row.state) == (name, "PROVIDE", "provided")
    assert "is not installed" in row.reason and f"aiter_{mods.pkg}.ops.triton" in row.reason
    assert str(row.source) == str(SRC)
    registry.unapply()
    assert not [n for n in sys.modules if n.startswith(f"aiter_{mods.pkg}")]


def test_installed_module_is_left_alone(mods: Modules, registry: type[HookRegistry]) -> None:
    real = mods.load("real", "X = 1\n")
    registry.provide_module(mods.name("real"), types.ModuleType("stand_in"))
    registry.apply_hooks()
    assert sys.modules[mods.name("real")] is real
    (row,) = registry.status()
    assert row.state == "skipped" and "is installed" in row.reason


def test_installed_but_not_imported_module_is_left_alone(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("real", "X = 1\n")
    registry.provide_module(mods.name("real"), types.ModuleType("stand_in"))
    registry.apply_hooks()
    assert mods.load("real").X == 1


def test_only_if_missing_false_replaces_and_says_so(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    real = mods.load("real", "X = 1\n")
    stand_in = types.ModuleType(mods.name("real"))
    registry.provide_module(mods.name("real"), stand_in, only_if_missing=False)
    registry.apply_hooks()
    assert sys.modules[mods.name("real")] is stand_in
    assert sys.modules[mods.pkg].real is stand_in
    (row,) = registry.status()
    assert row.state == "provided" and "replaced the installed module" in row.reason
    registry.unapply()
    assert sys.modules[mods.name("real")] is real and sys.modules[mods.pkg].real is real


def test_hooks_can_target_a_provided_module(mods: Modules, registry: type[HookRegistry]) -> None:
    name = f"aiter_{mods.pkg}.fused"
    registry.provide_module(name, factory=_gemm_module)
    registry.register(f"{name}.gemm", lambda r, a, b: r + "+hooked")
    registry.apply_hooks()
    assert sys.modules[name].gemm(1, 2) == "fallback+hooked"


def test_strict_failure_takes_provided_modules_back(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    name = f"aiter_{mods.pkg}.ops"
    registry.provide_module(name)
    registry.register(mods.name("nothere.f"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert name not in sys.modules and f"aiter_{mods.pkg}" not in sys.modules


def test_factory_returning_a_non_module_fails_and_places_nothing(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    name = f"aiter_{mods.pkg}.ops"
    registry.provide_module(name, factory=lambda n: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(HookApplyError, match="not a module"):
        registry.apply_hooks()
    registry.apply_hooks(strict=False)
    assert f"aiter_{mods.pkg}" not in sys.modules  # the parent it created went back too
    assert registry.status()[0].state == "failed"


def test_bad_arguments_are_refused(registry: type[HookRegistry]) -> None:
    with pytest.raises(HookRegistrationError, match="not both"):
        registry.provide_module("a.b", types.ModuleType("a.b"), factory=_gemm_module)
    with pytest.raises(HookRegistrationError, match="module object"):
        registry.provide_module("a.b", "a.b")  # type: ignore[arg-type]
    with pytest.raises(HookRegistrationError, match="dotted module name"):
        registry.provide_module("not a name")
    registry.provide_module("a.b")
    with pytest.raises(HookRegistrationError, match="already provided"):
        registry.provide_module("a.b")


def test_isolated_removes_provided_modules(mods: Modules) -> None:
    name = f"aiter_{mods.pkg}.ops"
    with HookRegistry.isolated() as reg:
        reg.provide_module(name)
        reg.apply_hooks()
        assert name in sys.modules
    assert name not in sys.modules
