"""Issue 21 item 3: an entry that overruns a run's limit is an ``EntryTimeoutError``.

Its bootstrap had finished, so calling it a ``BootstrapTimeoutError`` sent the
reader to the wrong code.  The error is a ``TimeoutError`` and a
``SpawnkitError``, names the rank, the limit that expired and the stack the
entry was in; ``BootstrapTimeoutError`` stays for a rank still in a bootstrap
stage.  Real spawned workers, real faulthandler dumps.
"""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _launcher_support import Site, assert_group_gone, fault_env, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import (
    BootstrapError,
    BootstrapTimeoutError,
    EntryTimeoutError,
    SpawnkitError,
)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def test_join_timeout_in_the_entry_is_an_entry_timeout_with_rank_limit_and_stack(
    site: Site,
) -> None:
    group = spawn_with_plugins(
        site.entry("sleep_forever"), namespace=site.ns, nprocs=2, join_timeout=6
    )
    with group, pytest.raises(EntryTimeoutError) as info:
        group.wait_ready(timeout=60)
        group.join(timeout=60)
    err = info.value
    assert isinstance(err, TimeoutError) and isinstance(err, SpawnkitError)
    assert not isinstance(err, BootstrapTimeoutError | BootstrapError)
    assert err.rank == 0 and err.stage == "entry"
    assert err.setting == "join_timeout" and err.timeout_s == 6
    text = str(err)
    assert "join_timeout=6 s passed" in text and "its entry function" in text
    assert "in sleep_forever" in text  # the entry's own frame, from the faulthandler dump
    assert "sleep_forever" in err.stacks[0]
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is EntryTimeoutError and again.setting == "join_timeout"
    assert again.stacks == err.stacks
    assert_group_gone(group)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_rank_whose_entry_returned_but_that_does_not_end_is_named_as_exiting(
    site: Site, start_method: str
) -> None:
    """Its result arrived: "still running its entry function" sent the reader to the entry."""
    group = spawn_with_plugins(
        site.entry("hang_at_exit"),
        namespace=site.ns,
        start_method=start_method,
        join_timeout=8,
    )
    with group, pytest.raises(EntryTimeoutError) as info:
        group.join(timeout=60)
    err = info.value
    assert err.rank == 0 and err.stage == "entry" and err.setting == "join_timeout"
    assert "its entry function returned and its result arrived" in str(err), err
    if start_method == "forkserver":  # it runs its exit handlers as a spawned one does
        assert "_fork_exit" in err.stacks[0], err.stacks
    assert_group_gone(group)


def test_results_timeout_names_a_rank_whose_entry_returned_as_exiting(site: Site) -> None:
    """``results(timeout=)`` said "rank 0 in 'entry'" of a rank whose result had arrived."""
    group = spawn_with_plugins(site.entry("hang_at_exit"), namespace=site.ns)
    with group:
        group.wait_ready(timeout=60)
        deadline = time.monotonic() + 60
        while group._ranks[0].result is None and time.monotonic() < deadline:
            with contextlib.suppress(EntryTimeoutError):
                group.results(timeout=0.2)  # pumps the reports in
        with pytest.raises(EntryTimeoutError) as info:
            group.results(timeout=0.5)
        assert "rank 0 (pid" in str(info.value)
        assert "exiting (its entry returned; an exit handler" in str(info.value), info.value
        group.terminate()
    assert_group_gone(group)


def test_join_timeout_while_a_stage_runs_stays_a_bootstrap_timeout(site: Site) -> None:
    group = spawn_with_plugins(
        site.entry(),
        namespace=site.ns,
        env=fault_env("load_plugins", "hang"),
        ready_timeout=None,
        join_timeout=4,
    )
    with group, pytest.raises(BootstrapTimeoutError) as info:
        group.join(timeout=60)
    assert not isinstance(info.value, EntryTimeoutError)
    assert info.value.stage == "load_plugins"


def test_results_timeout_in_the_entry_is_an_entry_timeout_and_the_group_runs_on(
    site: Site,
) -> None:
    group = spawn_with_plugins(site.entry("sleep_forever"), namespace=site.ns)
    with group:
        group.wait_ready(timeout=60)
        with pytest.raises(EntryTimeoutError) as info:
            group.results(timeout=0.5)
        assert info.value.setting == "results(timeout=)" and info.value.rank == 0
        assert "results(timeout=0.5) expired" in str(info.value)
        assert "in sleep_forever" in str(info.value)
        assert group.exit_codes == [None]  # not torn down: the caller may keep waiting
