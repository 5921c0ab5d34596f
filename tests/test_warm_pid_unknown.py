"""A warm worker whose launcher never learned its pid does not run its target.

The server hands a worker its request (a spare) or forks it, and only then writes the pid to
the launcher.  Killed in between (the OOM killer), the launcher's ``start()`` failed with
``ForkServerError`` while the worker ran on, known to nobody: a ``ctx.Pool``'s replacement
worker waited for tasks forever, holding the launcher's stdout and its resource tracker
(a CI run hung on it).  Real processes: a preload makes the server SIGKILL itself exactly
there, as it is about to write a pid.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _context_support import Engine, make_engine

_KILLER = """
import os
import signal

import multiprocessing.forkserver as forkserver


def write_signed(fd, n):
    os.kill(os.getpid(), signal.SIGKILL)  # the server, about to tell the launcher a pid


forkserver.write_signed = write_signed
"""

_TARGET = """
import os
import time


def target(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(20)  # a worker left running: bounded, so a failing run ends on its own
"""

_SCRIPT = """
    import json, os, time
    import spawnkit
    from {eng}.ns import NS
    from skpid_target import target

    if __name__ == "__main__":
        ctx = spawnkit.get_context("forkserver", namespace=NS, preload=["skpid_killer"])
        proc = ctx.Process(target=target, args=(os.environ["SKPID_MARKER"],))
        message = ""
        try:
            proc.start()
            outcome = "started"
        except Exception as exc:
            outcome = type(exc).__name__
            message = str(exc)
        time.sleep(3)  # a worker that runs its target writes the marker well within this
        print(json.dumps({{"outcome": outcome, "message": message}}), flush=True)
        os._exit(0)
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(tmp_path)
    (engine.root / "site" / "skpid_killer.py").write_text(_KILLER)
    (engine.root / "site" / "skpid_target.py").write_text(_TARGET)
    yield engine


def test_a_worker_whose_server_died_before_telling_its_pid_never_runs_its_target(
    engine: Engine,
) -> None:
    marker = engine.root / "target_ran"
    began = time.monotonic()
    out, err = engine.run(_SCRIPT, env={"SKPID_MARKER": str(marker)}, timeout=60)
    assert out["outcome"] == "ForkServerError"
    assert "before telling the launcher the pid" in out["message"]
    assert not marker.exists(), (
        f"the worker (pid {marker.read_text()}) ran its target though its launcher was told "
        "it never started"
    )
    assert "its launcher never learned its pid" in err
    # the launcher's stdout closed once it exited: no worker was left holding it
    assert time.monotonic() - began < 15
