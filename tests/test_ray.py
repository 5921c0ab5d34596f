"""spawnkit on a real local Ray cluster: fresh actors per rank, the staged bootstrap, typed errors.

One cluster per xdist worker that runs this module, started and stopped here;
a lock file in the session's base temp dir keeps two workers from running
clusters at once on a two-core machine (and the xdist group keeps the module
on one worker under ``--dist loadgroup``).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _ray_support import local_ray_cluster
from spawnkit.errors import (
    BootstrapTimeoutError,
    ChildExitedError,
    ChildRaisedError,
    ConfigError,
    EntryResolutionError,
    EntryTimeoutError,
)
from spawnkit.spec import NamespaceConfig
from spawnkit.testing import write_distribution

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')

import spawnkit.scaleout.ray as skray  # noqa: E402

pytestmark = pytest.mark.xdist_group("spawnkit-ray")

LOCK_WAIT_S = 600.0
READY_S = 90.0

APP_SRC = """
import os, time

def main(payload):
    from spawnkit.bootstrap import current_report, current_spec
    import skray_app.target as target

    spec = current_spec()
    report = current_report()
    if payload.get("block_s"):
        deadline = time.monotonic() + payload["block_s"]
        while time.monotonic() < deadline:
            time.sleep(0.05)
    return {
        "rank": spec.rank,
        "local_rank": spec.local_rank,
        "world_size": spec.world_size,
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
                                               "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
                                               "SKRAY_FROM_SPEC", "RAY_ADDRESS",
                                               "SKRAY_HOOK_CONFLICTS")},
        "greet": target.greet("ray"),
        "pid": os.getpid(),
        "report_hooks": sorted(report.hooks),
        "plugins": sorted(p["name"] for p in report.plugins),
        "tag": payload["tag"],
    }
"""

SHOUT_SRC = """
import sys

def shout(payload=None):
    from spawnkit.bootstrap import current_spec
    rank = current_spec().rank
    print(f"shout from rank {rank}")
    sys.stderr.write(f"warn from rank {rank}\\n")
    sys.stdout.write(f"tail of rank {rank}")  # no newline, and the entry returns at once
    return rank

def exits(payload):
    print("ending with sys.exit", payload["code"])
    sys.exit(payload["code"])

def shards(payload):
    # Each rank checks its own shard; all meet first, so they fail together, as ranks
    # hitting one bug do.
    import os, time
    from spawnkit.bootstrap import current_spec
    spec = current_spec()
    open(os.path.join(payload["dir"], f"at-{spec.rank}"), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(payload["dir"])) < spec.world_size and time.monotonic() < deadline:
        time.sleep(0.01)
    raise FileNotFoundError(f"shard-{spec.rank:05d}.parquet is missing")
"""

TARGET_SRC = """
def greet(name):
    return "hello " + name
"""

PLUGIN_SRC = """
import os, time
from spawnkit.hooks import HookType

def _around(original, *args, **kwargs):
    return original(*args, **kwargs) + " (patched on rank " + os.environ["RANK"] + ")"

def register():
    from spawnkit.namespace import get_namespace
    get_namespace("skray").hooks.register("skray_app.target.greet", _around, HookType.AROUND)

def register_fails_on_rank1():
    if os.environ.get("RANK") == "1":
        raise ValueError("skray plugin cannot register on rank 1")
    register()

def register_slowly():
    time.sleep(60)
"""


def _namespace() -> NamespaceConfig:
    return NamespaceConfig.build("skray", "SKRAY")


def _site(root: Path, plugin: str = "register") -> Path:
    write_distribution(
        root,
        "skray-app",
        "1.0",
        modules={
            "skray_app.entry": APP_SRC,
            "skray_app.target": TARGET_SRC,
            "skray_app.shout": SHOUT_SRC,
        },
    )
    write_distribution(
        root,
        "skray-plugin",
        "3.1",
        entry_points={"skray.plugins": {"patcher": f"skray_plugin:{plugin}"}},
        modules={"skray_plugin": PLUGIN_SRC},
    )
    return root


def _env(root: Path) -> dict[str, str]:
    # The spawnkit under test for the actors too (the venv's own install may be another
    # checkout's): a Ray worker imports it before any rank code runs.
    import spawnkit

    path = os.pathsep.join([str(root), str(Path(spawnkit.__file__).parent.parent)])
    return {"PYTHONPATH": path, "SKRAY_FROM_SPEC": "yes", "CUDA_VISIBLE_DEVICES": "3"}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with local_ray_cluster(tmp_path_factory, "skray-", LOCK_WAIT_S) as cluster:
        yield cluster


def _gone(pids: list[int | None], within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(p is not None and _alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# -------------------------------------------------------------------------- tests
def test_non_callable_entry_is_refused_before_any_actor() -> None:
    with pytest.raises(EntryResolutionError, match=r"\(type int\) is not callable"):
        skray.build_template(42)  # type: ignore[arg-type]


def _real_entry(payload: Any = None) -> str:
    return "the function named by the reference"


def _impostor_entry() -> Any:
    """A callable whose module:qualname names a different object (as a re-bound or
    decorated function's does)."""

    def impostor(payload: Any = None) -> str:
        return "the callable the caller passed"

    impostor.__module__ = _real_entry.__module__
    impostor.__qualname__ = _real_entry.__qualname__
    return impostor


def test_entry_not_reachable_by_its_name_travels_by_value() -> None:
    """The Ray path uses the launcher's entry reference: a callable goes by reference only
    when ``module:qualname`` resolves back to it; otherwise every rank would run the other one."""
    impostor = _impostor_entry()
    template = skray.build_template(impostor)
    assert template.entry == ""
    assert template.entry_payload is not None
    assert template.entry_payload.materialize()() == "the callable the caller passed"
    by_name = skray.build_template(_real_entry)
    assert by_name.entry == f"{_real_entry.__module__}:_real_entry"
    assert by_name.entry_payload is None


def test_malformed_entry_string_is_refused_before_any_actor() -> None:
    with pytest.raises(ConfigError, match="module:function"):
        skray.build_template("no_colon_here")


def test_two_ranks_bootstrap_with_real_plugins(ray_cluster: Any, tmp_path: Path) -> None:
    root = _site(tmp_path / "site")
    with skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t"},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
        join_timeout=60,
    ) as group:
        reports = group.wait_ready()
        assert [r.rank for r in reports] == [0, 1]
        assert all("skray_app.target.greet" in r.hooks for r in reports)
        assert all(r.world_size == 2 for r in reports)
        results = group.results()
        pids = group.pids
    assert group.dropped_env == ["CUDA_VISIBLE_DEVICES"]
    assert len({r["pid"] for r in results}) == 2 and os.getpid() not in pids
    assert sorted(r["local_rank"] for r in results) == [0, 1]  # one node: local == global
    for rank, res in enumerate(results):
        assert res["rank"] == rank and res["world_size"] == 2
        assert res["greet"] == f"hello ray (patched on rank {rank})"
        assert res["report_hooks"] == ["skray_app.target.greet"]
        assert res["env"]["RANK"] == str(rank) and res["env"]["WORLD_SIZE"] == "2"
        assert res["env"]["LOCAL_WORLD_SIZE"] == "2"
        assert res["env"]["SKRAY_FROM_SPEC"] == "yes"
        assert res["env"]["CUDA_VISIBLE_DEVICES"] != "3"  # never copied from the spec
        assert res["env"]["RAY_ADDRESS"]  # nested Ray work joins this cluster
        assert res["tag"] == "t"
    assert group.exit_codes == [0, 0]
    assert _gone(pids), "actors must not linger after the group finished"


def test_failing_plugin_in_one_rank_surfaces_with_traceback(
    ray_cluster: Any, tmp_path: Path
) -> None:
    root = _site(tmp_path / "site", plugin="register_fails_on_rank1")
    group = skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t"},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    )
    try:
        with pytest.raises(ChildRaisedError) as info:
            group.wait_ready()
        pids = group.pids
    finally:
        group.terminate()
    err = info.value
    assert err.rank == 1 and err.stage == "load_plugins"
    assert "skray plugin cannot register on rank 1" in str(err)
    assert "register_fails_on_rank1" in err.traceback_text  # the plugin's own frame
    assert "register_fails_on_rank1" in str(err)  # the traceback is in the message too
    assert "Effect: Ray group" in str(err) and "rank 0:" in str(err)  # what else it stopped
    assert group.nodes[1] and group.nodes[1] in str(err)  # names the node
    assert err.other_failures == {} and "Also failed" not in str(err)  # rank 0 did not fail
    assert err.pid == pids[1]
    # The failed rank's actor exits, and the healthy one is stopped too.
    assert _gone(pids)
    with pytest.raises(ChildRaisedError):  # the first failure stays the group's answer
        group.join(1)


def test_other_ranks_own_failures_are_reported(ray_cluster: Any, tmp_path: Path) -> None:
    """Two ranks failed, each for its own reason: only the first was said, the other's
    exception appeared nowhere and the Effect line had it "at: process_start"."""
    root = _site(tmp_path / "site")
    (tmp_path / "met").mkdir()
    group = skray.spawn_on_ray(
        "skray_app.shout:shards",
        {"dir": str(tmp_path / "met")},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    )
    try:
        with pytest.raises(ChildRaisedError) as info:
            group.results(timeout=READY_S)
        pids = group.pids
    finally:
        group.terminate()
    err = info.value
    assert err.rank in (0, 1)
    other = 1 - err.rank
    assert list(err.other_failures) == [other]
    assert err.other_failures[other].rank == other
    assert isinstance(err.other_failures[other].child_exception, FileNotFoundError)
    head = str(err).split("Child traceback")[0]
    assert f"rank {other}: entry (failed too, below)" in head
    assert "Also failed on their own" in head and f"shard-{other:05d}.parquet is missing" in head
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again.other_failures[other].child_exception, FileNotFoundError)
    assert _gone(pids)


def test_killed_actor_is_a_typed_error(ray_cluster: Any, tmp_path: Path) -> None:
    root = _site(tmp_path / "site")
    group = skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t", "block_s": 60},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    )
    try:
        group.wait_ready()
        victim = group.pids[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(ChildExitedError) as info:
            group.join(60)
        pids = group.pids
    finally:
        group.terminate()
    assert info.value.rank == 0 and info.value.stage == "entry"
    assert info.value.pid == victim
    assert "rank 0" in str(info.value) and "died" in str(info.value)
    assert info.value.other_failures == {}  # rank 1 was stopped, not failed
    assert "Also failed" not in str(info.value)
    assert _gone(pids)


def test_slow_bootstrap_times_out_naming_the_stage(ray_cluster: Any, tmp_path: Path) -> None:
    root = _site(tmp_path / "site", plugin="register_slowly")
    group = skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t"},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    )
    try:
        start = time.monotonic()
        with pytest.raises(BootstrapTimeoutError) as info:
            group.wait_ready(timeout=4)
        assert time.monotonic() - start < 4 + 10
        pids = group.pids
    finally:
        group.terminate()
    assert info.value.stage == "load_plugins"
    assert "load_plugins" in str(info.value)
    assert _gone(pids)


def test_reused_worker_is_refused(ray_cluster: Any, tmp_path: Path) -> None:
    """A worker process that already applied a hook set does not bootstrap a second rank."""
    import pickle

    from spawnkit.scaleout._ray_actor import FAILED_EXIT_GRACE_S, RankActor

    root = _site(tmp_path / "site")
    template = skray.build_template(
        "skray_app.entry:main", {"tag": "a"}, namespace=_namespace(), env=_env(root)
    )
    spec = template.replace(env={"PYTHONPATH": str(root)})
    actor = (
        ray.remote(RankActor)
        .options(num_cpus=0, max_concurrency=2, runtime_env={"env_vars": {"PYTHONPATH": str(root)}})
        .remote()
    )
    try:
        pid = ray.get(actor.where.remote(), timeout=READY_S)["pid"]
        first = ray.get(actor.run.remote(0, pickle.dumps(spec)), timeout=READY_S)
        assert first["status"] == "ok", first
        second = ray.get(actor.run.remote(0, pickle.dumps(spec)), timeout=READY_S)
        # Nobody kills it: a rank that failed leaves on its own, it does not linger.
        assert _gone([pid], within=FAILED_EXIT_GRACE_S + 15)
    finally:
        ray.kill(actor)
    assert second["status"] == "failed"
    failure = second["failure"]  # the one failure record every launcher uses
    assert failure.exc_type == "spawnkit.errors.BootstrapError[worker_reuse]"
    assert failure.stage == "reuse_check" and failure.rank == 0 and failure.pid == pid
    assert "not fresh" in failure.message
    assert "skray_app.target.greet" in failure.message  # names the hooks it holds
    assert "skray-plugin 3.1" in failure.message  # and where they came from


def test_placement_that_cannot_fit_times_out(ray_cluster: Any) -> None:
    with pytest.raises(BootstrapTimeoutError, match="placement group") as info:
        skray.spawn_on_ray("json:dumps", nprocs=2, resources={"CPU": 64}, ready_timeout=2)
    assert info.value.stage == "placement"


def _run_py(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )


def test_without_ray_installed_the_error_names_the_extra() -> None:
    proc = _run_py(
        "import sys; sys.modules['ray'] = None\n"
        "import spawnkit.ray\n"  # importable without ray
        "try:\n"
        "    spawnkit.ray.spawn_on_ray('json:dumps', nprocs=1)\n"
        "except ImportError as e:\n"
        "    print('ERR', e)\n"
    )
    assert "ERR" in proc.stdout and 'pip install "spawnkit[ray]"' in proc.stdout, proc.stderr


def test_without_a_cluster_spawnkit_does_not_start_one() -> None:
    proc = _run_py(
        "import spawnkit.ray\n"
        "from spawnkit.errors import LauncherUnavailableError\n"
        "try:\n"
        "    spawnkit.ray.spawn_on_ray('json:dumps', nprocs=1)\n"
        "except LauncherUnavailableError as e:\n"
        "    print('ERR', e)\n"
        "import ray; print('INIT', ray.is_initialized())\n"
    )
    assert "ERR" in proc.stdout and "ray.init" in proc.stdout, proc.stderr
    assert "INIT False" in proc.stdout


def test_failure_still_reported_after_the_failed_actor_exited(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """A driver that asks late gets the rank's traceback, not "its actor died"."""
    root = _site(tmp_path / "site", plugin="register_fails_on_rank1")
    group = skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t"},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    )
    try:
        # The failed rank returns its record from run() and then leaves on its own.
        assert _gone([group.pids[1]], within=READY_S)
        with pytest.raises(ChildRaisedError) as info:
            group.wait_ready()
    finally:
        group.terminate()
    assert info.value.rank == 1 and info.value.stage == "load_plugins"
    assert "register_fails_on_rank1" in info.value.traceback_text


def test_join_timeout_bounds_join_and_tears_down(ray_cluster: Any, tmp_path: Path) -> None:
    root = _site(tmp_path / "site")
    join_timeout = 25.0
    group = skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t", "block_s": 120},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
        join_timeout=join_timeout,
    )
    try:
        group.wait_ready()
        start = time.monotonic()
        with pytest.raises(EntryTimeoutError, match="join_timeout") as info:
            group.join()  # no timeout of its own: the group's join_timeout bounds it
        assert time.monotonic() - start < join_timeout + 10
        pids = group.pids
    finally:
        group.terminate()
    assert info.value.stage == "entry"
    assert _gone(pids)


def test_results_after_terminate_is_a_typed_error(ray_cluster: Any, tmp_path: Path) -> None:
    """As locally: join() is False once terminate() stopped the ranks; results() says why none."""
    root = _site(tmp_path / "site")
    group = skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t", "block_s": 60},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    )
    try:
        group.wait_ready()
    finally:
        group.terminate()
    assert group.join(5) is False  # stopped, not done
    with pytest.raises(ChildExitedError, match=r"terminate\(\)") as info:
        group.results()
    assert info.value.rank == 0
    assert group.failure is None  # stopping on request is not a failure of the group


def test_unknown_strategy_is_refused_before_placing() -> None:
    with pytest.raises(ValueError, match=r"strategy must be one of PACK, SPREAD.*got 'spread'"):
        skray.spawn_on_ray("time:sleep", 1, nprocs=2, strategy="spread")


@pytest.mark.parametrize(
    ("amount", "why"),
    [(True, "a bool would be read as 1"), ("2", "a str is none"), (float("nan"), "not finite")],
)
def test_a_resource_amount_that_is_no_number_is_refused_before_ray(amount: Any, why: str) -> None:
    """``float()`` read ``{"GPU": True}`` as one GPU and ``"2"`` as two, and NaN passed the
    positive-amount check; refused by value, before Ray is even asked for a cluster."""
    with pytest.raises(ConfigError, match=why) as info:
        skray.spawn_on_ray("json:dumps", nprocs=1, resources={"CPU": 1, "GPU": amount})
    assert info.value.setting == "resources"
    assert "'GPU'" in str(info.value) and "No actor was started" in str(info.value)


# ----------------------------------------------------- round 2: paths that were quiet
def test_a_rank_without_a_node_id_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """The actor keeps why it has no node id; the driver says node-loss detection is off."""
    probe = (
        "import sys, json\n"
        "sys.modules['ray'] = None  # Ray's runtime context cannot be reached\n"
        "from spawnkit.scaleout._ray_actor import RankActor\n"
        "print(json.dumps(RankActor().where()))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    import json

    where = json.loads(done.stdout.strip().splitlines()[-1])
    assert where["node"] == "" and "import of ray halted" in where["node_error"]
    from spawnkit.scaleout._ray_ranks import RankTable

    table = RankTable("ray-x", 2)
    with caplog.at_level("WARNING", logger="spawnkit.ray"):
        table.locate(1, where)
    assert "rank 1" in caplog.text and "node-loss detection is off" in caplog.text
    assert "import of ray halted" in caplog.text


_SECOND_DRIVER = """
import logging, sys
import ray
import spawnkit.scaleout.ray as skray
from spawnkit.spec import NamespaceConfig

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
ray.init(address=sys.argv[1], configure_logging=False, log_to_driver=False)
group = skray.spawn_on_ray("skray_app.entry:main", {"tag": "t", "block_s": 60}, nprocs=1,
                           namespace=NamespaceConfig.build("skray", "SKRAY"),
                           env={"PYTHONPATH": sys.argv[2]}, ready_timeout=90)
group.wait_ready()
ray.shutdown()  # the driver lost its connection: terminate() cannot reach the cluster
group.terminate()
print("TERMINATED", flush=True)
"""


def test_terminate_that_cannot_reach_ray_warns_with_the_consequence(
    ray_cluster: Any, tmp_path: Path
) -> None:
    root = _site(tmp_path / "site")
    script = tmp_path / "driver.py"
    script.write_text(_SECOND_DRIVER)
    address = ray.get_runtime_context().gcs_address
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(script), address, str(root)], capture_output=True,
                          text=True, timeout=240, env=env)
    assert "TERMINATED" in done.stdout, done.stderr[-3000:]
    err = done.stderr
    assert "WARNING" in err and "ray.kill of rank 0 failed" in err, err[-3000:]
    assert "may still be running" in err and "spawnkit.cleanup(" in err


def test_a_short_entrys_output_arrives_before_the_group_reports_done(
    ray_cluster: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = _site(tmp_path / "site")
    capfd.readouterr()
    with skray.spawn_on_ray(
        "skray_app.shout:shout",
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
        join_timeout=60,
        prefix_output=True,
    ) as group:
        assert group.results() == [0, 1]
        out, err = capfd.readouterr()  # at once: nothing may still be on its way
    for rank in (0, 1):
        assert f"[rank{rank}]: shout from rank {rank}\n" in out, out
        assert f"[rank{rank}]: tail of rank {rank}\n" in out, out
        assert f"[rank{rank}]: warn from rank {rank}\n" in err, err


def test_a_with_block_that_never_waited_for_running_ranks_warns(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """As locally: leaving the block stops the ranks unfinished; said at the `with` line."""
    from spawnkit.errors import GroupExitWarning

    root = _site(tmp_path / "site")
    with pytest.warns(GroupExitWarning) as caught, skray.spawn_on_ray(
        "skray_app.entry:main",
        {"tag": "t", "block_s": 60},
        nprocs=2,
        namespace=_namespace(),
        env=_env(root),
        ready_timeout=READY_S,
    ) as group:
        pass
    (warning,) = [w for w in caught if w.category is GroupExitWarning]  # the env check warns too
    assert warning.filename == __file__
    assert f"worker group {group.run_id}" in str(warning.message)
    assert "rank(s) 0, 1 were still running" in str(warning.message)


def _second_plugin(root: Path) -> Path:
    """A second plugin beside ``patcher``, so a selection has something to leave out."""
    write_distribution(
        root,
        "skray-extra",
        "1.0",
        entry_points={"skray.plugins": {"extra": "skray_extra:register"}},
        modules={"skray_extra": "def register():\n    pass\n"},
    )
    return root


def test_the_drivers_namespace_settings_reach_the_ranks(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank sees its raylet's environment, not the driver's: set after ``ray.init()`` (or in
    a shell joining a running cluster), ``SKRAY_PLUGINS=patcher`` loaded every plugin."""
    root = _second_plugin(_site(tmp_path / "site"))
    monkeypatch.setenv("SKRAY_PLUGINS", "patcher")
    monkeypatch.setenv("SKRAY_HOOK_CONFLICTS", "error")

    def run(env: dict[str, str]) -> list[Any]:
        with skray.spawn_on_ray(
            "skray_app.entry:main", {"tag": "t"}, nprocs=1, namespace=_namespace(), env=env,
            ready_timeout=READY_S, join_timeout=60,
        ) as group:  # fmt: skip
            return group.results()

    (res,) = run(_env(root))
    assert res["plugins"] == ["patcher"]
    assert res["env"]["SKRAY_HOOK_CONFLICTS"] == "error"
    # env= still wins over the driver's own environment, as locally
    (res,) = run({**_env(root), "SKRAY_PLUGINS": "extra"})
    assert res["plugins"] == ["extra"]


def test_the_drivers_plugin_selection_is_what_the_plugin_set_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drift check's record and the ranks' selection are the same names (they both said
    "all" while the ranks were meant to load one); a typo is refused here, as locally."""
    from spawnkit.errors import PluginError

    root = _second_plugin(_site(tmp_path / "site"))
    monkeypatch.setenv("SKRAY_PLUGINS", "patcher")
    template = skray.build_template("skray_app.entry:main", namespace=_namespace(), env=_env(root))
    assert template.plugins == ("patcher",)
    assert template.env["SKRAY_PLUGINS"] == "patcher"
    rows = template._control.plugin_rows or ()
    assert sorted(r[0] for r in rows if r[2] == "skray.plugins") == ["patcher"]
    monkeypatch.setenv("SKRAY_PLUGINS", "patchr")
    with pytest.raises(PluginError, match=r"SKRAY_PLUGINS='patchr' selects 'patchr' \(did you"):
        skray.build_template("skray_app.entry:main", namespace=_namespace(), env=_env(root))
    monkeypatch.setenv("SKRAY_LENIENT_PLUGINS", "1")
    with pytest.warns(UserWarning, match="running without it"):
        template = skray.build_template(
            "skray_app.entry:main", namespace=_namespace(), env=_env(root)
        )
    assert template.plugins == ()
    monkeypatch.delenv("SKRAY_PLUGINS")
    monkeypatch.setenv("SKRAY_PLATFORM", "cpu")
    template = skray.build_template("skray_app.entry:main", namespace=_namespace(), env=_env(root))
    assert template.plugins is None  # no selection made here: each rank loads every plugin
    # the user's platform choice travels; the driver's detection is still not pinned
    assert template.env["SKRAY_PLATFORM"] == "cpu" and template.platform is None


def test_sys_exit_0_in_the_entry_is_an_ending_not_a_failure(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """As locally and under torchrun: ``sys.exit(0)`` ends a rank with the result None (it was
    a ``ChildRaisedError`` "SystemExit: 0"); a nonzero code stays a failure."""
    root = _site(tmp_path / "site")

    def run(code: int | None, nprocs: int) -> list[Any]:
        with skray.spawn_on_ray(
            "skray_app.shout:exits", {"code": code}, nprocs=nprocs, namespace=_namespace(),
            env=_env(root), ready_timeout=READY_S, join_timeout=60,
        ) as group:  # fmt: skip
            return group.results()

    assert run(0, 2) == [None, None]
    assert run(None, 1) == [None]
    with pytest.raises(ChildRaisedError, match="SystemExit: 3") as caught:
        run(3, 1)
    assert caught.value.stage == "entry"
