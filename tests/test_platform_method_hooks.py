"""A general plugin's hook on a method of the platform's class takes effect, unrefused.

The platform stage imports the platform's classes (spawnkit's built-in and interface, a
platform plugin's, its vendor's bases) before plugins load, by design.  A general plugin
hooking one of their methods (``CpuPlatform.get_device_name``, to report the real device
name; the rdna3 shim's platform gate) was an ``ImportGuardError`` in every worker, with a fix
that cannot apply ("import it after the hooks"), while the method, patched in place on its
class, reaches ``current_platform`` and every other instance.  What the stage already ran
(``init_backend()``, the constructor) is still refused: hooked, it never runs for the
instance in use.  Real launcher, real installed plugin, real spawned and warm workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, MAIN, run_script, write_app

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def named(result, *args, **kwargs):
    return "gfx1100 (" + str(result) + ")"

def register():
    get_namespace({tag!r}).hooks.register(
        "spawnkit.platforms.builtin.CpuPlatform.METHOD", named, HookType.AFTER
    )
"""

_ENTRY = """
def main():
    from spawnkit.platforms import current_platform
    return type(current_platform).__name__, current_platform.get_device_name()
"""


def _app(tmp_path: Path, method: str) -> tuple[Path, str]:
    modules = {"plugin": _PLUGIN.replace("METHOD", method), "entry": _ENTRY}
    app = write_app(tmp_path, "platm", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    return app.script, f"{app.tag.upper()}_PLATFORM"


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_a_hook_on_a_platform_method_runs_in_every_worker(tmp_path: Path, start: str) -> None:
    script, var = _app(tmp_path, "get_device_name")
    done = run_script(script, start, env={var: "cpu"})
    assert done.returncode == 0, done.stderr
    ((kind, name),) = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert kind == "CpuPlatform" and name.startswith("gfx1100 (")
    assert "ImportGuard" not in done.stderr


def test_a_hook_on_what_the_platform_stage_already_ran_is_still_refused(
    tmp_path: Path,
) -> None:
    script, var = _app(tmp_path, "init_backend")
    done = run_script(script, "spawn", env={var: "cpu"})
    assert done.returncode != 0
    assert "ImportGuardError" in done.stderr
    assert "CpuPlatform.init_backend" in done.stderr
