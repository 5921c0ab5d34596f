"""A plugin's own SIGUSR1 handler runs in a warm worker as in a spawned one.

A plugin (or a preload) that installs ``signal.signal(SIGUSR1, on_usr1)`` as it loads does
so once, in the warm server; its workers inherit the handler.  The server's start-up stack
dump on SIGUSR1 was unregistered after the plugins loaded, which put back the C default
(the end of the process) under the plugin's handler; and each forked worker registered its
own stack dump on SIGUSR1 over it: the handler never ran while ``getsignal()`` still named
it.  A worker now dumps on a signal nobody else handles (SIGUSR2 here), and says which.
Real launchers, a real installed plugin, real spawned and forked workers.
"""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, run_script, write_app

_LAUNCHER = LAUNCH + """
from spawnkit.protocol import warm

if __name__ == "__main__":
    import sys
    print(launch("work:main", sys.argv[1], nprocs=1))
    warm.shutdown_forkservers()
"""

_PLUGIN = """
import signal

GOT = []

def on_usr1(signum, frame):
    GOT.append(signum)

def register():
    signal.signal(signal.SIGUSR1, on_usr1)
"""

_WORK = """
import os, signal, time
from {pkg} import plugin

def main():
    os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(100):  # the handler runs at the next bytecode boundary
        if plugin.GOT:
            break
        time.sleep(0.01)
    return list(plugin.GOT), signal.getsignal(signal.SIGUSR1) is plugin.on_usr1
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_plugins_sigusr1_handler_runs_in_every_worker(tmp_path: Path, method: str) -> None:
    app = write_app(
        tmp_path, "usr1", _LAUNCHER, {"p": "plugin:register"}, {"plugin": _PLUGIN, "work": _WORK}
    )
    done = run_script(app.script, method)
    assert done.returncode == 0, done.stderr
    assert ast.literal_eval(done.stdout.strip().splitlines()[-1]) == [
        ([int(signal.SIGUSR1)], True)
    ]


def test_a_worker_without_a_sigusr1_handler_still_dumps_on_it() -> None:
    """The control: the launcher's stack dump of a hung worker keeps SIGUSR1 where nothing
    else wants it (the HELLO says which signal), in a process of its own."""
    code = (
        "import signal, sys\n"
        "from spawnkit.protocol.child import _arm_faulthandler\n"
        "first = _arm_faulthandler(sys.stderr)\n"
        "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
        "print(first, _arm_faulthandler(sys.stderr))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == [str(int(signal.SIGUSR1)), str(int(signal.SIGUSR2))]
