"""What the standard library's multiprocessing defaults do never changes what spawnkit launches.

Python 3.14 makes ``forkserver`` the default start method on Linux, and
3.13.8 / 3.14.1 make the stdlib forkserver really preload ``__main__`` (for
eleven years a dead ``main_path=`` branch).  Both are tested here on today's
versions: a launching script sets the start method itself, and the fixed
preload is reproduced by handing the stdlib forkserver the ``main_path`` that
the fix passes it.  Every launch is a real script in a real interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import ConfigError

TIMEOUT_S = 240

_START_METHOD_SCRIPT = """
import json, multiprocessing, os, sys
sys.path[:0] = {paths!r}
import psutil
from spawnkit import spawn_with_plugins
from spawnkit.namespace import Namespace

if __name__ == "__main__":
    multiprocessing.set_start_method({user!r})  # the user's own default, before any launch
    ns = Namespace({tag!r}, env_prefix={prefix!r})
    out = {{"launcher": os.getpid()}}
    for method in ("spawn", "forkserver"):
        with spawn_with_plugins({entry!r}, namespace=ns, start_method=method,
                                ready_timeout=120) as group:
            result = group.results(timeout=120)[0]
        result["parent_cmdline"] = " ".join(psutil.Process(result["ppid"]).cmdline())
        out[method] = result
    from multiprocessing import forkserver
    out["stdlib_forkserver"] = forkserver._forkserver._forkserver_pid
    out["default_after"] = multiprocessing.get_start_method()
    print(json.dumps(out))
"""

_MAIN_PRELOAD_SCRIPT = """
import json, multiprocessing, os, sys
sys.path[:0] = {paths!r}
with open({log!r}, "a") as fh:  # every import of this script, by whom
    fh.write(f"{{os.getpid()}} {{__name__}}\\n")
from {pkg}.target import func  # a hook target, bound at module scope
from spawnkit import spawn_with_plugins
from spawnkit.namespace import Namespace

def warm_entry():
    return {{"pid": os.getpid(), "ppid": os.getppid(), "func": func()}}

def stdlib_child(conn):
    conn.send((os.getpid(), os.getppid()))

def _preload_main_as_fixed():
    # What 3.13.8 / 3.14.1 changed: the stdlib forkserver is given main_path, so its
    # '__main__' preload (the default preload list) imports this script in the server.
    from multiprocessing import spawn
    original = spawn.get_preparation_data
    def with_main_path(name):
        data = original(name)
        if "init_main_from_path" in data:
            data["main_path"] = data["init_main_from_path"]
        return data
    spawn.get_preparation_data = with_main_path

if __name__ == "__main__":
    multiprocessing.set_start_method("forkserver")
    multiprocessing.set_forkserver_preload(["__main__"])
    if {preloads!r}:
        _preload_main_as_fixed()
    reader, writer = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.Process(target=stdlib_child, args=(writer,))
    child.start()
    stdlib = reader.recv()
    child.join(60)
    ns = Namespace({tag!r}, env_prefix={prefix!r})
    with spawn_with_plugins(warm_entry, namespace=ns, start_method="forkserver",
                            ready_timeout=120) as group:
        warm = group.results(timeout=120)[0]
    print(json.dumps({{"stdlib": stdlib, "warm": warm}}))
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _run_script(path: Path, text: str) -> dict[str, object]:
    path.write_text(textwrap.dedent(text))
    proc = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=path.parent,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def _paths(site: Site) -> list[str]:
    return [str(site.root), str(Path(__file__).parent)]


@pytest.mark.parametrize("user_method", ["forkserver", "spawn"])
def test_the_users_own_start_method_changes_nothing_spawnkit_launches(
    site: Site, tmp_path: Path, user_method: str
) -> None:
    out = _run_script(
        tmp_path / "launch.py",
        _START_METHOD_SCRIPT.format(
            paths=_paths(site),
            user=user_method,
            tag=site.tag,
            prefix=site.tag.upper(),
            entry=site.entry(),
        ),
    )
    spawned, warm = out["spawn"], out["forkserver"]
    assert isinstance(spawned, dict) and isinstance(warm, dict)
    # spawn: a fresh interpreter, the launcher's own child, hooks applied in it.
    assert spawned["ppid"] == out["launcher"] and spawned["hooked"] == "orig+hooked"
    # forkserver: forked by spawnkit's own warm server, never by the stdlib's.
    assert warm["ppid"] != out["launcher"] and warm["hooked"] == "orig+hooked"
    assert "spawnkit.protocol.warm_main" in str(warm["parent_cmdline"])
    assert out["stdlib_forkserver"] is None
    assert out["default_after"] == user_method  # and the user's setting is left as it was


@pytest.mark.parametrize("stdlib_preloads_main", [False, True], ids=["before-fix", "after-fix"])
def test_warm_start_holds_whether_or_not_the_stdlib_forkserver_preloads_main(
    site: Site, tmp_path: Path, stdlib_preloads_main: bool
) -> None:
    log = tmp_path / "imports.log"
    out = _run_script(
        tmp_path / "launch.py",
        _MAIN_PRELOAD_SCRIPT.format(
            paths=_paths(site),
            log=str(log),
            pkg=site.pkg,
            preloads=stdlib_preloads_main,
            tag=site.tag,
            prefix=site.tag.upper(),
        ),
    )
    imports = [tuple(line.split()) for line in log.read_text().splitlines()]
    by_pid = {int(pid): name for pid, name in imports}
    stdlib_child, stdlib_server = out["stdlib"]  # type: ignore[misc]
    # The two worlds are real: the stdlib forkserver imported the script itself, or its child did.
    if stdlib_preloads_main:
        assert by_pid.get(stdlib_server) == "__mp_main__" and stdlib_child not in by_pid
    else:
        assert stdlib_server not in by_pid and by_pid.get(stdlib_child) == "__mp_main__"
    warm = out["warm"]
    assert isinstance(warm, dict)
    # Either way, spawnkit's worker imported the script itself, after its server applied the
    # hooks, so the name the script bound at module scope is the patched one ...
    assert warm["func"] == "orig+hooked"
    assert by_pid.get(warm["pid"]) == "__mp_main__"
    # ... and spawnkit's server never imported the script.
    assert warm["ppid"] not in by_pid and warm["ppid"] != stdlib_server


@pytest.mark.parametrize("name", ["__main__", "__mp_main__"])
def test_preloading_main_is_refused_before_any_server_starts(site: Site, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        spawn_with_plugins(
            site.entry(), namespace=site.ns, start_method="forkserver", preload=("json", name)
        )
    assert info.value.setting == "preload"
    assert f"preload={name!r}" in str(info.value) and "__mp_main__" in str(info.value)
