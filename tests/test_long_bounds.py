"""A bound longer than one operating-system wait allows is kept, not an ``OverflowError``.

``multiprocessing.connection.wait`` gives ``poll()`` its timeout in milliseconds as a C int,
so past 24.8 days it raises ``OverflowError: timeout is too large``.  A launch given a bound
of a month (``join_timeout=30 * 86400``), which ``check_seconds`` accepted, failed with that
bare error as soon as its ranks had started; ``spawnkit launch --timeout 2592000`` said
"internal error ... report it"; ``spawnkit doctor --timeout 1e10`` too, and doctor took
``--timeout 0`` (or -1) for a platform plugin whose ``activate()`` hangs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _cli_support import run_cli
from _launcher_support import Site, assert_group_gone, fault_env, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import ChildRaisedError

MONTH = 30 * 86400.0  # past poll()'s 2**31 - 1 ms
# The bounds given are a month or more: each test's own bound is pytest-timeout's, made short.
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


# the launch's activate() watch: a Timer past threading.TIMEOUT_MAX died in its own thread
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
@pytest.mark.parametrize("bound", [MONTH, float(sys.maxsize)], ids=["month", "maxsize"])
def test_a_launch_keeps_a_bound_of_a_month(site: Site, start_method: str, bound: float) -> None:
    # before: OverflowError: timeout is too large (timestamp too large for sys.maxsize)
    with spawn_with_plugins(
        site.entry("quick"), namespace=site.ns, nprocs=2, start_method=start_method,
        ready_timeout=bound, join_timeout=bound, grace_period=bound,
    ) as group:  # fmt: skip
        assert len(group.wait_ready(timeout=bound)) == 2
        assert group.join(timeout=bound) is True
        assert sorted(group.results(timeout=bound)) == sorted(group.pids)
    assert_group_gone(group)


def test_a_failing_rank_under_a_bound_of_a_month_is_its_own_error(site: Site) -> None:
    # before: the teardown's wait raised OverflowError in place of the rank's failure
    group = spawn_with_plugins(
        site.entry(), namespace=site.ns, nprocs=2, env=fault_env("entry", "raise", rank=1),
        ready_timeout=MONTH, join_timeout=MONTH, grace_period=MONTH,
    )  # fmt: skip
    with pytest.raises(ChildRaisedError, match="injected fault in entry"), group:
        group.results()
    assert_group_gone(group)


def test_one_wait_past_the_longest_slice_waits_the_whole_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The slicing itself, with the slice made short: an empty answer only once the whole
    bound has passed, and an object as soon as it is ready."""
    from spawnkit import _waits

    monkeypatch.setattr(_waits, "LONGEST_WAIT", 0.05)
    r, w = os.pipe()
    try:
        began = time.monotonic()
        assert _waits.wait([r], 0.4) == []
        assert time.monotonic() - began >= 0.4
        threading.Timer(0.2, os.write, (w, b"x")).start()
        began = time.monotonic()
        assert _waits.wait([r], 30.0) == [r]
        assert 0.15 <= time.monotonic() - began < 10.0
        worker = threading.Thread(target=time.sleep, args=(0.3,))
        worker.start()
        began = time.monotonic()
        _waits.join_thread(worker, 30.0)
        assert not worker.is_alive() and time.monotonic() - began < 10.0
    finally:
        os.close(r)
        os.close(w)


def test_cli_launch_keeps_a_timeout_of_a_month(site: Site) -> None:
    # before: "spawnkit launch: internal error: OverflowError ... report it", exit 1
    code, out, err = run_cli(
        "launch", site.entry("quick"), "--namespace", site.tag, "--timeout", str(MONTH)
    )
    assert code == 0, err
    assert "1 rank(s) finished" in out and "internal error" not in err


def test_cli_doctor_keeps_a_huge_timeout() -> None:
    # before: "spawnkit doctor: internal error: OverflowError ... report it"
    code, out, err = run_cli("doctor", "--no-child", "--timeout", "1e10")
    assert code == 0, out + err
    assert "internal error" not in err


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_cli_doctor_timeout_must_be_positive_seconds(value: str) -> None:
    # before: 0 and -1 read as "discovery did not finish within --timeout 0 s ... make
    # activate() only check for the hardware", blaming the plugins (exit 1); nan an internal
    # error to report
    code, out, err = run_cli("doctor", "--no-child", "--timeout", value)
    assert code == 2 and out == "", err
    assert err.startswith(f"spawnkit doctor: error: argument --timeout: {value} must be more")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["launch", "demo", "doctor"])
def test_cli_timeout_inf_is_a_usage_error(command: str) -> None:
    # before: launch and demo failed with "ConfigError: ready_timeout=inf ... pass None", an
    # argument the command-line user does not have; doctor with an internal error
    argv = [command, *(["mod:fn"] if command == "launch" else []), "--timeout", "inf"]
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "", err
    assert err.startswith(
        f"spawnkit {command}: error: argument --timeout: inf is not a finite number of seconds"
    )
    assert "ready_timeout" not in err and len(err.strip().splitlines()) == 1


def test_an_event_wait_and_a_call_past_the_longest_slice_keep_the_whole_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the Ray path waits with (a rank's ready event, ``ray.get``), the slice made
    short: each waits the whole bound, and returns as soon as its answer is there."""
    from spawnkit import _waits

    monkeypatch.setattr(_waits, "LONGEST_WAIT", 0.05)
    event = threading.Event()
    began = time.monotonic()
    assert _waits.wait_event(event, 0.4) is False
    assert time.monotonic() - began >= 0.4
    threading.Timer(0.2, event.set).start()
    began = time.monotonic()
    assert _waits.wait_event(event, 30.0) is True
    assert 0.15 <= time.monotonic() - began < 10.0

    slices: list[float | None] = []

    def call(seconds: float | None) -> str:
        slices.append(seconds)
        assert seconds is not None and seconds <= 0.05
        time.sleep(seconds)
        if len(slices) < 4:
            raise TimeoutError
        return "done"

    assert _waits.in_slices(call, 30.0, TimeoutError) == "done" and len(slices) == 4

    def never(seconds: float | None) -> str:
        assert seconds is not None and seconds <= 0.05
        time.sleep(seconds)
        raise TimeoutError

    began = time.monotonic()
    with pytest.raises(TimeoutError):
        _waits.in_slices(never, 0.3, TimeoutError)
    assert time.monotonic() - began >= 0.3
