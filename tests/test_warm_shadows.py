"""A module put in an earlier ``sys.path`` directory, or one the server missed, takes effect
in the next warm launch, as in a spawned one.

A warm server imported ``shadowplug`` from ``B``; ``shadowplug.py`` then appeared in ``A``,
before ``B`` on ``sys.path``.  A spawned worker imported ``A``'s, every warm worker kept
``B``'s, with nothing said (the server's key reads what is installed, and only the files it
imported were watched).  Likewise a top-level module the server tried and missed.  A file
of another name written there (a log beside the script) keeps the server.  Real launcher
processes, real files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_MODULE = """
try:
    import fastshadow  # optional: missing when the server starts
    FAST = fastshadow.NAME
except ImportError:
    FAST = None
WHO = {who!r}

def who(payload=None):
    import os, shadowplug
    return [shadowplug.WHO, shadowplug.FAST, os.getppid()]
"""

_LAUNCHER = """
import json, os, pathlib, sys
A, B = sys.argv[1:3]
sys.path[:0] = [A, B]
from spawnkit import spawn_with_plugins

def launch(method):
    warm = dict(start_method="forkserver", preload=("shadowplug",))
    kw = warm if method == "warm" else {{}}
    with spawn_with_plugins(
        "shadowplug:who", nprocs=1, ready_timeout=120, join_timeout=120, **kw
    ) as group:
        return group.results(timeout=120)[0]

if __name__ == "__main__":
    out = {{"first": launch("warm")}}
    pathlib.Path(A, "launcher.log").write_text("a log beside the script\\n")
    out["logged"] = launch("warm")
    pathlib.Path(A, "shadowplug.py").write_text({shadow!r})
    out["shadowed"] = launch("warm")
    out["spawned"] = launch("spawn")
    pathlib.Path(B, "fastshadow.py").write_text("NAME = 'fast'\\n")
    out["fast"] = launch("warm")
    print("OUT", json.dumps(out))
"""


def _run(tmp_path: Path) -> Any:
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    (b / "shadowplug.py").write_text(_MODULE.format(who="B"))
    script = tmp_path / "launcher.py"
    script.write_text(_LAUNCHER.format(shadow=_MODULE.format(who="A")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(script), str(a), str(b)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.split("OUT ", 1)[1])


def test_a_module_shadowing_one_a_warm_server_imported_is_run_by_the_next_warm_launch(
    tmp_path: Path,
) -> None:
    out = _run(tmp_path)
    first_who, first_fast, server = out["first"]
    assert (first_who, first_fast) == ("B", None)
    # a file of another name in A: the same server serves the next launch
    assert out["logged"] == ["B", None, server], "an unrelated file must keep the warm server"
    # Before the fix: ['B', None, server] here, while the spawned worker said 'A'.
    shadowed_who, _, new_server = out["shadowed"]
    assert shadowed_who == out["spawned"][0] == "A"
    assert new_server != server
    # the optional import that failed in the server: found once it is there
    assert out["fast"][:2] == ["A", "fast"]
    assert out["fast"][2] != new_server


_NS_MODULE = """
try:
    import fastportion  # optional: no such module or package when the server starts
    FAST = True
except ImportError:
    FAST = False

def who(payload=None):
    import os, nsshadow.mod
    return [nsshadow.mod.WHO, FAST, os.getppid()]
"""

_NS_LAUNCHER = """
import json, os, pathlib, sys
A, B = sys.argv[1:3]
sys.path[:0] = [A, B]
from spawnkit import spawn_with_plugins

def launch(method):
    warm = dict(start_method="forkserver", preload=("nsshadowapp", "nsshadow.mod"))
    kw = warm if method == "warm" else {}
    with spawn_with_plugins(
        "nsshadowapp:who", nprocs=1, ready_timeout=120, join_timeout=120, **kw
    ) as group:
        return group.results(timeout=120)[0]

if __name__ == "__main__":
    out = {"first": launch("warm")}
    pathlib.Path(A, "nsshadow").mkdir()
    pathlib.Path(A, "nsshadow", "mod.py").write_text("WHO = 'A'\\n")
    out["shadowed"] = launch("warm")
    out["spawned"] = launch("spawn")
    pathlib.Path(B, "fastportion").mkdir()
    out["fast"] = launch("warm")
    print("OUT", json.dumps(out))
"""


def test_a_namespace_portion_made_since_is_run_by_the_next_warm_launch(tmp_path: Path) -> None:
    """``nsshadow`` is a namespace package (``B/nsshadow/mod.py``, no ``__init__``) the server
    preloaded; then ``A/nsshadow/mod.py`` appears, ``A`` before ``B``: a spawned worker imports
    ``A``'s (portions are searched in ``sys.path``'s order).  Before the fix every warm worker
    kept ``B``'s, and a folder ``fastportion/`` made for an import the server missed (which a
    fresh import takes as a namespace package) was not seen either: a directory without
    ``__init__`` never counted."""
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    (b / "nsshadow").mkdir(parents=True)
    (b / "nsshadow" / "mod.py").write_text("WHO = 'B'\n")
    (b / "nsshadowapp.py").write_text(_NS_MODULE)
    script = tmp_path / "launcher.py"
    script.write_text(_NS_LAUNCHER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(script), str(a), str(b)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    first_who, first_fast, server = out["first"]
    assert (first_who, first_fast) == ("B", False)
    # Before the fix: ['B', False, server], while the spawned worker said 'A'.
    shadowed_who, _, new_server = out["shadowed"]
    assert shadowed_who == out["spawned"][0] == "A"
    assert new_server != server
    # Before the fix: False, from the same server.
    assert out["fast"][:2] == ["A", True]
    assert out["fast"][2] != new_server
