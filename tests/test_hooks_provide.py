"""``provide_module``: a module placed where one is missing, journaled and reported."""

from __future__ import annotations

import sys
import types
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, MAIN, guard_stops_then_warns, run_script, write_app
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


def test_an_installed_module_is_never_imported_to_check_and_the_reason_says_so(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A CDNA-only module installed on an RDNA machine raises as it imports: ``status()``
    says it was found where, and not imported to see, and how to stand in for it."""
    name = mods.write("cdna", "raise ImportError('libaiter_cdna.so: gfx942 only')\n")
    path = mods.root / mods.pkg / "cdna.py"
    registry.provide_module(name, types.ModuleType("stand_in"))
    registry.apply_hooks()
    assert name not in sys.modules  # nothing imported it
    (row,) = registry.status()
    assert row.state == "skipped"
    assert f"is installed ({path})" in row.reason
    assert "only_if_missing=False" in row.reason


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


_QUANT = """
try:
    from {missing}.ops.gemm import fused
    HAS_GEMM = True
except ImportError:
    fused = None
    HAS_GEMM = False
"""

_PLUGIN = """
import types
{top}
from spawnkit.namespace import get_namespace

def _stub(name):
    module = types.ModuleType(name)
    module.fused = lambda: "stub"
    return module

def register():
    get_namespace({{tag!r}}).hooks.provide_module("{missing}.ops.gemm", factory=_stub)
"""

_ENTRY = """
def main():
    from {{pkg}} import quant
    return quant.HAS_GEMM
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_module_an_import_missed_before_it_was_provided_stops_the_worker(
    tmp_path: Path, method: str
) -> None:
    """The plugin imports engine code at its top (as it loads, before any module is
    provided), whose ``try: from aiter... except ImportError: HAS_GEMM = False`` took the
    fallback for the whole worker, while ``status()`` said provided."""
    missing = f"aiter_{uuid.uuid4().hex[:8]}"
    top = "from {pkg} import quant  # engine code, at the plugin's top"
    modules = {
        "quant": _QUANT.format(missing=missing).replace("{", "{{").replace("}", "}}"),
        "plugin": _PLUGIN.format(top=top, missing=missing),
        "entry": _ENTRY.format(),
    }
    app = write_app(tmp_path, "prov", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    stopped, results, warned_text = guard_stops_then_warns(app, method)
    assert "provide_module() placed when the hooks were applied" in warned_text
    assert f"'{missing}.ops.gemm': tried at " in stopped
    assert f"{app.pkg}/quant.py:3" in stopped.replace("\\", "/")
    assert "import engine code inside the plugin's register()" in stopped
    assert results == [False]  # what warn runs with: the fallback taken


def test_a_module_provided_before_any_import_asked_for_it_is_used(tmp_path: Path) -> None:
    missing = f"aiter_{uuid.uuid4().hex[:8]}"
    modules = {
        "quant": _QUANT.format(missing=missing).replace("{", "{{").replace("}", "}}"),
        "plugin": _PLUGIN.format(top="", missing=missing),
        "entry": _ENTRY.format(),
    }
    app = write_app(tmp_path, "prov", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    done = run_script(app.script, "spawn")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[True]"
