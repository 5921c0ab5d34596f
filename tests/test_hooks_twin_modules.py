"""A hook target module imported a second time under another name: said, not silently missed.

``sys.path.insert(0, os.path.dirname(__file__))`` in an engine module makes ``eng/ops.py``
importable as ``eng.ops`` and as ``ops``: two modules, each with its own functions.  The hooks
patched ``eng.ops``; code that imported ``ops`` ran the original while ``status()`` said
applied.  Real launchers, a real installed plugin, spawned and warm workers; and the registry.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.hooks import HookRegistry

if TYPE_CHECKING:
    from _hooks_support import Modules


def test_the_registry_names_the_twin_and_only_it(
    mods: Modules, registry: type[HookRegistry], monkeypatch: pytest.MonkeyPatch
) -> None:
    short = f"ops{mods.pkg[-8:]}"  # a top-level name no other test imports
    mods.write(short, "def tok(x):\n    return x\n")
    mods.write("other", "def f(x):\n    return x\n")
    target, control = mods.name(f"{short}.tok"), mods.name("other.f")
    registry.register(target, lambda r, x: ("hooked", r))
    registry.register(control, lambda r, x: r)
    registry.apply_hooks()
    monkeypatch.syspath_prepend(str(mods.root / mods.pkg))  # the package's own folder
    monkeypatch.delitem(sys.modules, short, raising=False)
    twin = importlib.import_module(short)
    try:
        assert twin.tok(1) == 1 and sys.modules[mods.name(short)].tok(1) == ("hooked", 1)
        assert registry.bypassing() == {target: [short]}
        rows = {s.target: s for s in registry.status()}
        assert f"also imported as {short!r}" in rows[target].reason
        assert rows[control].reason == ""
    finally:
        del sys.modules[short]


_MAIN = """
if __name__ == "__main__":
    print([launch("entry:main", m, nprocs=1) for m in ("spawn", "forkserver")])
"""

_MODULES = {
    "ops": "def tok(x):\n    return x\n",
    "entry": """
import os, sys

sys.path.insert(0, os.path.dirname(__file__))  # the package's own folder: a second 'ops'
import ops as twin

from {pkg} import ops


def main():
    return ops.tok(1), twin.tok(1)
""",
    "plugin": """
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.ops.tok", lambda result, x: result + 100)
""",
}


def test_a_worker_says_so_once_its_entry_imported_the_twin(tmp_path: Path) -> None:
    app = write_app(tmp_path, "twin", LAUNCH + _MAIN, {"p": "plugin:register"}, _MODULES)
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == [[(101, 1)]] * 2
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr  # one per worker: spawned, then warm
    for line in lines:
        assert f"target '{app.pkg}.ops.tok'" in line and "also imported as 'ops'" in line
    assert "import it through its package" in proc.stderr
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0 and "HookConflictError" in proc.stderr, proc.stderr
