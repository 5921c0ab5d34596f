"""Module-level code that calls a hook target sees the hook, in the modules ``apply_hooks()``
imports to patch.

Engine modules call targets as they are imported: ``_is_hip = is_hip()``, ``if is_npu():
KERNEL = ...``, ``DEFAULT = Scheduler()``.  ``apply_hooks()`` imported every target module
first and patched afterwards, so a target module that imported another target's module ran
that target's original: a platform plugin's ``is_hip`` REPLACE returned True from then on, but
the layer module had chosen its CUDA kernel, and ``status()`` said applied.  Now each target is
installed as its module finishes importing.  The registry here; real spawned and warm workers
with a real installed plugin at the end.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _hooks_support import IS_HIP
from _plugin_app import LAUNCH, run_script, write_app
from spawnkit.errors import HookApplyError
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

_LAYERS = """
from PKG.utils import is_hip

_is_hip = is_hip()
if is_hip():
    KERNEL = "hip kernel"
else:
    KERNEL = "cuda kernel"


def forward():
    return "hip" if _is_hip else "cuda"
"""


def _hip(*args: object) -> bool:
    return True


def _hip_world(mods: Modules, registry: type[HookRegistry], forward: object) -> None:
    """``utils`` and ``layers`` written, ``forward`` on ``layers.forward`` and the REPLACE
    of ``utils.is_hip`` registered."""
    mods.write("utils", IS_HIP)
    mods.write("layers", _LAYERS.replace("PKG", mods.pkg))
    registry.register(mods.name("layers.forward"), forward, HookType.AFTER)
    registry.register(mods.name("utils.is_hip"), _hip, HookType.REPLACE)


@pytest.mark.parametrize(
    ("utils", "imported"),
    [("utils", False), ("a_utils", False), ("utils", True)],  # its target sorts after, before
)
def test_a_target_module_computing_from_another_target_sees_its_hook(
    mods: Modules, registry: type[HookRegistry], utils: str, imported: bool
) -> None:
    mods.write(utils, IS_HIP)
    mods.write("layers", _LAYERS.replace("PKG.utils", f"PKG.{utils}").replace("PKG", mods.pkg))
    if imported:  # before the apply (a plugin imported it): installed before 'layers' runs
        mods.load(utils)
    registry.register(mods.name(f"{utils}.is_hip"), _hip, HookType.REPLACE)
    registry.register(mods.name("layers.forward"), lambda r: ("hooked", r), HookType.AFTER)
    registry.apply_hooks()
    layers = mods.load("layers")
    assert (layers._is_hip, layers.KERNEL, layers.forward()) == (
        True,
        "hip kernel",
        ("hooked", "hip"),
    )
    assert {s.state for s in registry.status()} == {"applied"}


def test_a_package_init_importing_the_caller_first_sees_the_hook(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Only ``sub.utils`` is a target; importing it runs ``sub/__init__``, which imports
    ``sub.layers``, which imports ``sub.utils`` and calls it before the package is done."""
    mods.write("sub.utils", IS_HIP)
    mods.write("sub.layers", _LAYERS.replace("PKG.utils", "PKG.sub.utils"))
    init = mods.root / mods.pkg / "sub" / "__init__.py"
    init.write_text(f"from {mods.pkg}.sub import layers\n")
    registry.register(mods.name("sub.utils.is_hip"), _hip, HookType.REPLACE)
    registry.apply_hooks()
    layers = mods.load("sub.layers")
    assert (layers._is_hip, layers.KERNEL) == (True, "hip kernel")


_MODELS = """
class Scheduler:
    @classmethod
    def default_limit(cls):
        return 8

    def step(self):
        return "step"
"""

_ENGINE = """
from PKG.models import Scheduler

LIMIT = Scheduler.default_limit()
FIRST = Scheduler().step()


def run():
    return LIMIT, FIRST
"""


def test_methods_called_at_module_level_run_their_hooks(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """'engine' sorts before 'models': the apply imports it first, and it brings 'models' in."""
    mods.write("models", _MODELS)
    mods.write("engine", _ENGINE)
    registry.register(mods.name("engine.run"), lambda r: r, HookType.AFTER)
    twice, louder = (lambda r, cls: 2 * r), (lambda r, self: r + "!")
    registry.register(mods.name("models.Scheduler.default_limit"), twice, HookType.AFTER)
    registry.register(mods.name("models.Scheduler.step"), louder, HookType.AFTER)
    registry.apply_hooks()
    assert mods.load("engine").run() == (16, "step!")


def test_a_strict_failure_rolls_back_what_was_installed_as_imported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    _hip_world(mods, registry, lambda r: r)
    mods.write("broken", "raise ImportError('libfoo.so: cannot open shared object file')\n")
    registry.register(mods.name("broken.f"), lambda r: r, HookType.AFTER)
    with pytest.raises(HookApplyError, match=r"libfoo\.so"):
        registry.apply_hooks()
    utils, layers = mods.load("utils"), mods.load("layers")
    assert utils.is_hip() is False and layers.is_hip() is False  # nothing left patched
    assert layers.forward.__module__ == mods.name("layers")
    states = {s.target.rpartition(".")[2]: s.state for s in registry.status()}
    assert states == {"forward": "pending", "is_hip": "pending", "f": "failed"}


def test_a_lenient_apply_keeps_the_targets_installed_as_imported(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    _hip_world(mods, registry, lambda r: ("hooked", r))
    registry.register(mods.name("utils.no_such_function"), lambda r: r, HookType.AFTER)
    registry.apply_hooks(strict=False)
    layers = mods.load("layers")
    assert (layers.KERNEL, layers.forward()) == ("hip kernel", ("hooked", "hip"))
    states = {s.target.rpartition(".")[2]: s.state for s in registry.status()}
    assert states == {"forward": "applied", "is_hip": "applied", "no_such_function": "failed"}


def test_each_imported_target_module_has_one_span(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    _hip_world(mods, registry, lambda r: r)
    mods.write("other", "def f():\n    return 1\n")
    registry.register(mods.name("other.f"), lambda r: r, HookType.AFTER)
    registry._take_import_spans()  # what earlier applies left
    registry.apply_hooks()
    spans = registry._take_import_spans()
    # 'utils' came in with 'layers': its import is inside that span, not one of its own
    assert [m for m, _, _ in spans] == [mods.name("layers"), mods.name("other")]
    assert all(begun <= end for _, begun, end in spans)
    assert spans[0][2] <= spans[1][1]
    assert registry._take_import_spans() == []


_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def register():
    hooks = get_namespace({tag!r}).hooks
    hooks.register("{pkg}.layers.forward", lambda r: ("hooked", r), HookType.AFTER)
    hooks.register("{pkg}.utils.is_hip", lambda: True, HookType.REPLACE)
"""

_ENTRY = """
from {pkg} import layers


def main():
    return layers._is_hip, layers.KERNEL, layers.forward()
"""

_MAIN = """
if __name__ == "__main__":
    print([launch("entry:main", m, nprocs=1) for m in ("spawn", "forkserver")])
"""


def test_spawned_and_warm_workers_compute_from_the_hooked_target(tmp_path: Path) -> None:
    modules = {
        "utils": IS_HIP,
        "layers": _LAYERS.replace("PKG", "{pkg}"),
        "entry": _ENTRY,
        "plugin": _PLUGIN,
    }
    app = write_app(tmp_path, "asimp", LAUNCH + _MAIN, {"p": "plugin:register"}, modules)
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert got == [[(True, "hip kernel", ("hooked", "hip"))]] * 2
