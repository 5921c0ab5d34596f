"""A signal a warm worker sends its parent reaches the launcher, as a spawned worker's does.

SGLang's scheduler tells its launcher it failed with ``psutil.Process().parent()
.send_signal(SIGQUIT)``; vLLM's engine core has used ``SIGUSR1``.  A spawned worker's parent
is the launcher, whose handler tears the engine down.  A warm worker's parent is its fork
server: the signal killed the server (the default action) and the launcher never heard it, so
an engine whose scheduler died after start kept serving with nothing said.  Real launchers,
real signals.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, run_script, write_app

_MAIN = """
import os, signal, sys, time

GOT = []

def remember(signum, frame):
    GOT.append(signal.Signals(signum).name)

if __name__ == "__main__":
    sig = getattr(signal, sys.argv[1])
    signal.signal(sig, remember)
    out = []
    for method in ("spawn", "forkserver", "forkserver"):  # the second warm launch: same server
        GOT.clear()
        pids = launch("entry:tell", method, nprocs=1, payload=sys.argv[1])
        deadline = time.monotonic() + 10
        while not GOT and time.monotonic() < deadline:
            time.sleep(0.01)
        out.append((method, list(GOT), pids[0][1]))
    print(out)
"""

_ENTRY = """
import os, signal

def tell(name):
    parent = os.getppid()  # what psutil.Process().parent() reads
    os.kill(parent, getattr(signal, name))
    return os.getpid(), parent
"""


@pytest.mark.parametrize("name", ["SIGQUIT", "SIGUSR1"])
def test_a_signal_to_the_parent_reaches_the_launcher_from_a_warm_worker(
    tmp_path: Path, name: str
) -> None:
    app = write_app(tmp_path, "psig", LAUNCH + _MAIN, {}, {"entry": _ENTRY})
    proc = run_script(app.script, name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    # Before: the warm launches' lists were empty, and the server died of the signal.
    assert [g for _, g, _ in got] == [[name]] * 3, got
    spawned, warm, again = (parent for _, _, parent in got)
    assert warm == again != spawned  # the server got it, passed it on and served on
