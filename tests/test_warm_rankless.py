"""A plugin that reads ``current_spec()`` while loading is told so when a warm server runs it.

In a worker that bootstraps itself, ``current_spec()`` is that worker's spec during plugin
loading; in a warm-start server, which bootstraps once for every rank, it is ``None``.  A
plugin that registers a hook for rank 0 only therefore got it on rank 0 of a spawned group
and on no rank of a warm one, with nothing said.  Real launcher processes, a real installed
distribution, real spawned and forked workers: the warm launch warns once, at the launch line,
naming the plugin and its distribution; ``-W error`` refuses it and leaves no server behind.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _plugin_app import App, run_script, warned, write_app

_LAUNCHER = """
import re, sys
sys.path.insert(0, {site!r})
import psutil
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

if __name__ == "__main__":
    method, preload = sys.argv[1], tuple(sys.argv[2:])
    try:
        with spawnkit.spawn_with_plugins(
            "{pkg}.target:f", namespace=NS, nprocs=2, start_method=method, preload=preload,
            ready_timeout=120, join_timeout=120,
        ) as group:  # the launch line
            print("RESULT", group.results(timeout=120))
    except spawnkit.WarmServerWarning as exc:  # the refused server: gone, not left running
        pid = int(re.search(r"server \\(pid (\\d+)\\)", str(exc)).group(1))
        try:
            gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            gone = True
        print("REFUSED", "gone" if gone else "running")
"""

_PLUGIN = """
from spawnkit.bootstrap import current_spec
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def hooked():
    return "hooked"

def register():
    spec = current_spec() if READS else None
    if not READS or (spec is not None and spec.rank == 0):  # READS: rank 0 only, at load
        get_namespace({tag!r}).hooks.register("{pkg}.target.f", hooked, HookType.REPLACE)
"""


def _app(tmp_path: Path, reads: bool) -> App:
    return write_app(
        tmp_path,
        "rl",
        _LAUNCHER,
        {"rankzero": "plugin:register"},
        {
            "target": "def f():\n    return 'orig'\n",
            "plugin": f"READS = {reads}\n" + _PLUGIN,
            # a preload that sets itself up per rank when imported
            "per_rank": "from spawnkit import bootstrap\nSPEC = bootstrap.current_spec()\n",
        },
        version="2.5",
    )


def _run(
    script: Path, method: str, *flags: str, preload: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return run_script(script, method, *preload, flags=flags)


@pytest.mark.parametrize(
    ("method", "reads", "results"),
    [
        ("spawn", True, "['hooked', 'orig']"),  # each worker sees its own rank
        ("forkserver", False, "['hooked', 'hooked']"),  # a plugin that reads no rank
    ],
)
def test_nothing_is_said_where_nothing_differs(
    tmp_path: Path, method: str, reads: bool, results: str
) -> None:
    proc = _run(_app(tmp_path, reads=reads).script, method)
    assert f"RESULT {results}" in proc.stdout, proc.stdout + proc.stderr
    assert "WarmServerWarning" not in proc.stderr, proc.stderr


def test_a_warm_server_warns_at_the_launch_line_naming_the_plugin(tmp_path: Path) -> None:
    script = _app(tmp_path, reads=True).script
    proc = _run(script, "forkserver")
    # What the warning is about: the server decided for every rank, rank 0 lost its hook.
    assert "RESULT ['orig', 'orig']" in proc.stdout, proc.stdout + proc.stderr
    (line,) = warned(proc, "WarmServerWarning")
    assert line.startswith(f"{script}:"), line  # at the launch line, not inside spawnkit
    assert "plugin 'rankzero' (" in line and "-dist 2.5)" in line, line
    assert "called spawnkit.bootstrap.current_spec() in the warm-start server" in line, line
    assert "got None" in line, line
    assert "SPAWNKIT_WARM_BOOTSTRAP=worker" in line, line


def test_error_filter_refuses_the_server_and_leaves_no_process(tmp_path: Path) -> None:
    script = _app(tmp_path, reads=True).script
    proc = _run(script, "forkserver", "-W", "error::spawnkit.WarmServerWarning")
    assert "REFUSED gone" in proc.stdout, proc.stdout + proc.stderr


def test_a_preload_that_reads_the_spec_is_named_by_its_step(tmp_path: Path) -> None:
    script, _, pkg = _app(tmp_path, reads=False)
    proc = _run(script, "forkserver", preload=(f"{pkg}.per_rank",))
    assert "RESULT ['hooked', 'hooked']" in proc.stdout, proc.stdout + proc.stderr
    (line,) = warned(proc, "WarmServerWarning")
    assert (
        "code called spawnkit.bootstrap.current_spec() while importing preload module "
        f"'{pkg}.per_rank' in the warm-start server" in line
    ), line
    # a preload is imported in the server in either mode: the mode is not the fix for it
    assert "SPAWNKIT_WARM_BOOTSTRAP=worker" not in line, line
    assert "import it in the entry instead of preload=" in line, line


def test_a_preload_that_reads_the_spec_is_named_in_worker_mode_too(tmp_path: Path) -> None:
    """Under ``WARM_BOOTSTRAP=worker`` each worker loads its plugins itself, but the server
    still imports the preload, once, with no rank: its import-time read got None, unsaid."""
    script, _, pkg = _app(tmp_path, reads=False)
    proc = run_script(
        script, "forkserver", f"{pkg}.per_rank", env={"SPAWNKIT_WARM_BOOTSTRAP": "worker"}
    )
    assert "RESULT ['hooked', 'hooked']" in proc.stdout, proc.stdout + proc.stderr
    (line,) = warned(proc, "WarmServerWarning")
    assert f"while importing preload module '{pkg}.per_rank'" in line, line
    assert "import it in the entry instead of preload=" in line, line
