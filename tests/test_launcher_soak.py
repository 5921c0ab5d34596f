"""Many start/teardown cycles leak nothing: file descriptors, threads, processes, run records."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins
from spawnkit.launch._cleanup import _record_path
from spawnkit.protocol._fork_loop import SPARE_NAME, most_spares

CYCLES = 200


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _fds() -> dict[str, str]:
    """Open descriptors and what each points at (a failure prints the new ones)."""
    gc.collect()  # a group dropped but not yet collected still holds its pipes
    where = f"/proc/{os.getpid()}/fd"
    found = {}
    for fd in os.listdir(where):
        try:
            found[fd] = os.readlink(f"{where}/{fd}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return found


def _settled(baseline: int) -> dict[str, str]:
    """The open descriptors once the last group's relay threads closed theirs (bounded wait).

    Ten seconds, not three: under a loaded CI machine a transient descriptor of another thread
    of this xdist worker once outlived three seconds and read as growth.
    """
    deadline = time.monotonic() + 10
    while len(found := _fds()) > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _children() -> set[int]:
    """This process's descendants, a warm server's idle spares left out (``_spares`` counts
    them): a spare is the next worker, forked ahead, and each launch takes one and adds one."""
    return {p.pid for p in psutil.Process().children(recursive=True) if not _is_spare(p)}


def _is_spare(proc: psutil.Process) -> bool:
    try:
        return proc.name().startswith(SPARE_NAME)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def _spares() -> dict[int, list[int]]:
    """Idle spares by the pid of the server that forked them."""
    found: dict[int, list[int]] = {}
    for proc in psutil.Process().children(recursive=True):
        if _is_spare(proc):
            found.setdefault(proc.ppid(), []).append(proc.pid)
    return found


@pytest.mark.parametrize("cycle", ["finish", "terminate", "fail"])
def test_start_teardown_cycles_leak_nothing(site: Site, cycle: str) -> None:
    """200 groups through the warm (forkserver) path: each finishes, is terminated, or fails."""
    entry = site.entry("quick" if cycle == "finish" else "sleep_forever")
    env = {"SKT_FAULT_STAGE": "entry", "SKT_FAULT_KIND": "raise"} if cycle == "fail" else None
    if cycle == "fail":
        entry = site.entry()

    run_ids: list[str] = []

    def one() -> None:
        group = spawn_with_plugins(
            entry, namespace=site.ns, start_method="forkserver", env=env, grace_period=0.5
        )
        run_ids.append(group.run_id)
        with group:
            if cycle == "finish":
                assert group.join(timeout=30)
            elif cycle == "terminate":
                group.wait_ready(timeout=30)
            else:
                with pytest.raises(Exception, match="injected fault"):
                    group.join(timeout=30)

    one()  # warm up: fork server and resource tracker start once and stay
    fds, threads, children = _fds(), threading.active_count(), _children()
    started = time.monotonic()
    counts = []
    for _half in range(2):
        for _ in range(CYCLES // 2):
            one()
        counts.append(len(_settled(len(fds))))
    elapsed = time.monotonic() - started
    # A leak grows with the cycles: a group that leaks one descriptor in a hundred leaves
    # two or more here, and more after the second half than after the first.  One more than
    # the baseline and no growth is not this test's: a socket another thread of this xdist
    # worker opened meanwhile (seen once in CI: Ray's client of an earlier test).  Fewer is a
    # transient fd of the warm-up or of pytest itself that closed.  The failure names them.
    after = _settled(len(fds))
    new = {fd: target for fd, target in after.items() if fds.get(fd) != target}
    assert len(after) <= len(fds) + 1, f"file descriptors leaked: {new}"
    # Growth counts only if it is still there at the end: a descriptor above the baseline after
    # the second half that closed before `after` was taken is transient, not a leak (CI saw
    # [34, 35] with nothing new at the end).
    grew = counts[1] > counts[0] and counts[1] > len(fds) and len(after) > len(fds)
    assert not grew, f"descriptors grow: {counts} {new}"
    assert threading.active_count() == threads, "threads leaked"
    deadline = time.monotonic() + 3
    while _children() - children and time.monotonic() < deadline:
        time.sleep(0.05)  # forkserver workers are reaped by the server, asynchronously
    assert _children() - children == set(), "processes leaked"
    # Spares do not pile up: launches less than 50 ms apart count as one burst and grow a
    # server's pool, never past the most it may keep.
    spares = _spares()
    assert all(len(pids) <= most_spares() for pids in spares.values()), f"spares pile up: {spares}"
    assert set(spares) <= children, f"spares of a server this test did not start: {spares}"
    assert not [rid for rid in run_ids if _record_path(rid).exists()], "run records leaked"
    print(f"{CYCLES} {cycle} cycles in {elapsed:.1f} s ({elapsed / CYCLES * 1000:.0f} ms each)")
