"""An engine registering namespace ``skl``, a plugin hooking it and a payload, for launch tests.

The app is in namespace ``skl``; its entry functions write each rank's view
to ``payload["out"]`` so the tests check what really ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spawnkit.testing import write_distribution

__all__ = ["CLI_TIMEOUT_S", "SPAWNKIT", "cli", "make_env", "write_app", "write_payload"]

SPAWNKIT = str(Path(sys.executable).with_name("spawnkit"))
CLI_TIMEOUT_S = 180

ENTRY_SRC = """
import json, os, sys, time

def main(payload):
    from spawnkit.bootstrap import current_report, current_spec
    import skl_app.target as target

    spec = current_spec()
    out = {
        "rank": spec.rank,
        "world_size": spec.world_size,
        "greet": target.greet("x"),
        "payload": payload["tag"],
        "key_visible": "SPAWNKIT_SPEC_KEY" in os.environ,
        "pid": os.getpid(),
    }
    with open(os.path.join(payload["out"], f"rank{spec.rank}.json"), "w") as fh:
        json.dump(out, fh)
    return out["greet"]

def crash(payload):
    raise RuntimeError("skl entry blew up on purpose")

def exits(payload):
    from spawnkit.bootstrap import current_spec
    if current_spec().rank == 1:
        sys.exit(0)  # an ending meant so: its result is None
    return 1  # a main() returning a status, as `sys.exit(main())` scripts do

def hang(payload):
    from spawnkit.bootstrap import current_spec
    with open(os.path.join(payload["out"], f"pid{current_spec().rank}"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(600)
"""

PLUGIN_SRC = """
from spawnkit.hooks import HookType

def _around(original, *args, **kwargs):
    return original(*args, **kwargs) + " (patched)"

def register():
    from spawnkit.namespace import get_namespace
    get_namespace("skl").hooks.register("skl_app.target.greet", _around, HookType.AROUND)
"""


def write_app(root: Path) -> Path:
    """An engine module and a plugin distribution hooking it, in the ``skl`` namespace."""
    site = root / "site"
    # The engine registers its namespace, as `spawnkit launch --namespace skl` requires.
    write_distribution(
        site,
        "skl-app",
        "1.0",
        entry_points={"spawnkit.namespaces": {"skl": "skl_app.namespace:NS"}},
        modules={
            "skl_app.namespace": "from spawnkit import Namespace\nNS = Namespace('skl')\n",
            "skl_app.entry": ENTRY_SRC,
            "skl_app.target": "def greet(n):\n    return n\n",
        },
    )
    write_distribution(
        site,
        "skl-plugin",
        "1.0",
        entry_points={"skl.plugins": {"patcher": "skl_plugin:register"}},
        modules={"skl_plugin": PLUGIN_SRC},
    )
    return site


def write_payload(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"tag": "t1", "out": str(out)}))
    return payload, out


def make_env(tmp_path: Path, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKL_", "TORCHELASTIC_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("RAY_ADDRESS", None)
    # The spawnkit under test first (the venv's own install may be another checkout's).
    import spawnkit

    env["PYTHONPATH"] = os.pathsep.join([str(site), str(Path(spawnkit.__file__).parent.parent)])
    env["OMP_NUM_THREADS"] = "1"
    # Private temp dir: the spec folder's clean-up is checked there.
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env


def cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPAWNKIT, "launch", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
