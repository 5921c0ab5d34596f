"""A general plugin's class REPLACE of the platform class never reaches ``current_platform``.

The worker builds its platform in stage ``initialize_platform``, before plugins load; a plugin
that REPLACEs that class (a platform plugin's ``ChipPlatform``, or the built-in
``CpuPlatform``) put the replacement in the class's module while ``current_platform`` stayed
the original's instance: the tuned methods never ran, the report said applied and doctor OK.
Now a ``HookConflictWarning`` in each worker names it (``<PREFIX>_HOOK_CONFLICTS=error``
refuses in stage ``apply_hooks``); a method hook, the fix it names, reaches the instance.
Real distributions, a real launcher script, spawned and warm workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, App, run_script, warned, write_app
from spawnkit.testing import write_distribution

_MAIN = """
import sys

if __name__ == "__main__":
    print([launch("entry:main", m, nprocs=1) for m in ("spawn", "forkserver")])
"""

_ENTRY = """
def main():
    from spawnkit.platforms import current_platform as p
    return type(p).__name__, p.get_default_attention_backend()
"""

_REPLACE = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register("TARGET", "{pkg}.tuned:Tuned", HookType.REPLACE)
"""

_METHOD = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def tuned(original_fn, *args, **kwargs):
    return "tuned_attn"

def register():
    get_namespace({tag!r}).hooks.register(
        "TARGET.get_default_attention_backend", tuned, HookType.AROUND
    )
"""

_TUNED = """
from MODULE import NAME


class Tuned(NAME):
    def get_default_attention_backend(self):
        return "tuned_attn"
"""

#: the platform plugin's class (its package is named after the namespace), or a built-in
_CHIP = "{tag}_chip.platform.ChipPlatform"
_CPU = "spawnkit.platforms.builtin.CpuPlatform"


def _app(tmp_path: Path, target: str, plugin: str) -> App:
    """A general plugin distribution (``plugin``: its REPLACE of ``target`` or its method
    hook) and a platform plugin distribution whose ``activate()`` always returns its class."""
    module, _, name = target.rpartition(".")
    modules = {
        "entry": _ENTRY,
        "plugin": (_REPLACE if plugin == "replace" else _METHOD).replace("TARGET", target),
        "tuned": _TUNED.replace("MODULE", module).replace("NAME", name),
    }
    app = write_app(tmp_path, "platrepl", LAUNCH + _MAIN, {"tune": "plugin:register"}, modules)
    chip = f"{app.tag}_chip"
    write_distribution(
        tmp_path / "site",
        f"{chip}-dist",
        "2.0",
        entry_points={f"{app.tag}.platforms": {"chip": f"{chip}:activate"}},
        modules={
            chip: "def activate():\n    return __name__ + '.platform:ChipPlatform'\n",
            f"{chip}.platform": (
                "from spawnkit.platforms import Platform, PlatformEnum\n\n"
                "class ChipPlatform(Platform):\n    _enum = PlatformEnum.OOT\n"
                "    device_name = 'chip'\n    device_type = 'cpu'\n\n"
                "    def get_default_attention_backend(self):\n        return 'chip_attn'\n"
            ),
        },
    )
    return app


@pytest.mark.timeout(300)
@pytest.mark.parametrize("builtin", [False, True], ids=["plugin-class", "builtin-cpu"])
def test_a_replace_of_the_platform_class_is_named_in_each_worker(
    tmp_path: Path, builtin: bool
) -> None:
    app = _app(tmp_path, _CPU if builtin else _CHIP, "replace")
    target = _CPU if builtin else _CHIP.format(tag=app.tag)
    env = {f"{app.tag.upper()}_PLATFORM": "cpu"} if builtin else {}
    proc = run_script(app.script, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a worker's platform is not rebuilt: it stays the original's, and now it is said; a
    # warm worker takes on its server's platform, as a spawned worker keeps its own
    kept = ("CpuPlatform", "torch_native") if builtin else ("ChipPlatform", "chip_attn")
    results = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert results == [[kept], [kept]]
    line, *_ = warned(proc, "HookConflictWarning")  # the spawned worker's (and the server's)
    assert f"target '{target}': current_platform of namespace '{app.tag}'" in line
    assert "built in stage 'initialize_platform'" in line
    assert f"plugin 'tune' ({app.pkg}-dist 1.0)" in line and "Tuned's methods" in line
    assert f"group '{app.tag}.platforms'" in proc.stderr  # the fix: make it a platform plugin
    assert f"AROUND or REPLACE on '{target}.get_default_attention_backend'" in proc.stderr
    refused = run_script(app.script, env={**env, f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert refused.returncode != 0
    assert "HookConflictError" in refused.stderr and "apply_hooks" in refused.stderr


@pytest.mark.timeout(300)
def test_a_method_hook_on_the_platform_class_reaches_the_instance(tmp_path: Path) -> None:
    """The fix the warning names: nothing to warn about, and the tuned method runs (the
    platform's module is imported before plugins, so the guard asks for ``warn``)."""
    app = _app(tmp_path, _CHIP, "method")
    proc = run_script(app.script, env={f"{app.tag.upper()}_IMPORT_GUARD": "warn"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = [[("ChipPlatform", "tuned_attn")]] * 2
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == expected
    assert not warned(proc, "HookConflictWarning"), proc.stderr
