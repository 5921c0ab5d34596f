"""A plugin installed editable (a ``.pth`` path entry) while the launcher ran.

``pip install -e`` of a src-layout project writes the distribution's metadata into
site-packages and a ``.pth`` file naming the source directory.  The launcher, running since
before, read the new metadata (its plugin was selected) but never the ``.pth`` (an interpreter
reads them only as it starts); a spawned worker or warm server reads it, then multiprocessing
replaces its ``sys.path`` with the launcher's.  The plugin failed to import in every worker
with "Fix or upgrade <dist>", advice about code that is fine.  The failure now names the
``.pth`` file, the entry missing from ``sys.path`` and the fix: restart the launcher.

Real parts: a throw-away venv whose site-packages an interpreter reads at start, a real
distribution and ``.pth`` file written there by the running launcher, real workers.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import spawnkit

_LAUNCHER = """
import json, sys
import spawnkit
from spawnkit.testing import write_distribution

TAG, PURELIB, SRC = sys.argv[1], sys.argv[2], sys.argv[3]
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())

def entry():
    return "ran"

def launch(method, plugin):
    try:
        with spawnkit.spawn_with_plugins(
            "__main__:entry", namespace=NS, start_method=method, ready_timeout=120,
            join_timeout=120, env={TAG.upper() + "_PLUGINS": plugin},
        ) as group:
            return {"ok": group.results(timeout=120)}
    except spawnkit.SpawnkitError as exc:
        child = getattr(exc, "child_exception", None)
        return {"error": type(exc).__name__, "message": str(exc),
                "child": type(child).__name__ if child is not None else None}

if __name__ == "__main__":
    if sys.argv[4] == "install":  # the editable install, made while this launcher runs
        write_distribution(PURELIB, TAG + "-edit", entry_points={
            TAG + ".plugins": {"edit": TAG + "_edit:register", "gone": TAG + "_gone:register"},
        })
        with open(f"{PURELIB}/__editable__.{TAG}_edit-0.1.0.pth", "w") as f:
            f.write(SRC + "\\n")
    out = {m: launch(m, "edit") for m in sys.argv[5:]}
    out["gone"] = launch("spawn", "gone")
    print("OUT", json.dumps(out))
"""


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose interpreter finds spawnkit and this one's packages; its site-packages."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    (purelib,) = venv.glob("lib/python*/site-packages")
    paths = [str(Path(spawnkit.__file__).parents[1]), *site.getsitepackages()]
    (purelib / "aaa_paths.pth").write_text("\n".join(paths) + "\n")
    return venv / "bin" / "python", purelib


def _launch(tmp_path: Path, *args: str) -> tuple[dict[str, Any], Path, str]:
    tag = f"pth{uuid.uuid4().hex[:8]}"
    python, purelib = _venv(tmp_path)
    src = tmp_path / "project" / "src"
    (src / f"{tag}_edit").mkdir(parents=True)
    (src / f"{tag}_edit" / "__init__.py").write_text("def register():\n    pass\n")
    script = tmp_path / "launcher.py"
    script.write_text(_LAUNCHER)
    out = _run(python, script, tag, purelib, src, *args)
    return out, purelib / f"__editable__.{tag}_edit-0.1.0.pth", tag


def _run(python: Path, script: Path, *args: Any) -> dict[str, Any]:
    proc = subprocess.run(
        [str(python), str(script), *map(str, args)], capture_output=True, text=True,
        timeout=300, cwd=script.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.split("OUT ", 1)[1])
    return result


def test_a_plugin_installed_editable_while_the_launcher_ran_names_the_pth_and_the_fix(
    tmp_path: Path,
) -> None:
    out, pth, tag = _launch(tmp_path, "install", "spawn", "forkserver")
    src = tmp_path / "project" / "src"
    for method, error in (("spawn", "ChildRaisedError"), ("forkserver", "ForkServerError")):
        failed = out[method]
        assert failed.get("error") == error, failed
        text = failed["message"]
        assert f"No module named '{tag}_edit'" in text
        # Before: "... Fix or upgrade <dist>, or deselect it ...", about code that is fine.
        assert f"'{tag}_edit' is in {src}, which {pth} puts on sys.path" in text, text
        assert "not on this process's sys.path" in text and "pip install -e" in text
        assert "Restart the launcher" in text and "Fix or upgrade" not in text
    assert out["spawn"]["child"] == "StageError[PluginError]"
    # A plugin whose module is nowhere keeps the plugin's own advice.
    assert "Fix or upgrade" in out["gone"]["message"]
    assert ".pth" not in out["gone"]["message"]
    # And the fix holds: a launcher started after the install loads the plugin.
    restarted = _run(pth.parents[3] / "bin" / "python", tmp_path / "launcher.py", tag,
                     pth.parent, src, "again", "spawn", "forkserver")  # fmt: skip
    assert restarted["spawn"] == restarted["forkserver"] == {"ok": ["ran"]}
