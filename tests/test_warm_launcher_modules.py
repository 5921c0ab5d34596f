"""A warm server imports the launcher's own standard-library and spawnkit modules once, for its
workers, but never a third-party package through one of them (only ``preload=`` does that).

Seen on a GPU machine: an xdist worker that had imported ``spawnkit.platforms.custom_op`` (so
torch) made every later warm server import torch after its bootstrap, past a 4 s ready_timeout.
Real launchers in fresh interpreters, real fork servers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_LAUNCHER = """
import json, sys
sys.path.insert(0, {root!r})

def probe(payload=None):
    return sorted(m for m in ("pytest", "torch") if m in sys.modules)

if __name__ == "__main__":
    import spawnkit.testing.plugin  # the launcher holds pytest through a spawnkit module
    {extra}
    from spawnkit import spawn_with_plugins
    with spawn_with_plugins("wlm_probe:probe", start_method="forkserver", ready_timeout=60) as g:
        print(json.dumps(g.results(timeout=60)[0]))
"""


def _run(tmp_path: Path, extra: str = "") -> list[str]:
    script = tmp_path / "wlm_probe.py"
    script.write_text(textwrap.dedent(_LAUNCHER.format(root=str(tmp_path), extra=extra)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_warm_worker_does_not_inherit_pytest_from_a_spawnkit_module_of_the_launcher(
    tmp_path: Path,
) -> None:
    # The worker re-runs the launcher's top level, which imports neither: what it has, it
    # inherited from its server.
    assert _run(tmp_path) == []


@pytest.mark.needs_torch
def test_nor_torch_from_custom_op(tmp_path: Path) -> None:
    assert _run(tmp_path, "import spawnkit.platforms.custom_op, spawnkit.demo.scheduler") == []


def test_the_launchers_light_modules_are_still_preloaded() -> None:
    code = (
        "import json, sys\n"
        "import spawnkit.testing.plugin, spawnkit.launch, json.decoder\n"
        "from spawnkit.protocol.warm import launcher_modules\n"
        "print(json.dumps(launcher_modules()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    names = set(json.loads(done.stdout))
    assert "spawnkit.testing.plugin" not in names  # holds pytest
    assert {"spawnkit.testing", "spawnkit.protocol.warm", "json.decoder", "os"} <= names
    assert not [n for n in names if n.partition(".")[0] in ("pytest", "_pytest", "pluggy")]
