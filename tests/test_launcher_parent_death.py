"""A launcher that dies leaves nothing behind; cleanup(run_id) sweeps what escapes."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _launcher_support import Site, gone, make_site
from spawnkit.bootstrap import cleanup
from spawnkit.bootstrap._cleanup import record_run
from spawnkit.bootstrap._parent_death import RUN_ID_VAR


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


_LAUNCHER = """
import json, pathlib, sys, time
from spawnkit.namespace import Namespace
from spawnkit.bootstrap import spawn_with_plugins


def main():
    ns = Namespace({tag!r}, env_prefix={prefix!r})
    group = spawn_with_plugins({entry!r}, nprocs=2, namespace=ns, start_method=sys.argv[1])
    group.wait_ready(timeout=60)
    if len(sys.argv) > 2:  # wait for the workers' markers
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
            pathlib.Path(sys.argv[2] + str(r)).exists() for r in range(2)
        ):
            time.sleep(0.02)
    print(json.dumps({{"pids": group.pids, "run_id": group.run_id}}), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
"""

_GRANDPARENT = """
import os, subprocess, sys, time
from pathlib import Path
from spawnkit.bootstrap import current_spec

def run():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True)
    marker = os.environ["SKT_MARKER"] + str(current_spec().rank)
    Path(marker + ".tmp").write_text(str(child.pid))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)
"""


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        raise AssertionError(f"launcher printed nothing within {timeout} s")
    return proc.stdout.readline()


def _launch(site: Site, tmp_path: Path, method: str, entry: str, marker: str | None = None):
    script = tmp_path / "launcher.py"
    script.write_text(_LAUNCHER.format(tag=site.tag, prefix=site.tag.upper(), entry=entry))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site.root), *sys.path]))
    if marker:
        env["SKT_MARKER"] = marker
    args = [sys.executable, str(script), method, *([marker] if marker else [])]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if not gone(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_sigkilled_launcher_leaves_no_worker(site: Site, tmp_path: Path, method: str) -> None:
    launcher = _launch(site, tmp_path, method, site.entry("sleep_forever"))
    try:
        info = json.loads(_read_line(launcher, 60))
        tree = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
        assert set(info["pids"]) <= set(tree)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        killed_at = time.monotonic()
        alive = _wait_gone(info["pids"], 2.0)
        assert not alive, f"workers {alive} outlived their launcher by 2 s"
        assert time.monotonic() - killed_at < 2.0
        # Helpers (fork server, resource tracker) follow once the workers are gone.
        assert not _wait_gone(tree, 5.0)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)


def test_cleanup_ends_a_dead_launchers_orphans(site: Site, tmp_path: Path) -> None:
    (site.root / f"{site.tag}_gp.py").write_text(textwrap.dedent(_GRANDPARENT))
    marker = str(tmp_path / "grandchild")
    launcher = _launch(site, tmp_path, "spawn", f"{site.tag}_gp:run", marker)
    grandchildren: list[int] = []
    try:
        info = json.loads(_read_line(launcher, 60))
        grandchildren = [int(Path(marker + str(r)).read_text()) for r in range(2)]
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        assert not _wait_gone(info["pids"], 2.0)
        result = cleanup(info["run_id"], timeout=4.0)
        assert not result.survivors
        assert not _wait_gone(grandchildren, 2.0), "cleanup() left orphans of the run alive"
    finally:
        for pid in grandchildren:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)


def test_cleanup_finds_processes_by_environment_and_record() -> None:
    tagged_id = f"skt-env-{os.getpid()}-{time.monotonic_ns()}"
    recorded_id = f"skt-rec-{os.getpid()}-{time.monotonic_ns()}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    tagged = subprocess.Popen(sleeper, env=dict(os.environ, **{RUN_ID_VAR: tagged_id}))
    untagged = subprocess.Popen(sleeper)
    bystander = subprocess.Popen(sleeper)
    try:
        time.sleep(0.2)  # let exec() publish the environment
        record_run(recorded_id, [untagged.pid])
        result = cleanup(tagged_id, timeout=4.0)
        assert result.ended == [tagged.pid] and not result.survivors
        assert gone(tagged.pid)
        result = cleanup(recorded_id, timeout=4.0)
        assert result.ended == [untagged.pid]
        assert gone(untagged.pid)
        assert bystander.poll() is None  # nothing else was touched
        assert not cleanup(recorded_id)  # the record is gone; nothing left to do
    finally:
        for proc in (tagged, untagged, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_pdeathsig_arming_race_is_closed(tmp_path: Path) -> None:
    """A worker whose launcher died before PR_SET_PDEATHSIG was armed still exits at once."""
    code = textwrap.dedent(
        """
        import multiprocessing, time
        from spawnkit.bootstrap import _parent_death
        from spawnkit.spec import ProcessSpec
        r, w = multiprocessing.Pipe(duplex=False)
        # The recorded launcher pid is not our parent: as if it died before prctl() ran.
        spec = ProcessSpec(entry="m:f", death_conn=r,
                           extra={"parent_pid": 2**22 + 12345, "pdeathsig": True})
        _parent_death.arm(spec)
        time.sleep(30)
        print("still alive")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, cwd=tmp_path
    )
    assert proc.returncode == _exit_code()
    assert "still alive" not in proc.stdout
    assert "re-parented before PR_SET_PDEATHSIG" in proc.stderr


def _exit_code() -> int:
    from spawnkit.bootstrap._parent_death import PARENT_DIED_EXIT_CODE

    return PARENT_DIED_EXIT_CODE
