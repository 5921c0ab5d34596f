"""A function hook cannot reach a torch operator whose Python kernel is the original: it is said.

An engine registers a Python function as an operator's kernel as its module is imported (vLLM's
``direct_register_custom_op("unified_attention", unified_attention)``, ``Library.impl``); a
plugin hooks that function; a model calling ``torch.ops.<ns>.unified_attention`` ran the
kernel, the original, while ``status()`` said applied.  Real launchers, a real installed
plugin, spawned and warm workers; and the registry alone.
"""

from __future__ import annotations

import ast
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.errors import HookConflictWarning
from spawnkit.hooks import HookRegistry

if TYPE_CHECKING:
    from _hooks_support import Modules

pytestmark = pytest.mark.needs_torch

_LAYER = """
import torch
from torch.library import Library

LIB = Library("NS", "FRAGMENT")


def unified_attention(x: torch.Tensor) -> torch.Tensor:
    return x + 1


LIB.define("unified_attention(Tensor x) -> Tensor")
LIB.impl("unified_attention", unified_attention, "CPU")


def forward(x):
    return torch.ops.NS.unified_attention(x)
"""

_MAIN = """
if __name__ == "__main__":
    print([launch("layer:main", m, nprocs=1) for m in ("spawn", "forkserver")])
"""

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def times_100(result, x):
    return result * 100

def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.layer.unified_attention", times_100, HookType.AFTER
    )
"""


def _ns() -> str:
    return f"sk{uuid.uuid4().hex[:10]}"  # a torch library namespace is process-wide


@pytest.fixture
def app(tmp_path: Path):  # type: ignore[no-untyped-def]
    layer = _LAYER.replace("NS", _ns()).replace("{", "{{").replace("}", "}}")
    layer += (
        "\ndef main():\n    x = torch.ones(1)\n"
        "    return float(unified_attention(x)[0]), float(forward(x)[0])\n"
    )
    modules = {"layer": layer, "plugin": _PLUGIN}
    return write_app(tmp_path, "tops", LAUNCH + _MAIN, {"x100": "plugin:register"}, modules)


def test_the_kernel_is_named_in_spawned_and_warm_workers(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # direct call hooked, torch.ops call not: what the warning is about
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == [[(200.0, 2.0)]] * 2
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr  # one per worker: spawned, then warm
    for line in lines:
        assert f"target '{app.pkg}.layer.unified_attention'" in line
        assert ".unified_attention (CPU)" in line and "skip the hook" in line


def test_refused_with_hook_conflicts_error(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0
    assert "HookConflictError" in proc.stderr and "resolve_entry" in proc.stderr, proc.stderr


def test_the_registry_names_it_and_not_a_function_nothing_else_holds(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    ns = _ns()
    mods.write("layer", _LAYER.replace("NS", ns) + "\ndef plain(x):\n    return x\n")
    target = mods.name("layer.unified_attention")
    registry.register(target, lambda r, x: r * 100)
    registry.register(mods.name("layer.plain"), lambda r, x: r)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookConflictWarning)  # the registry alone: status only
        registry.apply_hooks()
    assert registry.bypassing() == {target: [f"torch.ops.{ns}.unified_attention (CPU)"]}
    rows = {s.target: s for s in registry.status()}
    assert rows[target].state == "applied" and "skip the hook" in rows[target].reason
    assert rows[mods.name("layer.plain")].reason == ""


def test_a_target_that_is_a_custom_op_is_named_with_its_own_fix(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """``@torch.library.custom_op`` makes the module attribute the operator itself: a hook on it
    runs for calls of the attribute, never for ``torch.ops`` calls."""
    ns = _ns()
    mods.write(
        "cop",
        f"import torch\n\n@torch.library.custom_op('{ns}::rms', mutates_args=())\n"
        "def rms(x: torch.Tensor) -> torch.Tensor:\n    return x + 1\n",
    )
    target = mods.name("cop.rms")
    registry.register(target, lambda r, x: r * 100)
    registry.apply_hooks()
    assert registry.bypassing() == {target: [f"torch.ops.{ns}.rms (a torch.library.custom_op)"]}
    (row,) = registry.status()
    assert "calls through torch.ops" in row.reason and "skip it" in row.reason
    report = registry._bypass_report()
    assert "register_kernel('<device>', fn)" in report[target][2]
