"""A launcher that dies leaves nothing behind, grandchildren included; cleanup() sweeps the rest."""

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
from typing import Any

import psutil
import pytest

from _launcher_support import Site, gone, make_site
from spawnkit import cleanup
from spawnkit.bootstrap._parent_death import RUN_ID_VAR
from spawnkit.launch._cleanup import record_run


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


_LAUNCHER = """
import json, pathlib, sys, time
from spawnkit.namespace import Namespace
from spawnkit import spawn_with_plugins


def main():
    ns = Namespace({tag!r}, env_prefix={prefix!r})
    method, _, context = sys.argv[1].partition("/")
    context = context or "multiprocessing"
    group = spawn_with_plugins(
        {entry!r}, nprocs=2, namespace=ns, start_method=method, context=context
    )
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
import ctypes, os, subprocess, sys, time
from pathlib import Path
from spawnkit.bootstrap import current_spec

# A daemon: the started process forks, its child starts a new session, and the
# started process exits, so the daemon is re-parented away from the worker's tree.
_DAEMON = (
    "import os, sys, time\\n"
    "if os.fork():\\n"
    "    os._exit(0)\\n"
    "os.setsid()\\n"
    "sys.stdout.write(str(os.getpid()) + chr(10)); sys.stdout.flush()\\n"
    "time.sleep(600)\\n"
)

def _publish(pids):
    marker = os.environ["SKT_MARKER"] + str(current_spec().rank)
    Path(marker + ".tmp").write_text(" ".join(map(str, pids)))
    os.replace(marker + ".tmp", marker)

def _grandchild():
    # Its own session, as servers start helpers: a process-group kill would miss it.
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True).pid

def run():
    _publish([_grandchild()])
    time.sleep(600)

def run_holding_gil():
    _publish([_grandchild()])
    # Native code that never releases the GIL: the worker's own watcher thread cannot run.
    ctypes.PyDLL(None).sleep(600)

def run_with_daemon():
    started = subprocess.Popen([sys.executable, "-c", _DAEMON], stdout=subprocess.PIPE, text=True)
    daemon = int(started.stdout.readline())
    started.wait(30)
    _publish([_grandchild(), daemon])
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


def _kill_launcher_and_watch(
    site: Site, tmp_path: Path, mode: str, entry: str
) -> tuple[dict[str, Any], list[list[int]], list[int], float]:
    """Start a launcher, SIGKILL it once its workers started their own children.

    Returns the launcher's info, each rank's published pids, the pids still
    alive 2 s after the launcher's death (workers and descendants), and how
    long until the last of the watched ones went.
    """
    (site.root / f"{site.tag}_gp.py").write_text(textwrap.dedent(_GRANDPARENT))
    marker = str(tmp_path / "grandchild")
    launcher = _launch(site, tmp_path, mode, f"{site.tag}_gp:{entry}", marker)
    published: list[list[int]] = []
    try:
        info = json.loads(_read_line(launcher, 90))
        published = [[int(p) for p in Path(marker + str(r)).read_text().split()] for r in range(2)]
        # Every worker and the child each one started (in its own session).
        watched = [*info["pids"], *(pids[0] for pids in published)]
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        killed_at = time.monotonic()
        alive = _wait_gone(watched, 2.0)
        return info, published, alive, time.monotonic() - killed_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        # Whatever the assertion says, no grandchild may outlive the test.
        _kill([pids[0] for pids in published])


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize(
    "mode",
    [
        "spawn/multiprocessing",
        "forkserver/multiprocessing",
        "spawn/multiprocess",
        "forkserver/multiprocess",
    ],
)
def test_sigkilled_launcher_takes_every_workers_tree_with_it(
    site: Site, tmp_path: Path, mode: str
) -> None:
    """No cleanup() call: the workers *and the processes they started* end within 2 s."""
    _info, published, alive, _took = _kill_launcher_and_watch(site, tmp_path, mode, "run")
    grandchildren = [pids[0] for pids in published]
    assert not alive, f"{alive} outlived their launcher by 2 s (grandchildren: {grandchildren})"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_worker_stuck_holding_the_gil_still_ends_with_its_tree(
    site: Site, tmp_path: Path, method: str
) -> None:
    """The worker's own watcher thread cannot run; a guardian process ends the tree: the
    worker's own under spawn, its fork server's (one for all its workers) under forkserver."""
    _info, _published, alive, _took = _kill_launcher_and_watch(
        site, tmp_path, method, "run_holding_gil"
    )
    assert not alive, f"{alive} outlived their launcher by 2 s"


def test_cleanup_ends_what_left_the_workers_tree(site: Site, tmp_path: Path) -> None:
    """A daemon re-parented away from its worker is the case the OS cannot tie to the launcher."""
    info, published, alive, _took = _kill_launcher_and_watch(
        site, tmp_path, "spawn", "run_with_daemon"
    )
    daemons = [pids[1] for pids in published]
    try:
        assert not alive
        assert not [p for p in daemons if gone(p)], "the daemons should have escaped the tree"
        result = cleanup(info["run_id"], timeout=4.0)
        assert not result.survivors
        assert sorted(result.ended) == sorted(daemons)
        assert not _wait_gone(daemons, 2.0), "cleanup() left the run's daemons alive"
    finally:
        _kill(daemons)


def test_cleanup_finds_processes_by_environment_and_record() -> None:
    tagged_id = f"skt-env-{os.getpid()}-{time.monotonic_ns()}"
    recorded_id = f"skt-rec-{os.getpid()}-{time.monotonic_ns()}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    tagged = subprocess.Popen(sleeper, env=dict(os.environ, **{RUN_ID_VAR: tagged_id}))
    untagged = subprocess.Popen(sleeper)
    bystander = subprocess.Popen(sleeper)
    # Another run whose id starts with this one's: a whole variable matches, not a prefix.
    lookalike = subprocess.Popen(sleeper, env=dict(os.environ, **{RUN_ID_VAR: tagged_id + "0"}))
    try:
        time.sleep(0.2)  # let exec() publish the environment
        record_run(recorded_id, [untagged.pid])
        result = cleanup(tagged_id, timeout=4.0)
        assert result.ended == [tagged.pid] and not result.survivors
        assert gone(tagged.pid)
        result = cleanup(recorded_id, timeout=4.0)
        assert result.ended == [untagged.pid]
        assert gone(untagged.pid)
        assert bystander.poll() is None and lookalike.poll() is None  # nothing else touched
        assert not cleanup(recorded_id)  # the record is gone; nothing left to do
    finally:
        for proc in (tagged, untagged, bystander, lookalike):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_pdeathsig_arming_race_is_closed(tmp_path: Path) -> None:
    """A worker whose launcher died before PR_SET_PDEATHSIG was armed still exits at once."""
    code = textwrap.dedent(
        """
        import multiprocessing, time
        from spawnkit.bootstrap import _parent_death
        r, w = multiprocessing.Pipe(duplex=False)
        # The recorded launcher pid is not our parent: as if it died before prctl() ran.
        _parent_death.arm("run1", r, 0, parent_pid=2**22 + 12345, pdeathsig=True)
        time.sleep(30)
        print("still alive")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, cwd=tmp_path
    )
    assert proc.returncode == _exit_code()
    assert "still alive" not in proc.stdout
    assert "already re-parented when it armed its watch" in proc.stderr


def test_a_worker_that_exits_at_once_lets_its_watcher_thread_start_first() -> None:
    """A worker whose entry returned within milliseconds reached interpreter finalization
    before its new watcher thread ever ran; on CPython 3.10 (gh-108987) that thread then
    started on the freed interpreter state and the worker died of SIGSEGV after its result
    was sent (CI: test_tty_without_rich_prints_plain_lines).  Here the thread cannot take the
    GIL on a timer (a switch interval of 1000 s): it has run by finalization only because exit
    waits for it."""
    code = textwrap.dedent(
        """
        import atexit, multiprocessing.connection, sys
        from spawnkit.bootstrap import _parent_death

        # registered first, so it runs last, as finalization begins: a thread that has run
        # Python code has a frame
        atexit.register(lambda: print("threads with a frame:", len(sys._current_frames())))
        r, w = multiprocessing.Pipe(duplex=False)
        sys.setswitchinterval(1000)
        _parent_death.arm("run1", r, 0, parent_pid=None, pdeathsig=False)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "threads with a frame: 2" in proc.stdout, proc.stdout + proc.stderr


def _exit_code() -> int:
    from spawnkit.bootstrap._parent_death import PARENT_DIED_EXIT_CODE

    return PARENT_DIED_EXIT_CODE


def test_cleanup_does_not_list_a_zombie_it_did_not_end() -> None:
    """A recorded pid that is already a zombie was not ended by cleanup(), nor does it survive."""
    run_id = f"skt-zombie-{os.getpid()}-{time.monotonic_ns()}"
    # The holder forks a child that exits at once and is never reaped: a zombie that is
    # not our child, so nothing here can reap it either.
    holder_code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "print(pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", holder_code], stdout=subprocess.PIPE, text=True
    )
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        zombie = int(_read_line(holder, 30))
        deadline = time.monotonic() + 10
        while psutil.Process(zombie).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        record_run(run_id, [zombie, live.pid])
        started = time.monotonic()
        result = cleanup(run_id, timeout=4.0)
        assert result.ended == [live.pid]
        assert zombie not in result.survivors
        assert time.monotonic() - started < 3.0  # no wait for a zombie that cannot go
    finally:
        for proc in (holder, live):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


_AHEAD = """
import os, sys, time
from multiprocessing import Pipe
from spawnkit.bootstrap import _parent_death as pd

pd._server_guarded = True  # as in a warm server's spare: its server's guardian covers it
pd.watch_ahead()
tasks = len(os.listdir("/proc/self/task"))
r, w = Pipe(duplex=False)
pd.arm(None, r, 3, os.getppid(), False)
print(tasks, len(os.listdir("/proc/self/task")), flush=True)
w.close()  # the launcher's end: gone
time.sleep(30)
print("still running", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task")
def test_a_watcher_started_ahead_is_the_one_arm_uses_and_it_ends_the_worker() -> None:
    """A spare starts the death-pipe watcher while idle (``watch_ahead``); ``arm`` hands it the
    pipe instead of starting a second thread, and that parked thread ends the worker when the
    pipe closes, as the one ``arm`` would have started."""
    proc = subprocess.run(
        [sys.executable, "-c", _AHEAD], capture_output=True, text=True, timeout=20
    )
    assert proc.stdout.split() == ["2", "2"], proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert "worker rank 3" in proc.stderr and "its death pipe closed" in proc.stderr
