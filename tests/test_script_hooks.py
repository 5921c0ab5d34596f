"""Hooks the launching script registers itself, outside any plugin, and the workers.

A spawn or forkserver worker re-runs the launching script's body as ``__mp_main__`` before
its entry: a hook that body registers is registered, and applied, in every worker too.  The
launch called such hooks stray ("they never run"), and ``-W error::spawnkit.
PluginSelectionWarning`` refused a launch that works.  A registration under ``if __name__ ==
"__main__":`` (or in a function called from there) is run by no worker: still said.
Real launcher scripts, a real installed plugin, real spawned and warm workers.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, louder_plugin, run_script, warned, write_app

_SCRIPT = (
    LAUNCH
    + """
from spawnkit.hooks.types import HookType

def quiz(result):
    return result + "?"

def add():
    NS.hooks.register("{pkg}.target.word", quiz, HookType.AFTER)

TOP

if __name__ == "__main__":
    GUARDED
    print(launch("entry:main", sys.argv[1], nprocs=1))
"""
)

_TARGET = """
def word():
    return "hi"
"""

_ENTRY = """
def main():
    from {pkg}.target import word
    return word()
"""

_REGISTER = 'NS.hooks.register("{pkg}.target.word", quiz, HookType.AFTER)'
#: Where the script registers its hook: its body itself, or a function it calls from there
_CALLS = {"body": _REGISTER, "function": "add()"}


def _app(tmp_path: Path, top: str = "", guarded: str = "pass") -> Path:
    source = _SCRIPT.replace("TOP", top).replace("GUARDED", guarded)
    modules = {"target": _TARGET, "entry": _ENTRY, "plugin": louder_plugin("target.word")}
    return write_app(tmp_path, "own", source, {"loud": "plugin:register"}, modules).script


#: The worker's result: spawn registers the script's hook before its plugins load (it runs
#: first, so innermost); a warm worker re-runs the script after its server applied them.
_HOOKED = {"spawn": ["hi?!"], "forkserver": ["hi!?"]}


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("how", sorted(_CALLS))
def test_a_hook_the_scripts_body_registers_runs_in_every_worker_and_is_not_called_stray(
    tmp_path: Path, method: str, how: str
) -> None:
    script = _app(tmp_path, top=_CALLS[how])
    proc = run_script(script, method, flags=("-W", "error::spawnkit.PluginSelectionWarning"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == _HOOKED[method], proc.stdout
    assert not warned(proc, "PluginSelectionWarning"), proc.stderr


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("how", sorted(_CALLS))
def test_a_hook_registered_under_the_main_guard_is_still_said_to_run_nowhere(
    tmp_path: Path, method: str, how: str
) -> None:
    """Control: no worker runs the guarded block, so no worker has that hook."""
    script = _app(tmp_path, guarded=_CALLS[how])
    proc = run_script(script, method)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == ["hi!"], proc.stdout
    lines = warned(proc, "PluginSelectionWarning")
    assert len(lines) == 1 and "AFTER __main__.quiz on " in lines[0], proc.stderr
    assert "no worker applies them" in lines[0]


def test_a_script_run_by_python_c_is_run_by_no_worker_so_its_hook_is_said(
    tmp_path: Path,
) -> None:
    """Control: ``python -c`` leaves ``__main__`` no file a worker could run again."""
    script = _app(tmp_path, top=_REGISTER)
    proc = subprocess.run(
        [sys.executable, "-c", f"exec(open({str(script)!r}).read())", "spawn"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == ["hi!"], proc.stdout
    assert len(warned(proc, "PluginSelectionWarning")) == 1, proc.stderr
