"""A SIGINT handler a plugin or the entry's module installs is the one the entry runs with.

A spawned worker starts deaf to Ctrl-C (the launcher tears the group down) and hears it again
when its entry begins.  It used to hear it by installing Python's default handler over
whatever was there: a plugin's graceful-shutdown handler, or an entry module's
``signal.signal(SIGINT, SIG_IGN)`` at import, was replaced before the entry ran, in every
spawned worker, while a warm worker (which inherits it from its server) kept it.  Real
launchers, a real installed plugin, real spawned and forked workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _plugin_app import LAUNCH, run_script, write_app

_LAUNCHER = LAUNCH + """
if __name__ == "__main__":
    cases = {{"plain": {{}}, "plugin": {{"SIGTEST_PLUGIN": "1"}}}}
    cases["module"] = {{"SIGTEST_IGNORE": "1"}}
    methods = ("spawn", "forkserver")
    print({{(c, m): launch("work:main", m, env=e)[0] for c, e in cases.items() for m in methods}})
"""

_PLUGIN = """
import os, signal

def on_ctrl_c(signum, frame):
    pass

def register():
    if os.environ.get("SIGTEST_PLUGIN"):
        signal.signal(signal.SIGINT, on_ctrl_c)  # a graceful shutdown, say
"""

_WORK = """
import os, signal

if os.environ.get("SIGTEST_IGNORE"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # at import: Ctrl-C is the launcher's

def main():
    now = signal.getsignal(signal.SIGINT)
    return now.name if isinstance(now, signal.Handlers) else now.__qualname__
"""


def test_the_entry_runs_with_the_sigint_handler_installed_before_it(tmp_path: Path) -> None:
    app = write_app(
        tmp_path, "sigint", _LAUNCHER, {"shutdown": "plugin:register"},
        {"plugin": _PLUGIN, "work": _WORK},
    )  # fmt: skip
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    for method in ("spawn", "forkserver"):
        assert got["plain", method] == "default_int_handler", got  # heard again at the entry
        # Before: "default_int_handler" in the spawned worker for both.
        assert got["plugin", method] == "on_ctrl_c", got
        assert got["module", method] == "SIG_IGN", got
