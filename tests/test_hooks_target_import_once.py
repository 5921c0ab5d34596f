"""A hook target module that raises as it is imported runs once, and its own error is reported.

The bootstrap imports the target modules ahead of the patching (to time them apart); a module
that raised there was swallowed and run again by the patching, whose error was reported: for a
module with a side effect before its failure (an operator it registers, a registry entry), that
was the second run's "already registered", and the cause (a missing shared library) was lost.
Real spawned and warm workers, a real installed plugin.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _plugin_app import LAUNCH, run_script, write_app

_OPS = """
from {pkg} import reg

reg.RUNS.append(1)
if len(reg.RUNS) > 1:
    raise RuntimeError("operator 'tok' is already registered (this module ran twice)")
raise ImportError("libfoo.so: cannot open shared object file")


def tok(x):
    return x
"""

_PLUGIN = """
from spawnkit.namespace import get_namespace

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.ops.tok", lambda result, x: result)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_first_import_error_is_reported_and_the_module_runs_once(
    tmp_path: Path, method: str
) -> None:
    main = f"\nif __name__ == '__main__':\n    print(launch('entry:main', {method!r}, nprocs=1))\n"
    modules = {
        "reg": "RUNS = []\n",
        "ops": _OPS,
        "entry": "def main():\n    return 1\n",
        "plugin": _PLUGIN,
    }
    app = write_app(tmp_path, "once", LAUNCH + main, {"p": "plugin:register"}, modules)
    proc = run_script(app.script)
    assert proc.returncode != 0
    assert (
        f"importing module '{app.pkg}.ops' raised ImportError: libfoo.so: cannot open shared "
        "object file"
    ) in proc.stderr, proc.stderr
    assert "ran twice" not in proc.stderr
