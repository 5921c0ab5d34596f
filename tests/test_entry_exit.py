"""An entry that ends its process instead of returning: told apart from one that returned None.

Before: a rank whose entry called ``os._exit(0)`` (or a C library's ``exit()``) after it was
ready counted as done, and ``results()`` gave ``None`` for it, as if the entry had returned
``None``.  ``sys.exit(0)`` is an entry ending as it means to, with no value: still ``None``.
Real spawned and warm workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spawnkit import spawn_with_plugins
from spawnkit.errors import ChildExitedError

APP = """
import os, sys, time
from spawnkit.bootstrap import current_spec

def hard(payload=None):
    if current_spec().rank == 1:
        os._exit(0)
    time.sleep(60)

def clean(payload=None):
    sys.exit(0)

def nothing(payload=None):
    return None

def refuse(payload=None):
    sys.exit("bad config: tp_size=3 does not divide 8 heads")

def closes_and_raises(payload=None):
    os.closerange(3, 4096)  # as a daemonizing library does: the report pipe goes too
    raise RuntimeError("closed my descriptors")

def closes_and_returns(payload=None):
    os.closerange(3, 4096)
    return "done"

def _reopen(path):
    import atexit
    fd = current_spec().report_conn.fileno()
    os.closerange(3, 4096)  # a daemonizing library closes the inherited descriptors,
    held = [open(os.devnull, "w") for _ in range(3, fd)]  # then opens files of its own:
    log = open(path, "w")  # its log gets the report pipe's number
    assert log.fileno() == fd, (log.fileno(), fd)
    log.write("user data\\n")
    log.flush()

    def bye():  # the file is the entry's until the process ends
        log.write("at exit\\n")
        log.close()

    atexit.register(bye)
    return held

def reopens_and_raises(path):
    _reopen(path)
    raise RuntimeError("closed my descriptors")

def reopens_and_returns(path):
    _reopen(path)
    return "done"

def exits_at_exit(payload=None):
    import atexit
    atexit.register(os._exit, 7)  # a native library's teardown that ends the process
    return "done"

def aborts_at_exit(payload=None):
    import atexit
    atexit.register(os.abort)  # NCCL/CUDA aborting as the process exits
    return "done"
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"entry_exit_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _results(entry: str, method: str) -> list[object]:
    with spawn_with_plugins(
        entry, nprocs=2, start_method=method, ready_timeout=120, join_timeout=120
    ) as group:
        return group.results(timeout=120)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_entry_ended_by_os_exit_0_has_no_result_and_fails_the_group(
    app: str, method: str
) -> None:
    with pytest.raises(ChildExitedError) as info:
        _results(f"{app}:hard", method)  # rank 0 sleeps: the failure stops it
    err = info.value
    assert (err.rank, err.stage, err.exit_code) == (1, "entry", 0)
    assert "os._exit(0)" in str(err) and "it has no result" in str(err)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_sys_exit_0_and_returning_none_both_give_none(app: str, method: str) -> None:
    assert _results(f"{app}:clean", method) == [None, None]
    assert _results(f"{app}:nothing", method) == [None, None]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_entry_that_exits_with_a_message_is_headlined_with_it(app: str, method: str) -> None:
    """``sys.exit("bad config...")``: the headline said ``called sys.exit(1)``, the reason
    only at the end of the traceback below it."""
    with pytest.raises(ChildExitedError) as info:
        _results(f"{app}:refuse", method)
    err = info.value
    assert (err.stage, err.exit_code) == ("entry", 1)
    head = str(err).splitlines()[0]
    assert "called sys.exit('bad config: tp_size=3 does not divide 8 heads'), exit code 1" in head


def _one(entry: str, method: str, **kwargs: object) -> list[object]:
    with spawn_with_plugins(
        entry, start_method=method, ready_timeout=120, join_timeout=120, **kwargs
    ) as group:
        return group.results(timeout=120)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_entry_that_closed_its_report_pipe_is_told_on_stderr_and_not_called_os_exit(
    app: str, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``os.closerange(3, ...)`` in the entry closed the report pipe: its exception and
    traceback were lost (fd 2 worked), and the launcher said "without raising a Python
    exception. Likely cause: ... os._exit(1)"; an entry that returned read "instead of
    returning or raising"."""
    with pytest.raises(ChildExitedError) as info:
        _one(f"{app}:closes_and_raises", method, prefix_output=True)
    err = info.value
    assert (err.stage, err.exit_code) == ("entry", 1)
    text = str(err)
    assert "without raising" not in text, text
    assert "report pipe closed with no exception, exit or result on it" in text, text
    assert "the worker wrote how it ended (its exception and traceback) to its stderr" in text
    said = capsys.readouterr().err
    assert "stage 'entry' failed: RuntimeError: closed my descriptors; its report pipe" in said
    assert "in closes_and_raises" in said and "RuntimeError: closed my descriptors" in said
    with pytest.raises(ChildExitedError) as info:
        _one(f"{app}:closes_and_returns", method, prefix_output=True)
    assert info.value.exit_code == 0 and "report pipe closed" in str(info.value)
    assert "its entry returned, and its result is lost" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_entry_whose_file_got_the_report_pipes_number_keeps_its_file(
    app: str, method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry closed the report pipe and opened a file that got its number: the worker's
    FAILED (or RESULT) was written into that file, after the entry's own lines, and the file's
    descriptor closed under it.  Now nothing of spawnkit's lands there and the file stays
    open; stderr says what happened to the pipe, as for a pipe that was only closed."""
    for entry, said in (
        ("reopens_and_raises", "stage 'entry' failed: RuntimeError: closed my descriptors; "),
        ("reopens_and_returns", "its entry returned, and its result is lost; "),
    ):
        log = tmp_path / f"{entry}-{method}.log"
        with pytest.raises(ChildExitedError) as info:
            _one(f"{app}:{entry}", method, payload=str(log), prefix_output=True)
        assert "report pipe closed with no exception, exit or result on it" in str(info.value)
        assert log.read_bytes() == b"user data\nat exit\n"  # its own lines, and still open
        err = capsys.readouterr().err
        assert said + "its report pipe to the launcher was lost (OSError: descriptor " in err
        assert f"was closed and its number reused by the process: it is now {log}," in err


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_exit_that_fails_after_the_result_arrived_is_not_blamed_on_the_entry(
    app: str, method: str
) -> None:
    """An atexit handler (a native library's teardown) that ends the process badly after the
    entry returned was told as "exited with code 7 in stage 'entry' ... code in that stage
    called os._exit(7)" / "killed by SIGABRT in stage 'entry'".  The group still fails."""
    with pytest.raises(ChildExitedError) as info:
        _one(f"{app}:exits_at_exit", method)
    head = str(info.value).splitlines()[0]
    assert info.value.exit_code == 7
    assert "exited with code 7 after its entry returned (its result received), while" in head
    assert "in stage 'entry'" not in head
    with pytest.raises(ChildExitedError) as info:
        _one(f"{app}:aborts_at_exit", method)
    head = str(info.value).splitlines()[0]
    assert info.value.signal_name == "SIGABRT"
    assert "killed by SIGABRT after its entry returned (its result received), while exiting" in head
