"""A warm server forks its next workers ahead of the requests (``protocol/_fork_loop.py``).

Real servers, real launches: a spare is found by its process name among the server's
children, and each test checks what a user would see go wrong if a spare were mishandled
(a launch that hangs, a worker holding the server's sockets, a process outliving its server).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from _launcher_support import Site, gone, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import ConfigError
from spawnkit.protocol._fork_loop import SPARE_NAME, SPARES_VAR

_PROBE = """
import os

def probe():
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    return {"pid": os.getpid(), "ppid": os.getppid(), "comm": comm, "fds": fds}

def sleep_forever():
    import time
    time.sleep(600)
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for site in make_site(tmp_path, monkeypatch):
        (site.root / f"{site.tag}_probe.py").write_text(_PROBE)
        yield site


def _launch(
    site: Site,
    nprocs: int = 1,
    context: str = "multiprocessing",
    env: dict[str, str] | None = None,
) -> list[Any]:
    with spawn_with_plugins(
        f"{site.tag}_probe:probe",
        nprocs=nprocs,
        namespace=site.ns,
        start_method="forkserver",
        context=context,
        env=env,
    ) as group:
        return list(group.results(timeout=60))


def _spares(server: int) -> list[int]:
    found = []
    for child in psutil.Process(server).children():
        try:
            if child.name().startswith(SPARE_NAME):
                found.append(child.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return sorted(found)


def _wait_spares(server: int, count: int, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(found := _spares(server)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(found) >= count, f"server {server} has spares {found}, expected {count}"
    return found


def _wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if not gone(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


@pytest.mark.parametrize("context", ["multiprocessing", "multiprocess"])
def test_the_next_worker_is_the_spare_forked_before_its_launch(site: Site, context: str) -> None:
    (first,) = _launch(site, context=context)
    # The first worker teaches the server the pages a worker writes (protocol/_prefault);
    # a spare forked before the server read that is let go for one that holds them, so the
    # spare seen now could be replaced before the next launch.  From the second on, it stays.
    _launch(site, context=context)
    server = first["ppid"]
    _wait_spares(server, 1)  # two when the launches came as one burst
    # Every child the server has now was forked ahead of the launch, renamed or not yet (a
    # spare forked first may rename itself after the next one: the name alone races).
    ahead = {child.pid for child in psutil.Process(server).children()}
    (second,) = _launch(site, context=context)
    assert second["pid"] in ahead, "the launch forked a worker though a spare was waiting"
    assert second["ppid"] == server
    # The worker does not keep the spare's name: ps and a user's tools see the server's.
    assert second["comm"] == first["comm"] and not second["comm"].startswith(SPARE_NAME)


def _sockets(fds: dict[Any, str]) -> set[str]:
    return {target for target in fds.values() if target.startswith("socket:")}


def test_a_worker_from_a_spare_holds_no_socket_of_its_server(site: Site) -> None:
    first, _ = _launch(site, nprocs=2)  # the pool grows to two: the second spare holds
    server = first["ppid"]  # a copy of nothing of the first's
    _wait_spares(server, 2)
    results = _launch(site, nprocs=3)  # two from spares, one forked on request
    server_fds = {}
    for fd in os.listdir(f"/proc/{server}/fd"):
        try:
            server_fds[fd] = os.readlink(f"/proc/{server}/fd/{fd}")
        except OSError:
            continue
    ours = _sockets(server_fds)
    assert ours, "the server holds its listener and spare sockets; the probe must see them"
    for r in results:
        assert not _sockets(r["fds"]) & ours, f"worker {r['pid']} holds server sockets"
    # Every worker, however it was started, holds the same kinds and number of descriptors.
    kinds = [sorted(t.split(":")[0] for t in r["fds"].values()) for r in results]
    assert kinds[0] == kinds[1] == kinds[2], kinds


def test_a_spare_killed_while_idle_is_replaced_and_the_launch_still_works(site: Site) -> None:
    (first,) = _launch(site)
    server = first["ppid"]
    (spare,) = _wait_spares(server, 1)
    os.kill(spare, signal.SIGKILL)
    assert not _wait_gone([spare])
    (second,) = _launch(site)
    assert second["pid"] != spare and second["ppid"] == server
    # The server reaped it (no zombie left) and forked a new one.
    replacement = _wait_spares(server, 1)
    assert spare not in replacement
    assert not psutil.pid_exists(spare) or psutil.Process(spare).ppid() != server


_SUBREAPER = """
import ctypes, json, sys, time
import psutil
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to this process
from spawnkit import Namespace, spawn_with_plugins
from spawnkit.protocol import warm
tag, entry = sys.argv[1], sys.argv[2]
ns = Namespace(tag, env_prefix=tag.upper())
with spawn_with_plugins(entry, nprocs=2, namespace=ns, start_method="forkserver") as group:
    server = group.results(timeout=60)[0]["ppid"]
def spares_of(server):
    found = []
    for child in psutil.Process(server).children():
        try:
            if child.name().startswith("{name}"):
                found.append(child.pid)
        except psutil.NoSuchProcess:  # a worker of the group, gone as it was listed
            pass
    return found
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    spares = spares_of(server)
    if len(spares) == 2:
        break
    time.sleep(0.01)
warm.shutdown_forkservers()
time.sleep(0.5)
left = []
for pid in spares:
    try:
        left.append((pid, psutil.Process(pid).status(), psutil.Process(pid).ppid()))
    except psutil.NoSuchProcess:
        pass
print(json.dumps({{"spares": spares, "left": left}}))
"""


def test_spares_that_keep_dying_are_no_longer_forked(site: Site) -> None:
    """A spare killed three times in a row: the server stops forking spares (it would fork one
    every few milliseconds, unseen) and still serves every launch, forked on request."""
    (first,) = _launch(site)
    server = first["ppid"]
    killed: list[int] = []
    for _ in range(3):
        (spare,) = _wait_spares(server, 1)
        os.kill(spare, signal.SIGKILL)
        killed.append(spare)
        assert not _wait_gone([spare])
        deadline = time.monotonic() + 5  # until the server reaped it
        while psutil.pid_exists(spare) and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(0.3)  # far past the idle wait before a spare
    assert _spares(server) == []
    (second,) = _launch(site)
    assert second["ppid"] == server and second["pid"] not in killed


def test_a_server_shut_down_reaps_its_spares(site: Site) -> None:
    """Run where this process is not: under a subreaper that never reaps, as a container's first
    process may be; a spare the server did not reap would stay there as a zombie."""
    script = _SUBREAPER.format(name=SPARE_NAME)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site.root), *sys.path]))
    out = subprocess.run(
        [sys.executable, "-c", script, site.tag, f"{site.tag}_probe:probe"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(found["spares"]) == 2, found
    assert found["left"] == [], f"spares outlived their server's shutdown: {found['left']}"


def test_a_sigkilled_server_leaves_no_spare(site: Site) -> None:
    with spawn_with_plugins(
        f"{site.tag}_probe:sleep_forever", namespace=site.ns, start_method="forkserver"
    ) as running:
        running.wait_ready(timeout=60)
        (worker,) = running.pids
        server = psutil.Process(worker).ppid()
        spares = _wait_spares(server, 1)
        os.kill(server, signal.SIGKILL)
        # A spare reads its server's death as EOF on its socket: no other process (the running
        # worker included) may hold the server's end.
        assert not _wait_gone(spares), f"spares {spares} outlived their SIGKILLed server"
        running.terminate()


def test_spares_can_be_turned_off(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARES_VAR, "0")
    (first,) = _launch(site)
    time.sleep(0.3)  # far past the server's idle wait before a spare
    assert _spares(first["ppid"]) == []
    (second,) = _launch(site)
    assert second["ppid"] == first["ppid"] and second["pid"] != first["pid"]


def test_spares_can_be_turned_off_in_env(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """``env=`` counts as if set in the launcher: the server, not only its workers, reads it."""
    monkeypatch.delenv(SPARES_VAR, raising=False)
    off = {SPARES_VAR: "0"}
    (first,) = _launch(site, env=off)
    time.sleep(0.3)  # far past the server's idle wait before a spare
    assert _spares(first["ppid"]) == []
    (second,) = _launch(site, env=off)  # the same setting: the same server
    assert second["ppid"] == first["ppid"] and _spares(first["ppid"]) == []
    (third,) = _launch(site)  # without it: another server, with the default's spares
    assert third["ppid"] != first["ppid"]
    _wait_spares(third["ppid"], 1)


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_spare_count_in_env_is_refused_before_a_server_starts(
    site: Site, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.delenv(SPARES_VAR, raising=False)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError, match=f"{SPARES_VAR}={value!r} \\(in env=\\) is not a count"):
        _launch(site, env={SPARES_VAR: value})
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not [p for p in started if not gone(p)], "a server started before the refusal"


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_spare_count_is_refused_before_a_server_starts(
    site: Site, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(SPARES_VAR, value)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError, match=f"{SPARES_VAR}={value!r} is not a count") as info:
        _launch(site)
    assert info.value.setting == SPARES_VAR
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not [p for p in started if not gone(p)], "a server started before the refusal"


def test_the_pool_grows_to_the_largest_group_and_no_further(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SPARES_VAR, "2")
    (first, *_rest) = _launch(site, nprocs=3)
    server = first["ppid"]
    assert len(_wait_spares(server, 2)) == 2
    time.sleep(0.3)  # a third would be forked by now if the limit were not kept
    assert len(_spares(server)) == 2
