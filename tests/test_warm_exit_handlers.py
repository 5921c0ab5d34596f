"""A warm worker runs, as it exits, the exit handlers a spawned worker runs.

A spawned worker registers ``atexit`` handlers as its plugins load, as the modules it imports
are imported and as its entry runs, and its interpreter calls them at exit.  A warm worker is
forked from a server that did the first two once, and the fork loop ends it with ``os._exit``:
on Python 3.10-3.12 it ran none of them, not even its entry's; on 3.13 it ran its own but
dropped the plugins' and the preloads'.  A plugin's profile dump or metrics flush was lost on
every warm worker, with nothing said.  A finalizer of an object the server made (shared by
every worker) stays the server's to run.  Real launchers, a real installed plugin, real
spawned and forked workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _plugin_app import LAUNCH, run_script, write_app

_LAUNCHER = LAUNCH + """
from spawnkit.protocol import warm

if __name__ == "__main__":
    spawned = launch("work:main", "spawn", nprocs=2)
    forked = launch("work:main", "forkserver", nprocs=2)
    warm.shutdown_forkservers()  # the server exits: what it registered runs there, once
    print({{"spawned": spawned, "warm": forked}})
"""

_MARKS = """
import os

def mark(label):
    with open(os.path.join(os.environ["EXIT_MARKS"], str(os.getpid())), "a") as f:
        f.write(label + "\\n")

def dropped():
    mark("dropped")
"""

_PLUGIN = """
import atexit, weakref
from {pkg} import marks

class Shared:
    pass

SHARED = Shared()  # made as the plugin loads: in a warm server, one object for every worker

def register():
    atexit.register(marks.mark, "plugin")
    atexit.register(marks.dropped)
    atexit.unregister(marks.dropped)  # registered, then taken back: runs nowhere
    weakref.finalize(SHARED, marks.mark, "plugin-object")
"""

_WORK = """
import atexit, os, weakref
from {pkg} import marks

atexit.register(marks.mark, "import")

class Own:
    pass

KEPT = []

def main():
    atexit.register(marks.mark, "entry")
    KEPT.append(Own())
    weakref.finalize(KEPT[-1], marks.mark, "own-object")  # alive at exit: finalized then
    return os.getpid(), os.getppid()
"""


def _marks(where: Path, pid: int) -> list[str]:
    path = where / str(pid)
    return path.read_text().split() if path.exists() else []


def test_warm_workers_run_the_exit_handlers_a_spawned_worker_runs(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        "exits",
        _LAUNCHER,
        {"noop": "plugin:register"},
        {"marks": _MARKS, "plugin": _PLUGIN, "work": _WORK},
    )
    where = tmp_path / "marks"
    where.mkdir()
    proc = run_script(app.script, env={"EXIT_MARKS": str(where)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    # Last registered, first run: the entry's, the import's, the finalizers (weakref's hook was
    # registered with the plugin's first finalizer), the plugin's.
    everything = ["entry", "import", "own-object", "plugin-object", "plugin"]
    for pid, _parent in got["spawned"]:
        assert _marks(where, pid) == everything, (pid, proc.stderr)
    servers = {parent for _pid, parent in got["warm"]}
    assert len(servers) == 1, got
    for pid, _parent in got["warm"]:
        # Before: nothing on Python 3.10-3.12, ["entry"] on 3.13.  The plugin's object is the
        # server's, shared by both workers: not finalized by the first one to exit.
        assert _marks(where, pid) == ["entry", "import", "own-object", "plugin"], (pid, proc.stderr)
    # The server ran what it registered as it exited, its object's finalizer with it.
    assert _marks(where, servers.pop()) == ["import", "plugin-object", "plugin"], proc.stderr
