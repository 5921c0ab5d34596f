"""Ctrl-C during ``spawnkit bench --json FILE``: the file says the run was interrupted.

Before, a real SIGINT wrote nothing, so a FILE from an earlier run stayed and read as this
run's figures.  Now it holds ``"interrupted": true`` with the benchmarks that finished.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from test_interrupt import SPAWNKIT, Launched, assert_gone

pytestmark = pytest.mark.needs_torch  # bootstrap_stages, the benchmark interrupted, needs torch

STALE = {"hook_overhead": {"an earlier run": True}, "bootstrap_stages": {"an earlier run": True}}


def test_ctrl_c_during_bench_replaces_an_earlier_runs_figures(tmp_path: Path) -> None:
    target = tmp_path / "figures.json"
    target.write_text(json.dumps(STALE))
    argv = [SPAWNKIT, "bench", "--quick", "--only", "hook_overhead"]
    argv += ["--only", "bootstrap_stages", "--settle", "0", "--json", str(target)]
    run = Launched(argv, tmp_path)
    try:
        # the first benchmark finished; the second (seconds long) has just begun
        run.wait_for(r"^hook_overhead targets", timeout=120)
        run.wait_for(r"^== bootstrap_stages", timeout=60)
        children = [p.pid for p in psutil.Process(run.proc.pid).children(recursive=True)]
        os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        code, out, err = run.finish(timeout=60)
    finally:
        run.kill()
    assert code == 130, out + err
    assert "spawnkit bench: interrupted" in err and "Traceback" not in out + err
    data = json.loads(target.read_text())
    assert data["ok"] is False and data["interrupted"] is True, data
    assert data["exit_status"] == 130 and data["error"] == "KeyboardInterrupt", data
    assert data["message"] == "spawnkit bench: interrupted in bootstrap_stages"
    assert data["finished"] == ["hook_overhead"] and data["not_run"] == ["bootstrap_stages"]
    assert "bootstrap_stages" not in data  # the earlier run's figures are gone
    assert data["hook_overhead"]["checks"] and "an earlier run" not in data["hook_overhead"]
    assert set(data["load_average"]) == {"start", "end"}
    assert "figures written" not in out
    assert_gone(children)
