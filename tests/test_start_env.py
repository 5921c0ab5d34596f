"""``env=`` entries read only as a process starts take effect in real spawned and warm workers.

Before: the worker set them in ``os.environ`` as its first stage, after the interpreter, the
loader and glibc had read theirs: ``PYTHONHASHSEED``, ``PYTHONPATH`` and ``LD_LIBRARY_PATH``
showed in ``os.environ`` and changed nothing.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spawnkit import _environ, spawn_with_plugins

ENTRY = """
import os, sys

def main():
    with open("/proc/self/environ", "rb") as f:  # what the process was exec'd with
        started = dict(x.decode().split("=", 1) for x in f.read().split(b"\\0") if b"=" in x)
    import only_on_env_path
    return {
        "hash": hash("spawnkit"),
        "env_path_module": only_on_env_path.WHERE,
        "started_with": {k: started.get(k) for k in ("LD_LIBRARY_PATH", "MALLOC_ARENA_MAX")},
        "environ": os.environ.get("LD_LIBRARY_PATH"),
    }
"""


def _hash_with_seed(seed: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", "print(hash('spawnkit'))"],
        env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return int(done.stdout)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    name = f"startenv_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(ENTRY)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "only_on_env_path.py").write_text("WHERE = __file__\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for var in ("LD_LIBRARY_PATH", "MALLOC_ARENA_MAX", "PYTHONHASHSEED"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / f"{name}.py"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_variables_read_at_start_reach_a_spawned_and_a_warm_worker(app: Path, method: str) -> None:
    extra = app.parent / "extra"
    env = {
        "PYTHONHASHSEED": "7",
        "PYTHONPATH": str(extra),
        "LD_LIBRARY_PATH": "/opt/spawnkit-test-libs",
        "MALLOC_ARENA_MAX": "2",
    }
    before = dict(os.environ)
    with spawn_with_plugins(
        f"{app.stem}:main", nprocs=2, start_method=method, env=env,
        ready_timeout=120, join_timeout=120,
    ) as group:  # fmt: skip
        results = group.results(timeout=120)
    assert dict(os.environ) == before  # the launcher's environment is as it was
    for got in results:
        assert got["hash"] == _hash_with_seed("7"), got
        assert got["env_path_module"] == str(extra / "only_on_env_path.py")
        assert got["started_with"] == {k: env[k] for k in ("LD_LIBRARY_PATH", "MALLOC_ARENA_MAX")}
        assert got["environ"] == env["LD_LIBRARY_PATH"]


def test_warm_servers_started_with_other_start_variables_are_other_servers(
    app: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPAWNKIT_WARM_BOOTSTRAP", "worker")  # env= then is not in the boot key
    hashes = {}
    for seed in ("1", "2"):
        env = {"PYTHONHASHSEED": seed, "PYTHONPATH": str(app.parent / "extra")}
        with spawn_with_plugins(
            f"{app.stem}:main", start_method="forkserver", env=env,
            ready_timeout=120, join_timeout=120,
        ) as group:  # fmt: skip
            hashes[seed] = group.results(timeout=120)[0]["hash"]
    assert hashes == {"1": _hash_with_seed("1"), "2": _hash_with_seed("2")}


def test_only_variables_read_at_start_that_differ_are_set_before_the_exec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "3")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    env = {"PYTHONHASHSEED": "3", "LD_PRELOAD": "/x.so", "OMP_NUM_THREADS": "1", "MY_VAR": "1"}
    assert _environ.read_at_start(env) == {"LD_PRELOAD": "/x.so"}  # the worker sets the rest


def test_pythonpath_entries_go_after_the_first_entry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/script", "/already", "/stdlib"])
    _environ.put_on_path(os.pathsep.join(["/a", "", "/already", "/b", "/a"]))
    assert sys.path == ["/script", "/a", "/b", "/already", "/stdlib"]


PLUGIN_PROBE = """
import os

def main():
    return os.environ.get("ENV_PATH_PLUGIN_RAN")
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_plugin_installed_only_on_env_pythonpath_loads_in_every_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Its folder was on every worker's ``sys.path`` and its plugin never loaded: the workers
    load what the launcher discovered, and the launcher looked without that folder."""
    from spawnkit import Namespace
    from spawnkit.testing import write_distribution

    tag = f"envpath{os.getpid()}{method}"
    extra = tmp_path / "extra"
    extra.mkdir()
    write_distribution(
        extra, f"{tag}-plugin", "1.0",
        entry_points={f"{tag}.plugins": {"p": f"{tag}_plugin:register"}},
        modules={f"{tag}_plugin": "import os\ndef register():\n"
                 "    os.environ['ENV_PATH_PLUGIN_RAN'] = __file__\n"},
    )  # fmt: skip
    (tmp_path / f"{tag}_entry.py").write_text(PLUGIN_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    path_before = list(sys.path)
    with spawn_with_plugins(
        f"{tag}_entry:main", nprocs=1, start_method=method, env={"PYTHONPATH": str(extra)},
        namespace=Namespace(tag, tag.upper()), ready_timeout=120, join_timeout=120,
    ) as group:  # fmt: skip
        results = group.results(timeout=120)
    assert results == [str(extra / f"{tag}_plugin.py")]  # before: [None]
    assert sys.path == path_before  # the launcher looked with it, and put its path back


_SCRIPT_TOP = """
import sys
sys.path.insert(0, {root!r})
import engcfg  # the launching script's own import: a spawned worker runs it again, first
import spawnkit

if __name__ == "__main__":
    for method in ("spawn", "forkserver"):
        with spawnkit.spawn_with_plugins(
            "engentry:main", start_method=method, env={{"ENGCFG_DEBUG": "1"}},
            ready_timeout=120, join_timeout=120,
        ) as group:
            print(method, group.results(timeout=120)[0])
"""


def test_env_reaches_what_the_launching_scripts_imports_read_in_a_spawned_worker(
    tmp_path: Path,
) -> None:
    """``import torch`` (``OMP_NUM_THREADS``) or an engine config module read at the top of the
    launching script: a spawned worker runs that script again before any stage, and env= was
    set by the first stage, too late (its constant read '0'); a warm worker had it right."""
    (tmp_path / "engcfg.py").write_text("import os\nDEBUG = os.environ.get('ENGCFG_DEBUG', '0')\n")
    entry = "import engcfg, os\n\ndef main():\n    return engcfg.DEBUG, os.environ['ENGCFG_DEBUG']"
    (tmp_path / "engentry.py").write_text(entry + "\n")
    script = tmp_path / "launch.py"
    script.write_text(_SCRIPT_TOP.format(root=str(tmp_path)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
        cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "ENGCFG_DEBUG"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["spawn ('1', '1')", "forkserver ('1', '1')"]


_ZONE = """
import os, time

def main():
    return time.tzname, time.timezone, time.localtime(0).tm_zone, os.environ.get("TZ")
"""


@pytest.mark.parametrize(
    ("method", "mode"), [("spawn", None), ("forkserver", "server"), ("forkserver", "worker")]
)
def test_env_tz_sets_the_zone_of_a_spawned_and_a_warm_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, mode: str | None
) -> None:
    """``env={"TZ": ...}``: a warm worker's ``time.tzname`` and ``localtime()`` stayed the
    server's (the C library and ``time`` read TZ once), while ``os.environ`` showed the zone
    asked for; a spawned worker, started with it, had it right."""
    name = f"zone_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(_ZONE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TZ", raising=False)
    env = {"TZ": "SKT-5"}  # a POSIX zone: no tz database needed
    if mode is not None:
        env["SPAWNKIT_WARM_BOOTSTRAP"] = mode
    with spawn_with_plugins(
        f"{name}:main", nprocs=2, start_method=method, env=env,
        ready_timeout=120, join_timeout=120,
    ) as group:  # fmt: skip
        results = group.results(timeout=120)
    assert results == [(("SKT", "SKT"), -5 * 3600, "SKT", "SKT-5")] * 2
    assert "TZ" not in os.environ


_LOCALE = """
import locale, sys

def main():
    return (
        locale.setlocale(locale.LC_CTYPE),
        sys.flags.utf8_mode,
        locale.getpreferredencoding(False),
        sys.getfilesystemencoding(),
    )
"""


def _locale_of_a_fresh_interpreter(env: dict[str, str]) -> list[object]:
    code = f"{_LOCALE}\nprint(repr(main()))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return list(ast.literal_eval(done.stdout))


@pytest.mark.parametrize(
    ("method", "mode"), [("spawn", None), ("forkserver", "server"), ("forkserver", "worker")]
)
def test_env_locale_is_the_locale_of_a_spawned_and_a_warm_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, mode: str | None
) -> None:
    """``env={"LANG": ..., "LC_ALL": ...}``: the interpreter sets its locale (``LC_CTYPE``)
    and its text encodings from them as it starts: a warm server started with the launcher's
    kept those in every worker it forked (``open()``'s default encoding, the file system's,
    UTF-8 mode), while ``os.environ`` there showed the locale asked for; a spawned worker,
    started with it, had it right."""
    name = f"loc_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(_LOCALE)
    monkeypatch.syspath_prepend(str(tmp_path))
    for var in ("LC_ALL", "LC_CTYPE", "PYTHONUTF8", "PYTHONCOERCECLOCALE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")  # the launcher's; every C library has both
    asked = {"LANG": "C", "LC_ALL": "C"}
    want = _locale_of_a_fresh_interpreter({**os.environ, **asked})
    assert want != _locale_of_a_fresh_interpreter(dict(os.environ))  # they differ here
    env = dict(asked)
    if mode is not None:
        env["SPAWNKIT_WARM_BOOTSTRAP"] = mode
    with spawn_with_plugins(
        f"{name}:main", nprocs=2, start_method=method, env=env,
        ready_timeout=120, join_timeout=120,
    ) as group:  # fmt: skip
        results = group.results(timeout=120)
    assert [list(r) for r in results] == [want] * 2


def test_locale_variables_are_read_at_start_only_where_they_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_CTYPE", raising=False)
    env = {"LANG": "C.UTF-8", "LC_ALL": "C", "LC_TIME": "C", "LANGUAGE": "de"}
    assert _environ.read_at_start(env) == {"LC_ALL": "C"}  # the worker sets the rest
