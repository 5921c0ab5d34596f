"""A warm worker's start after its request (``protocol/_fork_child.py``): what multiprocessing's
child path gives user code is kept, and what depends on no request is done by the spare.

Real servers and real launches: the probe runs as each rank's entry and reports what a
worker's code can see of ``multiprocessing`` (its process, its parent, its children, stdin,
the authkey, an after-fork hook a preload registered), compared with a spawned worker's.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins

# Imported by the warm server as a preload: an after-fork hook, and a record of each time
# multiprocessing sets stdin to os.devnull (once per worker), on this process's clock.
_PRELOAD = """
import multiprocessing.util as util
import time

STDIN_AT = []
AFTER_FORK = []
_close_stdin = util._close_stdin


def _noting():
    STDIN_AT.append(time.monotonic())
    _close_stdin()


util._close_stdin = _noting


class _Hooked:
    pass


HOOKED = _Hooked()
util.register_after_fork(HOOKED, lambda obj: AFTER_FORK.append(__import__("os").getpid()))
"""

_PROBE = """
import multiprocessing
import os
import sys


def probe():
    from {preload} import AFTER_FORK, STDIN_AT
    me, parent = multiprocessing.current_process(), multiprocessing.parent_process()
    marks = dict(sys.modules["spawnkit.protocol.child"]._marks)
    return {{
        "name": me.name,
        "pid_matches": me.pid == os.getpid(),
        "daemon": me.daemon,
        "authkey": bytes(me.authkey),
        "parent": None if parent is None else (parent.name, parent.pid),
        "children": multiprocessing.active_children(),
        "stdin": (os.path.realpath(f"/proc/self/fd/{{sys.stdin.fileno()}}"), sys.stdin.read()),
        "after_fork": [pid == os.getpid() for pid in AFTER_FORK],
        "stdin_at": STDIN_AT,
        "handed": marks.get("handed"),
    }}
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for site in make_site(tmp_path, monkeypatch):
        (site.root / f"{site.tag}_pre.py").write_text(_PRELOAD)
        (site.root / f"{site.tag}_probe.py").write_text(_PROBE.format(preload=f"{site.tag}_pre"))
        yield site


def _launch(site: Site, method: str, nprocs: int = 2) -> list[dict[str, Any]]:
    preload = (f"{site.tag}_pre",) if method == "forkserver" else ()
    with spawn_with_plugins(
        f"{site.tag}_probe:probe",
        nprocs=nprocs,
        namespace=site.ns,
        start_method=method,
        preload=preload,
    ) as group:
        return list(group.results(timeout=60))


def _seen(result: dict[str, Any]) -> dict[str, Any]:
    """What both kinds of worker see alike: the name less the launch's own id."""
    seen = {k: v for k, v in result.items() if k not in ("stdin_at", "handed", "after_fork")}
    seen["name"] = re.sub(r"-[0-9a-f]{16}-", "-<launch>-", seen["name"])
    return seen


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_warm_worker_sees_multiprocessing_as_a_spawned_one_does(site: Site) -> None:
    """``current_process()`` (name, pid, daemon, authkey), ``parent_process()`` (the launcher),
    no children, stdin at ``os.devnull`` and empty: a spare's worker and a spawned worker
    alike, and an after-fork hook registered in the server runs once, in the worker."""
    _launch(site, "forkserver")  # the server starts; its spares are forked while it idles
    time.sleep(0.5)
    warm = _launch(site, "forkserver")
    spawned = _launch(site, "spawn")
    assert [_seen(r) for r in warm] == [_seen(r) for r in spawned]
    me = bytes(__import__("multiprocessing").current_process().authkey)
    for result in warm:
        assert result["parent"] == ("MainProcess", os.getpid())
        assert result["authkey"] == me
        assert result["stdin"] == (os.path.realpath(os.devnull), "")
        assert result["after_fork"] == [True]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_spare_sets_stdin_to_devnull_before_its_request(site: Site) -> None:
    """The spare's worker got its ``os.devnull`` stdin while it waited: nothing of it is
    left to do after the request (it was, in ``Process._bootstrap``, 0.05 ms a worker)."""
    _launch(site, "forkserver", 1)  # learns the pages; the spares are forked again after
    time.sleep(0.5)
    (result,) = _launch(site, "forkserver", 1)
    handed = result["handed"]
    assert handed is not None
    assert result["stdin_at"], "the worker's stdin was never set to os.devnull"
    assert [t for t in result["stdin_at"] if t > handed] == []
