"""Ctrl-C with ``--json``: the document launch and demo promise is written, saying so.

Before, a real SIGINT to ``spawnkit launch ... --json`` wrote nothing to stdout (a tool reading
it got no document), and ``--json FILE`` kept an earlier run's ``"ok": true``.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest

from test_interrupt import ENTRY, SPAWNKIT, Launched, assert_gone, worker_pids

STALE = {"ok": True, "entry": "an earlier run"}


@pytest.fixture
def app(tmp_path: Path) -> tuple[Path, str]:
    module = f"intrjson_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(ENTRY)
    return tmp_path, module


def _document(out: str) -> dict[str, Any]:
    """The JSON document after the workers' own lines on stdout."""
    start = out.index("{\n")
    data = json.loads(out[start:])
    assert isinstance(data, dict)
    return data


def _interrupt_launch(app: tuple[Path, str], target: str) -> tuple[int, str, str, list[int]]:
    folder, module = app
    argv = [SPAWNKIT, "launch", f"{module}:slow", "--nprocs", "2", "--app-dir", str(folder)]
    run = Launched([*argv, "--json", target], folder)
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        code, out, err = run.finish()
    finally:
        run.kill()
    return code, out, err, pids


def _assert_interrupted(data: dict[str, object], entry: str) -> None:
    assert data["ok"] is False and data["interrupted"] is True, data
    assert data["exit_status"] == 130 and data["error"] == "KeyboardInterrupt", data
    assert data["entry"] == entry and data["nprocs"] == 2, data
    assert data["ranks"] == [
        {"rank": 0, "stage": "entry", "state": "stopped"},
        {"rank": 1, "stage": "entry", "state": "stopped"},
    ], data
    assert data["message"] == (
        "spawnkit launch: interrupted; 2 workers stopped (rank 0 in entry, rank 1 in entry)"
    )


def test_ctrl_c_with_json_on_stdout_writes_the_interrupted_document(
    app: tuple[Path, str],
) -> None:
    code, out, err, pids = _interrupt_launch(app, "-")
    assert code == 130, err
    _assert_interrupted(_document(out), f"{app[1]}:slow")
    assert "Traceback" not in out + err
    assert_gone(pids)


def test_ctrl_c_with_json_file_replaces_an_earlier_runs_ok(app: tuple[Path, str]) -> None:
    target = app[0] / "outcome.json"
    target.write_text(json.dumps(STALE))
    code, _, err, pids = _interrupt_launch(app, str(target))
    assert code == 130, err
    _assert_interrupted(json.loads(target.read_text()), f"{app[1]}:slow")
    assert_gone(pids)


FACTORY = """
import os, signal, time

def interrupted():
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C while the CLI builds the payload
    time.sleep(5)
"""


def test_ctrl_c_before_the_launch_still_writes_the_document(tmp_path: Path) -> None:
    """A Ctrl-C that reaches the command's top (here: before any worker; torchrun's and ray's
    runs let it through too) writes the document without ranks."""
    (tmp_path / "factory_intr.py").write_text(textwrap.dedent(FACTORY))
    target = tmp_path / "outcome.json"
    target.write_text(json.dumps(STALE))
    run = Launched(
        [
            *(SPAWNKIT, "launch", "factory_intr:interrupted", "--app-dir", str(tmp_path)),
            *("--payload-factory", "factory_intr:interrupted", "--json", str(target)),
        ],
        tmp_path,
    )
    try:
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    assert err.splitlines() == ["spawnkit launch: interrupted"], err
    data = json.loads(target.read_text())
    assert data == {
        "ok": False,
        "interrupted": True,
        "launcher": "local",
        "error": "KeyboardInterrupt",
        "message": "spawnkit launch: interrupted",
        "exit_status": 130,
    }, data


def test_ctrl_c_of_the_demo_with_json_writes_the_interrupted_document(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="spawnkit demo needs torch")
    argv = [SPAWNKIT, "demo", "--nprocs", "2", "--requests", "1000000", "--json"]
    run = Launched(argv, tmp_path)
    try:
        run.wait_for(r"Scheduler initialized!", count=2, timeout=120)
        os.killpg(run.proc.pid, signal.SIGINT)
        code, out, err = run.finish(timeout=60)
    finally:
        run.kill()
    assert code == 130, err
    data = _document(out)
    assert data["ok"] is False and data["interrupted"] is True and data["exit_status"] == 130
    assert [r["state"] for r in data["ranks"]] == ["stopped", "stopped"], data
    assert data["message"] == err.strip().splitlines()[-1], err
