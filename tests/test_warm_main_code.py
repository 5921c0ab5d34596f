"""A warm worker runs the launcher's ``__main__`` from code the server compiled once.

Each worker still runs the script's top level as ``__mp_main__`` (``protocol/_main_code``);
what the script sees there must be what a spawned worker, which goes through ``runpy``,
sees: its globals, ``sys.argv``, ``sys.modules``, its package imported first, functions
that pickle by reference, and a failure of its top level reported to the launcher.  Real
launcher processes, run both as ``python -m pkg.mod`` and as ``python script.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import spawnkit

SRC = str(Path(spawnkit.__file__).resolve().parents[1])

_PACKAGE_INIT = """
import os
with open(os.environ["MAIN_LOG"], "a") as f:
    f.write(f"package {os.getpid()}\\n")
"""

_LAUNCHER = '''
"""the launcher's docstring"""
import os, sys
with open(os.environ["MAIN_LOG"], "a") as f:  # the top level, run once per worker
    f.write(f"{__name__} {os.getpid()}\\n")
if __name__ == "__mp_main__" and os.environ.get("MAIN_FAILS"):
    raise LookupError("the launcher's top level failed in a worker")
SEEN = (sys.argv[0], sys.modules.get("__mp_main__") is not None
        and vars(sys.modules["__mp_main__"]) is globals())


def helper():
    return 7


def facts(payload=None):
    import pickle
    m = sys.modules["__main__"]
    return {
        "name": m.__name__, "file": m.__file__, "doc": m.__doc__,
        "spec": getattr(m.__spec__, "name", None), "package": m.__package__,
        "cached": getattr(m, "__cached__", None), "loader": type(m.__loader__).__name__,
        "is_mp_main": sys.modules["__mp_main__"] is m, "seen": list(m.SEEN),
        "helper": [m.helper.__module__, pickle.loads(pickle.dumps(m.helper))()],
        "argv": sys.argv, "compiled": sys.modules["multiprocessing.spawn"].prepare.__name__,
    }


if __name__ == "__main__":
    import json
    from spawnkit import spawn_with_plugins
    from spawnkit.errors import ChildError
    out = {}
    for method in ("spawn", "forkserver"):
        try:
            with spawn_with_plugins(ENTRY, start_method=method, nprocs=2,
                                    ready_timeout=60) as group:
                out[method] = group.results(timeout=60)
        except ChildError as exc:
            said = "the launcher's top level failed" in str(exc)
            out[method] = [type(exc).__name__, exc.stage, said]
    print(json.dumps(out))
'''


def _launch(tmp_path: Path, how: str, fails: bool = False) -> tuple[dict[str, list], list[str]]:
    site = tmp_path / "site"
    (site / "mainpkg").mkdir(parents=True)
    (site / "mainpkg" / "__init__.py").write_text(_PACKAGE_INIT)
    entry = {"module": "mainpkg.launch:facts", "script": "__main__:facts"}[how]
    text = textwrap.dedent(_LAUNCHER).replace("ENTRY", repr(entry))
    (site / "mainpkg" / "launch.py").write_text(text)
    (site / "launch_script.py").write_text(text)
    log = tmp_path / "main.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, str(site)]), MAIN_LOG=str(log))
    env.pop("MAIN_FAILS", None)
    if fails:
        env["MAIN_FAILS"] = "1"
    args = ["-m", "mainpkg.launch"] if how == "module" else [str(site / "launch_script.py")]
    out = _run_launcher([*args, "one", "two"], site, env)
    return out, log.read_text().splitlines() if log.exists() else []


def _run_launcher(args: list[str], cwd: Path, env: dict[str, str]) -> Any:
    """Run a launcher in its own interpreter; what it printed last, as JSON."""
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["module", "script"])
def test_a_warm_worker_sees_the_launcher_main_as_a_spawned_one_does(
    tmp_path: Path, how: str
) -> None:
    out, log = _launch(tmp_path, how)
    spawned, warm = out["spawn"], out["forkserver"]
    assert {f["compiled"] for f in spawned} == {"prepare"}  # runpy, through the stdlib
    assert {f["compiled"] for f in warm} == {"prepare_compiled"}  # the server's code
    for facts in (*spawned, *warm):
        facts.pop("compiled")
    assert warm == spawned
    first = spawned[0]
    assert first["name"] == "__mp_main__" and first["is_mp_main"]
    assert first["helper"] == ["__mp_main__", 7]
    assert first["doc"] == "the launcher's docstring" and first["argv"][1:] == ["one", "two"]
    # While the top level ran, sys.argv[0] was its file and __mp_main__ its own module.
    assert first["seen"] == [first["file"], True]
    if how == "module":
        assert first["spec"] == "mainpkg.launch" and first["package"] == "mainpkg"
    else:
        assert first["spec"] is None and first["package"] == "" and first["loader"] == "NoneType"
    # The top level ran once in each of the four workers (and the launcher's own run), and a
    # module launcher's package was imported first in each, as runpy does.
    assert sum(line.startswith("__mp_main__ ") for line in log) == 4
    if how == "module":
        assert sum(line.startswith("package ") for line in log) >= 5


@pytest.mark.timeout(300)
def test_a_failing_launcher_top_level_fails_the_warm_worker_as_it_fails_a_spawned_one(
    tmp_path: Path,
) -> None:
    out, _ = _launch(tmp_path, "module", fails=True)
    assert out["forkserver"][0] == out["spawn"][0]
    assert out["forkserver"][2] and out["spawn"][2], out


_EDITED = """
import sys
VERSION = 1


def version(payload=None):
    return sys.modules["__main__"].VERSION


if __name__ == "__main__":
    import json
    from spawnkit import spawn_with_plugins
    seen = []
    for method in ("forkserver", "forkserver", "spawn"):
        with spawn_with_plugins("__main__:version", start_method=method, ready_timeout=60) as g:
            seen += g.results(timeout=60)
        with open(__file__) as f:  # edited between launches, as during a long debugging run
            text = f.read()
        with open(__file__, "w") as f:
            f.write(text.replace("VERSION = 1", "VERSION = 2"))
    print(json.dumps(seen))
"""


@pytest.mark.timeout(300)
def test_warm_workers_run_the_script_as_it_was_when_the_server_started(tmp_path: Path) -> None:
    # The server compiles the launching script once; a spawned worker reads the file anew.
    script = tmp_path / "edited_launcher.py"
    script.write_text(textwrap.dedent(_EDITED))
    env = dict(os.environ, PYTHONPATH=SRC)
    assert _run_launcher([str(script)], tmp_path, env) == [1, 1, 2]
