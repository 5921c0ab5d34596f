"""A warm-start server's plugins and preloads see the process a spawned worker's plugins see.

multiprocessing makes a spawned worker a child before its plugins load: the launcher's
``sys.argv`` (``prepare()``), a process that is not ``MainProcess`` and has a parent, stdin
closed.  A warm-start server (``python -c ...``) loaded them with ``sys.argv == ['-c']``, as
``MainProcess`` without a parent, reading the launcher's stdin: a plugin that read a flag from
the command line, used the ``current_process().name == "MainProcess"`` idiom or called
``input()`` decided otherwise in every warm worker (or waited on the terminal), with nothing
said.  Real launcher processes, a real installed plugin, real workers: both start methods see
the same, and a launcher that changes ``sys.argv`` gets a server that saw the change (the
command line is part of the server's key).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from _plugin_app import run_script, write_app

_LAUNCHER = """
import os, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def launch(method):
    with spawnkit.spawn_with_plugins(
        "{pkg}.plugin:seen", namespace=NS, start_method=method, preload=("{pkg}.pre",) * (
            method == "forkserver"), ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)[0]

if __name__ == "__main__":
    print("COLD", launch("spawn"))
    print("WARM", launch("forkserver"))
    sys.argv.append("--later")
    print("LATER", launch("forkserver"))
    print("LAUNCHER", os.getpid())
"""

_PLUGIN = """
import os, sys

AT_LOAD = {{}}

def register():
    import multiprocessing as mp

    AT_LOAD["plugin"] = list(sys.argv)
    AT_LOAD["main"] = mp.current_process().name == "MainProcess"
    AT_LOAD["parent"] = mp.parent_process() is not None
    try:
        AT_LOAD["stdin"] = repr(sys.stdin.readline())  # a closed stdin reads '' at once
    except (OSError, ValueError) as exc:
        AT_LOAD["stdin"] = type(exc).__name__

def seen():
    from {pkg} import pre
    view = AT_LOAD["main"], AT_LOAD["parent"], AT_LOAD["stdin"]
    return (AT_LOAD["plugin"], pre.AT_IMPORT, os.getppid(), *view)
"""


def test_a_warm_servers_plugins_see_what_a_spawned_workers_see(tmp_path: Path) -> None:
    script = write_app(
        tmp_path,
        "av",
        _LAUNCHER,
        {"argv": "plugin:register"},
        {"plugin": _PLUGIN, "pre": "import sys\nAT_IMPORT = list(sys.argv)\n"},
    ).script
    typed_r, typed_w = os.pipe()  # the launcher's stdin: a line typed, still open
    os.write(typed_w, b"typed\n")
    try:
        proc = run_script(script, "--flag", "x y", stdin=typed_r)
    finally:
        os.close(typed_r)
        os.close(typed_w)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    argv = [str(script), "--flag", "x y"]
    cold_plugin, _, cold_parent, *cold_view = ast.literal_eval(out["COLD"])
    warm_plugin, warm_pre, warm_parent, *warm_view = ast.literal_eval(out["WARM"])
    later_plugin, later_pre, later_parent, *_ = ast.literal_eval(out["LATER"])
    launcher = int(out["LAUNCHER"])
    assert cold_plugin == argv and cold_parent == launcher
    assert warm_plugin == argv and warm_pre == argv  # not ['-c']
    assert warm_parent != launcher  # forked by the server, which loaded the plugin
    assert later_plugin == later_pre == [*argv, "--later"]
    assert later_parent not in (launcher, warm_parent)  # another server: the key changed
    # not MainProcess, a parent, stdin at EOF (not the terminal the launcher reads)
    assert cold_view == warm_view == [False, True, "''"], (cold_view, warm_view)
