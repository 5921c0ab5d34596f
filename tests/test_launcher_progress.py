"""spawn_with_plugins(progress=...): each rank's stages from real spawned workers; its failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _launcher_support import STAGES, Site, assert_group_gone, fault_env, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import BootstrapTimeoutError, ChildRaisedError, ProgressCallbackError

BOOTSTRAP = ["process_start", "arm_parent_death", *STAGES]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[int, str, float]] = []

    def __call__(self, rank: int, stage: str, elapsed: float) -> None:
        self.events.append((rank, stage, elapsed))

    def of(self, rank: int) -> list[str]:
        return [stage for r, stage, _ in self.events if r == rank]


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_every_stage_in_order_then_done(site: Site, start_method: str) -> None:
    seen = Recorder()
    with spawn_with_plugins(
        site.entry(),
        nprocs=2,
        namespace=site.ns,
        start_method=start_method,
        ready_timeout=60,
        progress=seen,
    ) as group:
        group.results(timeout=60)
    # A warm worker forks from a server that already ran platform, plugins and hooks:
    # it reports only the stages it runs itself.
    inherited = {"initialize_platform", "load_plugins", "apply_hooks"}
    expected = [s for s in BOOTSTRAP if start_method == "spawn" or s not in inherited]
    for rank in (0, 1):
        assert seen.of(rank) == [*expected, "done"]
        times = [t for r, _, t in seen.events if r == rank]
        assert times == sorted(times) and times[0] == 0.0 and times[-1] > 0.0


def test_a_failing_rank_is_failed_and_the_others_stopped(site: Site) -> None:
    seen = Recorder()
    with (
        pytest.raises(ChildRaisedError),
        spawn_with_plugins(
            site.entry(),
            nprocs=2,
            namespace=site.ns,
            env=fault_env("load_plugins", "raise", rank=1),
            ready_timeout=60,
            progress=seen,
        ) as group,
    ):
        group.join(timeout=60)
    assert seen.of(1)[-2:] == ["load_plugins", "failed"]
    assert seen.of(0)[-1] in ("stopped", "done")  # rank 0 may finish before the teardown
    assert_group_gone(group)


def test_stuck_rank_reports_its_stage_then_failed(site: Site) -> None:
    seen = Recorder()
    with pytest.raises(BootstrapTimeoutError) as info:  # noqa: SIM117
        with spawn_with_plugins(
            site.entry(),
            nprocs=1,
            namespace=site.ns,
            env=fault_env("apply_hooks", "hang"),
            ready_timeout=3,
            progress=seen,
        ) as group:
            group.wait_ready()
    assert info.value.stage == "apply_hooks"
    assert seen.of(0)[-2:] == ["apply_hooks", "failed"]
    assert_group_gone(group)


def test_callback_error_tears_down_and_is_raised_by_every_wait(site: Site) -> None:
    calls: list[str] = []

    def broken(rank: int, stage: str, elapsed: float) -> None:
        calls.append(stage)
        if stage == "load_plugins":
            raise KeyError("no row for this stage")

    group = spawn_with_plugins(
        site.entry("sleep_forever"), namespace=site.ns, ready_timeout=60, progress=broken
    )
    with pytest.raises(ProgressCallbackError) as info:
        group.join(timeout=60)
    err = info.value
    assert isinstance(err.__cause__, KeyError)
    assert err.rank == 0 and err.stage == "load_plugins"
    assert "progress callback raised KeyError" in str(err) and group.run_id in str(err)
    assert calls[-1] == "load_plugins"  # never called again after it raised
    assert_group_gone(group)
    with pytest.raises(ProgressCallbackError):
        group.results(timeout=1)
    group.terminate()


def test_callback_error_during_teardown_is_logged(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(rank: int, stage: str, elapsed: float) -> None:
        if stage == "stopped":
            raise RuntimeError("display gone")

    group = spawn_with_plugins(
        site.entry("sleep_forever"), namespace=site.ns, ready_timeout=60, progress=broken
    )
    group.wait_ready(timeout=60)
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        group.terminate()
    assert any("display gone" in rec.getMessage() for rec in caplog.records)
    with pytest.raises(ProgressCallbackError, match="display gone"):
        group.join(timeout=1)


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _broken_at_start(rank: int, stage: str, elapsed: float) -> None:
    if stage == "process_start":  # told by spawn_with_plugins itself, before any wait
        raise RuntimeError("display gone at start")


def test_callback_error_no_wait_raised_is_logged_by_terminate(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """The callback raised as the launch told it a rank started, and the caller went straight
    to terminate(): the teardown took the error as already raised and said nothing."""
    group = spawn_with_plugins(
        site.entry("sleep_forever"), namespace=site.ns, ready_timeout=60, progress=_broken_at_start
    )
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        group.terminate()
    said = _said(caplog, "display gone at start")
    assert len(said) == 1 and group.run_id in said[0]
    assert "No wait of the group raised it" in said[0]
    assert_group_gone(group)
    with pytest.raises(ProgressCallbackError, match="display gone at start"):
        group.join(timeout=1)


def test_callback_error_in_a_with_block_without_a_wait_is_logged(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """The block's end reads what the ranks sent (to tell those still running): the callback
    heard of the entry there and raised, and the teardown took that as said."""

    def broken(rank: int, stage: str, elapsed: float) -> None:
        if stage == "entry":
            raise RuntimeError("display gone at entry")

    with (
        caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"),
        spawn_with_plugins(
            site.entry(), namespace=site.ns, ready_timeout=60, progress=broken
        ) as group,
    ):
        _wait_exited(group.pids[0])  # without reaping it: the group's to see
    assert len(_said(caplog, "display gone at entry")) == 1


def _wait_exited(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} still running after {timeout}s")


def test_callback_error_while_polling_exit_codes_is_logged_by_terminate(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(rank: int, stage: str, elapsed: float) -> None:
        if stage == "entry":
            raise RuntimeError("display gone at entry")

    group = spawn_with_plugins(site.entry(), namespace=site.ns, ready_timeout=60, progress=broken)
    deadline = time.monotonic() + 60
    while None in group.exit_codes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group.exit_codes == [0]
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        group.terminate()
    assert len(_said(caplog, "display gone at entry")) == 1


def test_callback_error_of_a_group_collected_unclosed_is_logged(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    group = spawn_with_plugins(
        site.entry(), namespace=site.ns, ready_timeout=60, progress=_broken_at_start
    )
    deadline = time.monotonic() + 60
    while None in group.exit_codes and time.monotonic() < deadline:
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        del group
        gc.collect()
    assert len(_said(caplog, "display gone at start")) == 1


def test_callback_error_a_wait_raised_is_not_logged_again(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """Control: the error a wait raised reached the caller; the teardown stays quiet."""
    group = spawn_with_plugins(
        site.entry("sleep_forever"), namespace=site.ns, ready_timeout=60, progress=_broken_at_start
    )
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        with pytest.raises(ProgressCallbackError, match="display gone at start"):
            group.join(timeout=60)
        group.terminate()
    assert _said(caplog, "display gone") == []
    assert_group_gone(group)


def test_progress_must_be_callable(site: Site) -> None:
    with pytest.raises(TypeError, match="progress must be a callable"):
        spawn_with_plugins(site.entry(), namespace=site.ns, progress="rich")  # type: ignore[arg-type]


def test_elapsed_is_time_since_the_rank_started(site: Site) -> None:
    seen = Recorder()
    started = time.monotonic()
    with spawn_with_plugins(site.entry(), namespace=site.ns, progress=seen) as group:
        group.results(timeout=60)
    wall = time.monotonic() - started
    assert all(0.0 <= t <= wall for _, _, t in seen.events)


def test_a_ctrl_c_during_the_callback_still_delivers_the_stage(site: Site) -> None:
    """The relay notes a stage, then calls the callback: a Ctrl-C that struck inside it (the
    terminal's, at any instant) left the CLI's table, and its "interrupted; ... rank 1 in
    resolve_entry" line, a stage behind, for good (the relay says a stage once).  A message
    is now handled whole before the Ctrl-C is raised."""
    import os
    import signal

    seen = Recorder()

    def progress(rank: int, stage: str, elapsed: float) -> None:
        if stage == "entry":
            os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, right now
            time.sleep(0.05)  # a bytecode boundary or a few: where the handler runs
        seen(rank, stage, elapsed)

    with (
        pytest.raises(KeyboardInterrupt),
        spawn_with_plugins(
            site.entry(),
            nprocs=1,
            namespace=site.ns,
            ready_timeout=60,
            progress=progress,
            env=fault_env("entry", "hang"),
        ) as group,
    ):
        group.join(60)
    assert "entry" in seen.of(0)
    assert_group_gone(group)
