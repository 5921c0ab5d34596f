"""A hook target named by its re-export (``eng.api.tokenize``, ``eng.api`` doing ``from
eng.ops import tokenize``) while the launching script imported the defining module early:
the sweep no longer vouches for early modules, so what it can rebind is rebound and what it
cannot fails the worker per guard policy, naming the defining module's early import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from spawnkit.testing import write_distribution

REPO_SRC = str(Path(__file__).resolve().parents[1] / "src")

_SCRIPT = """\
import json, sys
sys.path.insert(0, {site!r})
{early}
{hold}

if __name__ == "__main__":
    import spawnkit
    ns = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
    try:
        with spawnkit.spawn_with_plugins("{pkg}.entry:run", None, nprocs=1, namespace=ns,
                                         start_method="spawn", ready_timeout=60,
                                         join_timeout=60) as g:
            print(json.dumps({{"result": g.results(timeout=60)[0]}}))
    except Exception as exc:
        child = getattr(exc, "child_exception", None)
        print(json.dumps({{"error": type(child).__name__, "message": str(exc)}}))
"""

_ENTRY = """\
import sys

def run(payload=None):
    from {pkg} import api, ops
    main = sys.modules["__mp_main__"]
    out = {{"api": api.tokenize(1), "ops": ops.tokenize(1)}}
    if hasattr(main, "tokenize"):
        out["main"] = main.tokenize(1)
    return out
"""

_PLUGIN = """\
from spawnkit import get_namespace
from spawnkit.hooks import HookType

def after(result, *a, **k):
    return result + "+hooked"

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.api.tokenize", after, HookType.AFTER)
"""


def _launch(tmp_path: Path, early: str, hold: str = "") -> dict[str, object]:
    tag = f"rx{uuid.uuid4().hex[:8]}"
    pkg, site = f"{tag}eng", tmp_path / "site"
    site.mkdir()
    from spawnkit.namespace import Namespace

    ns = Namespace(tag, env_prefix=tag.upper())
    write_distribution(
        site,
        f"{tag}-eng",
        "1.0",
        modules={
            f"{pkg}/__init__.py": "",
            f"{pkg}.ops": "def tokenize(x):\n    return 'orig'\n",
            f"{pkg}.api": f"from {pkg}.ops import tokenize\n",
            f"{pkg}.entry": _ENTRY.format(pkg=pkg),
        },
    )
    write_distribution(
        site,
        f"{tag}-plug",
        "1.0",
        entry_points={ns.config.plugin_group: {"p": f"{tag}plug:register"}},
        modules={f"{tag}plug/__init__.py": _PLUGIN.format(tag=tag, pkg=pkg)},
    )
    script = tmp_path / "launch.py"
    script.write_text(
        _SCRIPT.format(
            site=str(site),
            early=early.format(pkg=pkg),
            hold=textwrap.dedent(hold),
            tag=tag,
            prefix=tag.upper(),
            pkg=pkg,
        )
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", REPO_SRC)},
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "hold",
    [
        "def work(payload=None, tok=tokenize):\n    return tok(1)\n",
        "KEPT = (tokenize,)\n",
    ],
    ids=["default-argument", "tuple"],
)
def test_reexport_target_with_early_defining_module_fails_the_worker(
    tmp_path: Path, hold: str
) -> None:
    out = _launch(tmp_path, "from {pkg}.ops import tokenize", hold)
    assert out.get("error") == "StageError[ImportGuardError]", out
    message = str(out["message"])
    assert "ImportGuardError" in message
    assert "names a re-export: its original is defined in" in message
    assert "launch.py:3" in message  # the early import to move


def test_reexport_target_rebinds_early_module_globals(tmp_path: Path) -> None:
    """Only rebindable holders: every name of the original runs the hook (ops and the
    launching script's own global kept the original before)."""
    out = _launch(tmp_path, "from {pkg}.ops import tokenize")
    assert out == {"result": {"api": "orig+hooked", "ops": "orig+hooked", "main": "orig+hooked"}}


def test_reexport_target_without_early_import_stays_quiet(tmp_path: Path) -> None:
    out = _launch(tmp_path, "")
    assert out == {"result": {"api": "orig+hooked", "ops": "orig+hooked"}}


_FROM_FILE = """\
import importlib.util
_spec = importlib.util.spec_from_file_location("{pkg}.api", {path!r})
_api = importlib.util.module_from_spec(_spec)
sys.modules["{pkg}.api"] = _api
_spec.loader.exec_module(_api)
KEPT = (_api.tokenize,)
"""


def test_target_module_loaded_from_its_file_is_named_with_the_loading_line(
    tmp_path: Path,
) -> None:
    """The "import a source file directly" recipe (vLLM's ``import_from_path``) at the
    launching script's top: the guard said "first imported at before the import guard was
    armed (interpreter start-up or sitecustomize)"; it names the recipe's line now."""
    path = str(tmp_path / "site" / "{pkg}" / "api.py")
    out = _launch(tmp_path, _FROM_FILE.replace("{path!r}", repr(path)))
    assert out.get("error") == "StageError[ImportGuardError]", out
    message = str(out["message"])
    assert "before the import guard was armed" not in message
    assert "loaded from its source file without the import system" in message
    assert "launch.py:4 (_spec = importlib.util.spec_from_file_location(" in message
