"""A launching script is re-imported by each spawned worker: what its import of spawnkit costs.

README's launchers import ``spawn_with_plugins`` at their top, the ``spawnkit`` console script
imports ``spawnkit.cli``, and spawn re-runs that top in every worker as ``__mp_main__``.  The
group, its ranks, relays, the parent's selection and the argument parser are the parent's
alone: a worker must not import them (nor ``logging``, ``uuid``...) for it.
Real launchers, real spawned workers; the modules each worker holds at its entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import spawnkit

SRC = str(Path(spawnkit.__file__).resolve().parents[1])

_LAUNCHER = """
import json, sys
{top}

def modules(payload=None):
    return sorted(sys.modules)


if __name__ == "__main__":
    from spawnkit import spawn_with_plugins
    with spawn_with_plugins("__main__:modules", ready_timeout=60) as group:
        print(json.dumps(group.results(timeout=60)[0]))
"""


def _worker_modules(tmp_path: Path, name: str, top: str) -> set[str]:
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(_LAUNCHER.format(top=top)))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=SRC),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


#: What a launching script's top imports, and the modules its workers gain by that alone.
_TOPS = {
    "readme": (
        "from spawnkit import spawn_with_plugins",
        {"spawnkit.launch", "spawnkit.launch._checks", "spawnkit.launch.launcher"},
    ),
    # the ``spawnkit`` console script: ``spawnkit launch``, ``demo`` and ``bench`` workers
    "console_script": ("from spawnkit.cli import main", {"spawnkit.cli"}),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("top", sorted(_TOPS))
def test_what_a_launching_script_imports_at_its_top_costs_each_worker_a_few_modules(
    tmp_path: Path, top: str
) -> None:
    line, gained = _TOPS[top]
    plain = _worker_modules(tmp_path, "plain_launcher", "")
    usual = _worker_modules(tmp_path, "usual_launcher", line)
    assert usual - plain == gained
