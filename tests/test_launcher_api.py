"""spawn_with_plugins() and WorkerGroup: the happy paths, under both start methods and contexts."""

from __future__ import annotations

import logging
import os
import pickle
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _launcher_support import (
    MODES,
    Site,
    assert_group_gone,
    fault_env,
    gone,
    make_site,
    mode_kwargs,
)
from spawnkit import spawn_with_plugins
from spawnkit.errors import (
    BootstrapError,
    BootstrapTimeoutError,
    ChildRaisedError,
    EntryResolutionError,
    EntryTimeoutError,
)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> dict[str, str]:
    return mode_kwargs(request)


def test_results_reports_and_frozen_selection(site: Site, mode: dict[str, str]) -> None:
    with spawn_with_plugins(
        site.entry(), site.box(41), nprocs=2, namespace=site.ns, ready_timeout=60, **mode
    ) as group:
        assert group.ranks == [0, 1]
        assert len(set(group.pids)) == 2
        reports = group.wait_ready()
        assert [r.rank for r in reports] == [0, 1]
        assert [r.pid for r in reports] == group.pids
        assert all(r.platform["name"] == "faultdev" for r in reports)
        assert all(f"{site.pkg}.target.func" in r.hooks for r in reports)
        results = group.results(timeout=60)
        assert group.exit_codes == [0, 0]
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["value"] == 41 for r in results)
    # The entry ran the patched target: the plugin's hook was applied before it was imported.
    assert all(r["hooked"] == "orig+hooked" for r in results)
    assert_group_gone(group)


def test_callables_by_reference_and_by_value(site: Site, mode: dict[str, str]) -> None:
    secret = "closure-value"

    def closure() -> str:
        return secret + str(os.getpid() > 0)

    with spawn_with_plugins(closure, namespace=site.ns, **mode) as group:
        assert group.results(timeout=60) == ["closure-valueTrue"]
    with spawn_with_plugins(
        lambda box: box.value * 2, site.box(21), namespace=site.ns, **mode
    ) as g:
        assert g.results(timeout=60) == [42]
    # An importable function travels as its "module:qualname" string.
    with spawn_with_plugins(time.monotonic, namespace=site.ns, **mode) as group:
        (value,) = group.results(timeout=60)
        assert isinstance(value, float)


def test_join_polls_and_terminate_ends_everything(site: Site, mode: dict[str, str]) -> None:
    group = spawn_with_plugins(
        site.entry("sleep_forever"), nprocs=2, namespace=site.ns, grace_period=1.0, **mode
    )
    with group:
        group.wait_ready(timeout=60)
        started = time.monotonic()
        assert group.join(timeout=0.2) is False
        assert 0.15 < time.monotonic() - started < 5
        assert group.exit_codes == [None, None]
        group.terminate()
        # SIGTERM ends a sleeping worker at once: exit codes are the signal, not SIGKILL.
        assert group.exit_codes == [-15, -15]
        assert group.join(timeout=5) is False  # stopped work is not done work
    assert_group_gone(group)


_MARKING_ENTRY = """
import time

def mark_and_sleep(path):
    open(path, "w").close()  # in its entry: its READY is already in the launcher's pipe
    time.sleep(600)
"""


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait, without asking the group, until ``check()`` holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_zero_timeout_polls_read_what_the_ranks_already_sent(site: Site) -> None:
    """``join(timeout=0)`` in an event loop, ``results(timeout=0)`` (and ``wait_ready``, below)
    read the pipes and exits first: ranks that finished (or are ready) are seen as such."""
    with spawn_with_plugins(site.entry("quick"), nprocs=2, namespace=site.ns) as group:
        _until(lambda: all(gone(pid) for pid in group.pids), "the ranks to exit")
        assert group.join(timeout=0) is True
        assert group.results(timeout=0) == group.pids


def test_wait_ready_timeout_zero_on_ranks_ready_long_ago_is_no_timeout(
    site: Site, tmp_path: Path
) -> None:
    (site.root / f"{site.tag}_mark.py").write_text(_MARKING_ENTRY)
    marks = [tmp_path / f"mark{rank}" for rank in range(2)]
    with spawn_with_plugins(
        f"{site.tag}_mark:mark_and_sleep",
        nprocs=2,
        namespace=site.ns,
        rank_extra=lambda rank: {"path": str(marks[rank])},
        entry_args=("path",),
    ) as group:
        _until(lambda: all(m.exists() for m in marks), "both entries to start")
        assert [r.rank for r in group.wait_ready(timeout=0)] == [0, 1]  # not a timeout
        assert group.exit_codes == [None, None]  # and not torn down
        group.terminate()
    assert_group_gone(group)


def test_a_join_poll_raises_a_failure_that_already_happened(site: Site) -> None:
    env = fault_env("entry", "raise")
    with spawn_with_plugins(site.entry(), namespace=site.ns, env=env) as group:
        _until(lambda: gone(group.pids[0]), "the rank to exit")
        with pytest.raises(ChildRaisedError, match="injected fault in entry"):
            group.join(timeout=0)
    assert_group_gone(group)


def test_context_exit_tears_down_on_exception(site: Site, mode: dict[str, str]) -> None:
    entry = site.entry("sleep_forever")
    with pytest.raises(KeyError), spawn_with_plugins(entry, namespace=site.ns, **mode) as group:
        group.wait_ready(timeout=60)
        raise KeyError("user code failed")
    assert_group_gone(group)


def test_unpicklable_result_is_reported(site: Site, mode: dict[str, str]) -> None:
    with (
        spawn_with_plugins(site.entry("unpicklable"), namespace=site.ns, **mode) as group,
        pytest.raises(ChildRaisedError) as info,
    ):
        group.join(timeout=60)
    err = info.value
    assert err.rank == 0 and err.stage == "entry"
    assert "could not be pickled" in str(err)
    assert "generator" in str(err)


def test_results_timeout_is_pollable(site: Site, mode: dict[str, str]) -> None:
    with (
        spawn_with_plugins(site.entry("sleep_forever"), namespace=site.ns, **mode) as group,
        # Still bootstrapping (spawn) or already in the entry (warm start): the type says which.
        pytest.raises((BootstrapTimeoutError, EntryTimeoutError)) as info,
    ):
        group.results(timeout=0.3)
        assert "still running" in str(info.value)
        assert group.exit_codes == [None]  # not torn down: the caller may keep waiting


def test_result_type_missing_in_parent(site: Site, tmp_path: os.PathLike[str]) -> None:
    # The entry returns an instance of a class that only the worker can import.
    code = (
        "import sys, types\n"
        "def make():\n"
        "    mod = types.ModuleType('only_in_child_mod')\n"
        "    exec('class Thing:\\n    pass', mod.__dict__)\n"
        "    sys.modules['only_in_child_mod'] = mod\n"
        "    mod.Thing.__module__ = 'only_in_child_mod'\n"
        "    return mod.Thing()\n"
    )
    (site.root / f"{site.tag}_thing.py").write_text(code)
    with (
        spawn_with_plugins(f"{site.tag}_thing:make", namespace=site.ns) as group,
        pytest.raises(BootstrapError) as info,
    ):
        group.results(timeout=60)
    assert "cannot unpickle" in str(info.value) and info.value.rank == 0


def test_argument_validation(site: Site) -> None:
    with pytest.raises(ValueError, match="module:function"):
        spawn_with_plugins("not_a_reference", namespace=site.ns)
    with pytest.raises(ValueError, match="fork is refused"):
        spawn_with_plugins(site.entry(), namespace=site.ns, start_method="fork")
    with pytest.raises(ValueError, match="got 'Spawn': did you mean 'spawn'") as info:
        spawn_with_plugins(site.entry(), namespace=site.ns, start_method="Spawn")
    assert "fork is refused" not in str(info.value)  # no answer to a fork never asked for
    with pytest.raises(ValueError, match="forkserver"):
        spawn_with_plugins(site.entry(), namespace=site.ns, preload=("json",))
    with pytest.raises(ValueError, match="context"):
        spawn_with_plugins(site.entry(), namespace=site.ns, context="threads")
    with pytest.raises(ValueError, match="nprocs"):
        spawn_with_plugins(site.entry(), namespace=site.ns, nprocs=0)


def test_non_callable_entry_is_an_entry_resolution_error_in_the_parent(site: Site) -> None:
    with pytest.raises(EntryResolutionError, match=r"42 \(type int\) is not callable") as info:
        spawn_with_plugins(42, namespace=site.ns)  # type: ignore[arg-type]
    assert info.value.stage == "resolve_entry"


def test_errors_pickle_with_child_exception(site: Site) -> None:
    env = {"SKT_FAULT_STAGE": "entry", "SKT_FAULT_KIND": "raise", "SKT_FAULT_RANK": "0"}
    with (
        spawn_with_plugins(site.entry(), namespace=site.ns, env=env) as group,
        pytest.raises(ChildRaisedError) as info,
    ):
        group.join(timeout=60)
    err = pickle.loads(pickle.dumps(info.value))
    assert isinstance(err, ChildRaisedError)
    assert (err.rank, err.stage, err.pid) == (0, "entry", group.pids[0])
    assert isinstance(err.child_exception, RuntimeError)
    assert "injected fault in entry" in err.traceback_text
    assert str(err).startswith("rank 0 (pid ")  # root cause first
    assert "see the logs" not in str(err).lower()


def test_sixteen_workers_on_a_small_machine(site: Site) -> None:
    with spawn_with_plugins(site.entry("quick"), nprocs=16, namespace=site.ns) as group:
        pids = group.results(timeout=120)
    assert pids == group.pids
    assert group.exit_codes == [0] * 16
    assert_group_gone(group)


def report_selection(payload: object = None) -> tuple[str | None, tuple[str, ...] | None, str]:
    from spawnkit.bootstrap import current_report, current_spec

    spec = current_spec()
    report = current_report()
    assert spec is not None and report is not None
    return spec.platform, spec.plugins, report.platform.get("name", "")


def test_selection_variables_in_env_decide_in_the_parent(plugin_dist, spawnkit_namespace) -> None:
    """``env=`` reaches the workers, so the parent resolves the selection with it, not without."""
    ns = spawnkit_namespace
    mod = f"sel_{uuid.uuid4().hex[:6]}"
    plugin_dist(
        "sel-plugins",
        "1.0",
        entry_points={ns.config.plugin_group: {"one": f"{mod}:one", "two": f"{mod}:two"}},
        modules={mod: "def one():\n    pass\n\ndef two():\n    pass\n"},
    )
    env = {ns.config.platform_var: "cpu", ns.config.plugins_var: "two"}
    assert ns.config.platform_var not in os.environ
    with spawn_with_plugins(f"{__name__}:report_selection", namespace=ns, env=env) as group:
        group.wait_ready(timeout=60)
        [(platform, plugins, chosen)] = group.results(timeout=60)
    assert (platform, plugins, chosen) == ("cpu", ("two",), "cpu")


def send_through_own_pipe(payload: object = None) -> int:
    from spawnkit.bootstrap import current_spec

    spec = current_spec()
    assert spec is not None
    conn = spec.extra["pipe_writer"]
    conn.send({"rank": spec.rank, "pid": os.getpid()})
    conn.close()
    return spec.rank


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_rank_extra_hands_each_rank_its_own_connection(
    spawnkit_namespace, start_method: str
) -> None:
    """The seed's SchedulerProcessSpec shape: one pipe writer per rank, in that rank's spec."""
    from multiprocessing import Pipe

    pipes = [Pipe(duplex=False) for _ in range(2)]
    group = spawn_with_plugins(
        f"{__name__}:send_through_own_pipe",
        nprocs=2,
        namespace=spawnkit_namespace,
        start_method=start_method,
        rank_extra=lambda rank: {"pipe_writer": pipes[rank][1]},
    )
    for _, writer in pipes:
        writer.close()
    with group:
        assert group.results(timeout=60) == [0, 1]
        pids = group.pids
    got = []
    for reader, _ in pipes:
        assert reader.poll(10)
        got.append(reader.recv())
        reader.close()
    assert got == [{"rank": 0, "pid": pids[0]}, {"rank": 1, "pid": pids[1]}]


def use_shared_objects(payload: object = None) -> int:
    from spawnkit.bootstrap import current_spec

    spec = current_spec()
    assert spec is not None
    with spec.extra["lock"]:
        spec.extra["queue"].put(spec.rank)
    spec.extra["event"].set()
    return spec.rank


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_rank_extra_values_that_pickle_only_while_spawning_still_reach_each_rank(
    spawnkit_namespace, start_method: str
) -> None:
    """The launcher pickles every value once before any rank starts, to refuse one that cannot
    go: a Lock, Queue or Event of the start method's context (which refuse pickling outside a
    process start) must pass that check and work in the rank."""
    import multiprocessing

    ctx = multiprocessing.get_context(start_method)
    shared = {"lock": ctx.Lock(), "queue": ctx.Queue(), "event": ctx.Event()}
    with spawn_with_plugins(
        f"{__name__}:use_shared_objects",
        nprocs=2,
        namespace=spawnkit_namespace,
        start_method=start_method,
        rank_extra=lambda rank: shared,
    ) as group:
        assert group.results(timeout=60) == [0, 1]
    assert sorted(shared["queue"].get(timeout=10) for _ in range(2)) == [0, 1]
    assert shared["event"].is_set()


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_rank_extra_value_that_cannot_be_sent_is_refused_before_any_rank_starts(
    spawnkit_namespace, start_method: str, tmp_path: Path
) -> None:
    """A ``threading.Lock`` for rank 2 was a bare ``TypeError: cannot pickle '_thread.lock'``
    from multiprocessing's reduction, after ranks 0 and 1 had started (and were stopped),
    naming neither rank_extra, the rank nor the key."""
    import threading

    from spawnkit.errors import ConfigError

    lock = threading.Lock()
    marks = tmp_path / "marks"
    marks.mkdir()
    with pytest.raises(ConfigError) as info:
        spawn_with_plugins(
            f"{__name__}:touch_mark",
            str(marks),
            nprocs=3,
            namespace=spawnkit_namespace,
            start_method=start_method,
            rank_extra=lambda rank: {"port": 8000 + rank, **({"lock": lock} if rank == 2 else {})},
        )
    text = str(info.value)
    assert info.value.setting == "rank_extra"
    assert "rank_extra(2) returned 'lock': a _thread.lock" in text, text
    assert "cannot pickle '_thread.lock' object" in text and "No worker was started" in text
    assert isinstance(info.value.__cause__, TypeError)
    time.sleep(1.0)  # a rank that had started would have written its mark by now
    assert list(marks.iterdir()) == []


def touch_mark(marks: str) -> None:
    from spawnkit.bootstrap import current_spec

    spec = current_spec()
    assert spec is not None
    Path(marks, str(spec.rank)).touch()


# Names the launcher's own control data used to travel under in spec.extra.
_LAUNCHER_NAMES = ("context", "parent_pid", "pdeathsig", "fault_conn", "sigint_restore")


def engine_extra_and_launcher_view(payload: object = None) -> tuple[dict[str, object], int]:
    from spawnkit.bootstrap import current_spec

    spec = current_spec()
    assert spec is not None
    return dict(spec.extra), os.getppid()


def test_rank_extra_keys_named_like_launcher_data_reach_the_entry_unchanged(
    spawnkit_namespace,
) -> None:
    """``spec.extra`` is the engine's: a key called ``context`` or ``parent_pid`` is its own.

    The launcher's fault pipe, pid and flags travel apart, so they neither overwrite the
    engine's values nor are overwritten by them (the worker still runs and reports).
    """
    mine = {name: f"engine's {name} for rank {{rank}}" for name in _LAUNCHER_NAMES}
    with spawn_with_plugins(
        f"{__name__}:engine_extra_and_launcher_view",
        nprocs=2,
        namespace=spawnkit_namespace,
        rank_extra=lambda rank: {k: v.format(rank=rank) for k, v in mine.items()},
    ) as group:
        results = group.results(timeout=60)
    for rank, (extra, parent) in enumerate(results):
        assert extra == {k: v.format(rank=rank) for k, v in mine.items()}
        assert parent == os.getpid()  # spawned by this launcher, pdeathsig armed as before


def test_failure_seen_by_exit_codes_is_still_raised(site: Site) -> None:
    """Polling ``exit_codes`` after a rank failed must not let join() report success."""
    env = {"SKT_FAULT_STAGE": "entry", "SKT_FAULT_KIND": "raise", "SKT_FAULT_RANK": "0"}
    with spawn_with_plugins(site.entry(), namespace=site.ns, env=env) as group:
        deadline = time.monotonic() + 60
        while None in group.exit_codes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group.exit_codes == [1]
        with pytest.raises(ChildRaisedError, match="injected fault in entry"):
            group.join(timeout=10)
        with pytest.raises(ChildRaisedError):
            group.results(timeout=0)
    assert_group_gone(group)


_BIG_SPEC_LAUNCHER = """
import sys, time
from spawnkit import spawn_with_plugins

if __name__ == "__mp_main__":  # runs only in the worker, while it re-imports this script
    if sys.argv[2] == "raise":
        raise RuntimeError("top level of the script failed in the worker")
    time.sleep(60)


def work(payload):
    return len(payload)


if __name__ == "__main__":
    started = time.monotonic()
    try:
        with spawn_with_plugins(work, "x" * 300_000, start_method=sys.argv[1],
                                ready_timeout=3, grace_period=0.5) as group:
            group.results(timeout=30)
    except Exception as exc:
        print(type(exc).__name__, str(exc).splitlines()[0])
    print(f"elapsed {time.monotonic() - started:.1f}")
"""


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
@pytest.mark.parametrize("fault", ["raise", "hang"])
def test_spec_larger_than_a_pipe_never_blocks_start(
    tmp_path: Path, start_method: str, fault: str
) -> None:
    """A child that dies or hangs before reading a >64 KiB spec: typed error, bounded time."""
    import subprocess
    import sys

    script = tmp_path / "launcher.py"
    script.write_text(_BIG_SPEC_LAUNCHER)
    proc = subprocess.run(
        [sys.executable, str(script), start_method, fault],
        capture_output=True,
        text=True,
        timeout=45,
        cwd=tmp_path,
    )
    first, elapsed = proc.stdout.splitlines()[-2:]
    if fault == "hang":
        assert first.startswith("BootstrapTimeoutError rank 0"), proc.stdout + proc.stderr
        assert "'process_start'" in first
    else:  # the early-error pipe (a warm worker's too) carries the worker's exception
        assert first.startswith("ChildRaisedError rank 0"), proc.stdout + proc.stderr
        assert "top level of the script failed in the worker" in first
    assert float(elapsed.split()[1]) < 15, proc.stdout


def test_results_after_terminate_raise_instead_of_returning_none(site: Site) -> None:
    """A terminated rank has no return value; results() says so rather than hand back None."""
    from spawnkit.errors import ChildExitedError

    with spawn_with_plugins(site.entry("sleep_forever"), namespace=site.ns) as group:
        group.wait_ready(timeout=60)
        group.terminate()
        assert group.join(timeout=10) is False  # stopped, not done
        with pytest.raises(ChildExitedError, match="terminate") as info:
            group.results(timeout=10)
    assert info.value.rank == 0 and info.value.exit_code not in (0, None)


def test_terminate_before_any_wait_keeps_a_crashed_ranks_failure(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """README's launch_schedulers pattern: the engine waits on its own pipes, sees a rank's
    close, and calls ``terminate()`` in a ``finally``: the rank's error is kept and logged."""
    env = fault_env("resolve_entry", "raise", rank=1)
    group = spawn_with_plugins(site.entry("sleep_forever"), nprocs=2, namespace=site.ns, env=env)
    _until(lambda: gone(group.pids[1]), "rank 1 to fail")
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        group.terminate()
    err = group.failure
    assert isinstance(err, ChildRaisedError) and err.rank == 1 and err.stage == "resolve_entry"
    assert "injected fault in resolve_entry" in str(err)
    assert group.exit_codes == [-15, 1]
    for wait in (group.results, group.join, group.wait_ready):
        with pytest.raises(ChildRaisedError) as again:
            wait()
        assert again.value is err
    (said,) = [r.getMessage() for r in caplog.records if r.name == "spawnkit.bootstrap"]
    assert "after rank 1 had failed, and no wait had raised it" in said
    assert "injected fault in resolve_entry" in said  # the child's traceback, not dropped
    assert_group_gone(group)


def test_terminate_after_every_entry_returned_stops_nothing(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine's normal shutdown: entries returned, results still in the pipes, then
    ``terminate()``: that work was done, not stopped."""
    group = spawn_with_plugins(site.entry("quick"), nprocs=2, namespace=site.ns)
    _until(lambda: all(gone(pid) for pid in group.pids), "the ranks to exit")
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        group.terminate()
    assert group.exit_codes == [0, 0]
    assert group.join(timeout=5) is True
    assert group.results() == group.pids
    assert group.failure is None and not caplog.records


_SIGTERM_RAISES = """
import signal, time

def stop(signum, frame):
    raise RuntimeError("stopping on SIGTERM")

def run():
    signal.signal(signal.SIGTERM, stop)
    time.sleep(600)
"""


def test_terminate_of_running_ranks_is_no_failure(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """Control: what a rank sends once ``terminate()`` stopped it (its SIGTERM handler raised)
    is the stop's doing, not a failure: nothing kept, nothing logged."""
    (site.root / f"{site.tag}_stops.py").write_text(_SIGTERM_RAISES)
    group = spawn_with_plugins(f"{site.tag}_stops:run", nprocs=2, namespace=site.ns)
    group.wait_ready(timeout=60)
    time.sleep(0.2)  # the handlers are installed
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        group.terminate()
    assert group.failure is None and not caplog.records
    assert group.join(timeout=5) is False
    assert_group_gone(group)


_SHARDS = """
import os, time
from spawnkit.bootstrap import current_spec

def check(marker):
    rank = current_spec().rank
    if rank == 1:  # first: the group's failure
        open(marker, "w").close()
        raise ValueError("shard-00001.parquet: schema mismatch")
    if rank == 0:  # within the teardown's grace period: a failure of its own
        while not os.path.exists(marker):
            time.sleep(0.01)
        time.sleep(0.5)
        raise FileNotFoundError("shard-00000.parquet is missing")
    time.sleep(600)  # stopped by the teardown
"""


def test_other_ranks_own_failures_during_the_teardown_are_reported(
    site: Site, tmp_path: Path
) -> None:
    (site.root / f"{site.tag}_shards.py").write_text(_SHARDS)
    group = spawn_with_plugins(
        f"{site.tag}_shards:check",
        str(tmp_path / "rank1-failed"),
        nprocs=3,
        namespace=site.ns,
        grace_period=3.0,
    )
    with group, pytest.raises(ChildRaisedError, match="shard-00001") as info:
        group.results(timeout=60)
    err = info.value
    assert err.rank == 1 and list(err.other_failures) == [0]
    other = err.other_failures[0]
    assert isinstance(other, ChildRaisedError) and other.rank == 0
    assert isinstance(other.child_exception, FileNotFoundError)
    text = str(err)
    # Where each was as rank 1 failed (rank 0 may have been starting still), then how it ended.
    assert re.search(r"were at: rank 0: \w+ \(failed too, below\); rank 2: \w+ \(stopped\)", text)
    assert "FileNotFoundError: shard-00000.parquet is missing" in text.split("Child traceback")[0]
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again.other_failures[0].child_exception, FileNotFoundError)
    assert_group_gone(group)


def test_a_lone_failure_names_no_other_failures(site: Site) -> None:
    """Control: ranks the teardown stopped are stopped, not failed."""
    env = fault_env("entry", "raise", rank=1)
    with (
        spawn_with_plugins(site.entry("run"), nprocs=2, namespace=site.ns, env=env) as group,
        pytest.raises(ChildRaisedError) as info,
    ):
        group.results(timeout=60)
    assert info.value.other_failures == {} and "Also failed" not in str(info.value)
    assert_group_gone(group)


_GC_ENTRY = """
import gc

MADE_BY_THE_ENTRY_MODULE = {"cycle": None}
MADE_BY_THE_ENTRY_MODULE["cycle"] = MADE_BY_THE_ENTRY_MODULE


def entry():
    made_by_the_entry = {"cycle": None}
    made_by_the_entry["cycle"] = made_by_the_entry
    tracked = gc.get_objects()  # not the frozen ones
    return {
        "frozen": gc.get_freeze_count(),
        "entry_module_tracked": any(o is MADE_BY_THE_ENTRY_MODULE for o in tracked),
        "entry_tracked": any(o is made_by_the_entry for o in tracked),
    }
"""


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_workers_heap_is_frozen_after_its_hooks_and_not_in_the_launcher(
    site: Site, start_method: str
) -> None:
    """What the bootstrap built lives as long as the worker, the entry module's import
    included: no collection walks it again (a cold torch worker's import otherwise ran
    ~80 ms of them); what the entry makes when it runs is collected as usual.  A process
    that bootstraps itself is not frozen."""
    module = f"{site.tag}_gc"
    (site.root / f"{module}.py").write_text(_GC_ENTRY)
    with spawn_with_plugins(f"{module}:entry", namespace=site.ns, start_method=start_method) as g:
        (got,) = g.results(timeout=60)
    assert got["frozen"] > 1000, got
    assert not got["entry_module_tracked"], "the entry module's objects were not frozen"
    assert got["entry_tracked"], "what the entry made when it ran was frozen too"
    # In a process of its own: bootstrapping this test process would leave it a worker.
    code = (
        "import gc, sys\n"
        "from spawnkit.namespace import Namespace\n"
        "from spawnkit.launch.context import bootstrap_here\n"
        "ns = Namespace(sys.argv[1], env_prefix=sys.argv[1].upper())\n"
        "before = gc.get_freeze_count()\n"
        "bootstrap_here(ns)\n"
        "print(before, gc.get_freeze_count())\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site.root), *sys.path]))
    out = subprocess.run(
        [sys.executable, "-c", code, site.tag],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split()  # 3.12 may start with a few hundred frozen already
    assert before == after, "a process that bootstraps itself had its heap frozen"


def _one_plugin_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, env: dict[str, str] | None = None
) -> dict[str, object]:
    """What one spawned worker's entry returns, with ``source`` as its only plugin (real
    distribution) and as its entry module (``entry``)."""
    from spawnkit.namespace import Namespace
    from spawnkit.testing import write_distribution

    tag = f"gp{uuid.uuid4().hex[:10]}"
    ns = Namespace(tag, env_prefix=tag.upper())
    write_distribution(
        tmp_path,
        f"{tag}-plug",
        "1.0",
        entry_points={ns.config.plugin_group: {"gcplug": f"{tag}_plug:register"}},
        modules={f"{tag}_plug": source},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with spawn_with_plugins(f"{tag}_plug:entry", namespace=ns, start_method="spawn", env=env) as g:
        (got,) = g.results(timeout=60)
    return dict(got)


_GC_PLUGIN = """
import gc

SEEN = {}

def register():
    SEEN["frozen_while_plugins_load"] = gc.get_freeze_count()

def entry():
    return dict(SEEN)
"""


def test_a_workers_stages_run_with_the_heap_before_them_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a worker holds when its stages begin (the interpreter, spawnkit, its spec) is frozen
    then, so no collection during the stages walks it again (~0.7 ms of 7 in a bootstrap with
    10 plugins and 100 hooks).  Spawn only: a forkserver worker's plugins load in the warm
    server, whose heap is frozen after them (the test above)."""
    got = _one_plugin_worker(tmp_path, monkeypatch, _GC_PLUGIN)
    # a fresh 3.12 interpreter has a few hundred objects frozen; spawnkit's modules are more
    assert got["frozen_while_plugins_load"] > 1000, got


_GC_PAUSE_PLUGIN = """
import gc, os

SEEN = {}

def register():
    SEEN["threshold_while_plugins_load"] = gc.get_threshold()[0]
    if os.environ.get("GC_PLUGIN_OWN_SETTING"):
        gc.set_threshold(5000, 10, 10)
        gc.disable()

def entry():
    return {**SEEN, "threshold_at_entry": gc.get_threshold()[0], "enabled": gc.isenabled()}
"""


@pytest.mark.parametrize("own_setting", [False, True])
def test_no_collection_runs_in_a_workers_stages_and_a_plugins_own_gc_setting_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_setting: bool
) -> None:
    """What the stages import is frozen after the hooks, so the collector's automatic runs
    are paused until then (an ``import torch`` there ran ~80 ms of collections); the entry
    runs with the collector as it was, or as a plugin set it meanwhile."""
    env = {"GC_PLUGIN_OWN_SETTING": "1"} if own_setting else {}
    got = _one_plugin_worker(tmp_path, monkeypatch, _GC_PAUSE_PLUGIN, env)
    assert got["threshold_while_plugins_load"] == 0, got  # paused
    if own_setting:
        assert (got["threshold_at_entry"], got["enabled"]) == (5000, False), got
    else:
        assert got["threshold_at_entry"] > 0 and got["enabled"], got  # resumed


def test_a_group_left_bound_at_exit_prints_no_traceback(tmp_path: Path) -> None:
    """A group still bound as the interpreter exits (``with ... as g`` at a script's module
    scope) was collected after the shutdown cleared spawnkit's modules: "Exception ignored
    in WorkerGroup.__del__ ... TypeError" on stderr after a run that succeeded."""
    script = tmp_path / "bound.py"
    script.write_text(
        "import spawnkit\n\ndef work():\n    return 1\n\n"
        "if __name__ == '__main__':\n"
        "    with spawnkit.spawn_with_plugins(work, context='multiprocess', ready_timeout=60)"
        " as g:\n"
        "        print(g.results(timeout=60))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1]"
    assert "Exception ignored" not in done.stderr, done.stderr
