"""An exit callback a hook target module registers as it is imported runs the hooks.

``apply_hooks()`` imports the target's module to patch it; its ``@atexit.register`` (or
``atexit.register(flush, "logs")``) handed ``atexit`` the original, which CPython keeps where
no Python code can list or change it: the plugin's hook on ``cleanup`` was "applied" and the
original ran at exit.  While an apply imports modules (and while a watched module runs, for
``on_import`` hooks), ``atexit.register`` now registers a callback whose function the sweep
rebinds in place: the exit order stays, ``atexit.unregister(cleanup)`` still finds it, and
``unapply()`` puts the original back.  In-process in a fresh interpreter (an exit is the
test); real spawned and warm workers at the end.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, MAIN, write_app

_SERVER = """
import atexit

@atexit.register
def cleanup():
    print("cleanup: original", flush=True)

def flush(where):
    print(f"flush {where}: original", flush=True)

atexit.register(flush, "logs")

class Server:
    def shutdown(self):
        print("shutdown: original", flush=True)

SERVER = Server()
atexit.register(SERVER.shutdown)  # a bound method: a new one of the hooked function stands in
"""

_SCRIPT = """
import atexit, sys
sys.path.insert(0, {root!r})
from spawnkit.hooks import HookRegistry, HookType

def around(original, *args, **kwargs):
    print("hooked ->", end=" ", flush=True)
    return original(*args, **kwargs)

for name in ("cleanup", "flush", "Server.shutdown"):
    HookRegistry.register(f"{pkg}.server.{{name}}", around, HookType.AROUND, on_import={lazy})
HookRegistry.apply_hooks()
from {pkg} import server
if {how!r} == "unregister":
    atexit.unregister(server.cleanup)
elif {how!r} == "unapply":
    HookRegistry.unapply()
print(sorted({{s.state for s in HookRegistry.status()}}), flush=True)
"""


def _exit_lines(tmp_path: Path, how: str, lazy: bool = False) -> list[str]:
    pkg = f"atx_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "server.py").write_text(_SERVER)
    script = _SCRIPT.format(root=str(tmp_path), pkg=pkg, how=how, lazy=lazy)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout.splitlines()


@pytest.mark.parametrize("lazy", [False, True], ids=["apply", "on_import"])
def test_exit_callbacks_run_the_hooks_in_their_order(tmp_path: Path, lazy: bool) -> None:
    assert _exit_lines(tmp_path, "", lazy) == [
        "['applied']",
        "hooked -> shutdown: original",  # registered last: runs first, as before
        "hooked -> flush logs: original",
        "hooked -> cleanup: original",
    ]


def test_unregister_still_finds_it_and_unapply_restores_the_original(tmp_path: Path) -> None:
    assert _exit_lines(tmp_path, "unregister") == [
        "['applied']",
        "hooked -> shutdown: original",
        "hooked -> flush logs: original",
    ]
    assert _exit_lines(tmp_path, "unapply") == [
        "['pending']",
        "shutdown: original",
        "flush logs: original",
        "cleanup: original",
    ]


_ENGINE = """
import atexit


@atexit.register
def cleanup():
    print("cleanup: original", flush=True)


def main():
    return "ran"
"""

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def noted():
    print("cleanup: hooked", flush=True)


def register():
    get_namespace({tag!r}).hooks.register("{pkg}.entry.cleanup", noted, HookType.BEFORE)
"""


@pytest.mark.parametrize("early", [False, True], ids=["apply", "plugin-import"])
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_workers_exit_runs_the_hook(tmp_path: Path, method: str, early: bool) -> None:
    """``early``: the plugin imports the engine module at its top, before any hook exists."""
    plugin = ("import {pkg}.entry  # noqa\n" if early else "") + _PLUGIN
    modules = {"entry": _ENGINE, "plugin": plugin}
    app = write_app(tmp_path, "atexit", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    proc = subprocess.run(
        [sys.executable, str(app.script), method],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines() if "cleanup" in line]
    # the worker as it exits; a warm worker's server, which imported the module, at its own
    # exit too (the callback there is the same one, rebound as the server applied the hooks)
    runs = 1 if method == "spawn" else 2
    assert lines == ["cleanup: hooked", "cleanup: original"] * runs, proc.stdout
