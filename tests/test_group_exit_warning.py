"""A ``with`` block that ends while its ranks still run, with nothing in it waiting: it is said.

``with spawn_with_plugins("eng:train") as group: pass`` (``ProcessPoolExecutor``'s ``with``
waits; ``multiprocessing.Pool``'s terminates) stopped every rank unfinished and said nothing:
exit 0, the work never done.  A block that waited (``wait_ready()``: servers it ends on
purpose), one whose ranks had finished, and one that raised, stay quiet.  Real workers.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import psutil
import pytest

from spawnkit import GroupExitWarning, spawn_with_plugins

APP = """
import time

def slow(payload=None):
    time.sleep(60)

def quick(payload=None):
    return 1

def rank0_fails(payload=None):
    from spawnkit.bootstrap import current_spec

    if current_spec().rank == 0:
        raise ValueError("rank 0's own failure")
    time.sleep(60)

def lingering(marker):
    import atexit, pathlib

    def linger():  # runs once the result is sent: the process outlives its entry
        pathlib.Path(marker).touch()
        time.sleep(30)

    atexit.register(linger)
    return 1
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"group_exit_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _ended(pid: int) -> bool:
    """Exited for good, left unreaped (the group reaps it): a zombie thread-group leader whose
    other threads still run is not (/proc calls it a zombie already, waitpid does not)."""
    try:  # a spawned rank is our child: asked without reaping it
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # a warm rank is its fork server's
        pass
    try:
        zombie = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        return zombie and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (psutil.NoSuchProcess, FileNotFoundError):
        return True


def _launch(entry: str, method: str):  # type: ignore[no-untyped-def]
    return spawn_with_plugins(
        entry, nprocs=2, start_method=method, ready_timeout=120, join_timeout=120
    )


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_block_that_never_waited_for_running_ranks_warns_at_its_with_line(
    app: str, method: str
) -> None:
    with pytest.warns(GroupExitWarning) as caught, _launch(f"{app}:slow", method) as group:
        pass
    (warning,) = caught
    assert warning.filename == __file__  # the user's `with` line, not spawnkit's
    text = str(warning.message)
    assert f"worker group {group.run_id}" in text and "rank(s) 0, 1 were still running" in text
    assert "group.join() or group.results()" in text
    assert all(code is not None and code < 0 for code in group.exit_codes)  # stopped


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_blocks_that_waited_finished_or_raised_stay_quiet(app: str, method: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", GroupExitWarning)
        with _launch(f"{app}:slow", method) as group:
            group.wait_ready(timeout=120)  # servers, ended on purpose by leaving the block
        with _launch(f"{app}:quick", method) as group:
            deadline = time.monotonic() + 60
            while not all(map(_ended, group.pids)):  # done on their own, not yet reaped
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with pytest.raises(KeyError), _launch(f"{app}:slow", method):
            raise KeyError("the block's own error")


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_rank_whose_entry_returned_but_whose_process_still_exits_is_not_called_running(
    app: str, method: str, tmp_path: Path
) -> None:
    """Its result is in the pipe already (its atexit handler still runs): its work is done."""
    marker = tmp_path / "lingering"
    with warnings.catch_warnings():
        warnings.simplefilter("error", GroupExitWarning)
        with spawn_with_plugins(
            f"{app}:lingering", str(marker), start_method=method, ready_timeout=120
        ) as group:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert time.monotonic() < deadline
                time.sleep(0.05)
    assert group.exit_codes[0] is not None  # stopped by the teardown, quietly


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_failure_nothing_waited_for_is_named_not_dropped(app: str, method: str) -> None:
    """Rank 0 raised while the block ran, nothing waited: its failure was dropped unseen."""
    with pytest.warns(GroupExitWarning) as caught, _launch(f"{app}:rank0_fails", method) as group:
        deadline = time.monotonic() + 60
        while not _ended(group.pids[0]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    (warning,) = caught
    text = str(warning.message)
    assert "rank(s) 1 were still running and rank(s) 0 had failed, unseen" in text, text
    assert "raise a rank's failure" in text
