"""spawnkit on a real multi-node Ray cluster on this machine: placement across nodes, a lost node.

``ray.cluster_utils.Cluster`` starts a head (no CPUs, so no rank lands there)
and two worker nodes, each a raylet of its own with its own node id.  One
cluster serves the module; it is tiny (2 logical CPUs and 80 MiB of object
store per node) and Ray's node health check is tightened so a removed node is
declared dead in about a second instead of Ray's default ~15 s.  The head
runs the dashboard (on a free port) because Ray's state API
(``ray.util.state``), which checks that nothing of a group is left, is served
by it; that needs ``ray[default]``, which the ``dev`` extra installs.  The lock
file and xdist group are shared with tests/test_ray.py: one cluster at a time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _ray_support import file_lock
from spawnkit.errors import BootstrapTimeoutError, ChildExitedError, NodeLostError
from spawnkit.testing import write_distribution

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')

import spawnkit.scaleout.ray as skray  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spawnkit-ray")]

LOCK_WAIT_S = 600.0
READY_S = 90.0
NODE_ARGS: dict[str, Any] = {"num_cpus": 2, "object_store_memory": 80 * 1024 * 1024}
#: Ray marks a silent node dead after this many missed checks at this period.
HEALTH = {
    "health_check_period_ms": 200,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 5,
    "health_check_initial_delay_ms": 0,
}

APP_SRC = """
import os, time

def where(payload):
    import ray
    from spawnkit.bootstrap import current_report, current_spec

    spec = current_spec()
    deadline = time.monotonic() + payload.get("block_s", 0)
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return {
        "rank": spec.rank,
        "local_rank": spec.local_rank,
        "local_world_size": os.environ.get("LOCAL_WORLD_SIZE"),
        "node": ray.get_runtime_context().get_node_id(),
        "report_node": current_report().node,
    }
"""


class Nodes:
    """The module's cluster: the Ray ``Cluster`` plus its two worker nodes (replaced if removed)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.workers: list[Any] = []

    def add_worker(self) -> Any:
        node = self.cluster.add_node(**NODE_ARGS)
        self.workers.append(node)
        self.cluster.wait_for_nodes()
        return node

    def remove(self, node_id: str) -> None:
        """Kill that node's raylet and workers at once, as a crash or preemption would."""
        node = next(n for n in self.workers if n.node_id == node_id)
        self.workers.remove(node)
        self.cluster.remove_node(node, allow_graceful=False)

    @property
    def worker_ids(self) -> set[str]:
        return {n.node_id for n in self.workers}


@pytest.fixture(scope="module")
def ray_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    from ray.cluster_utils import Cluster

    if importlib.util.find_spec("aiohttp") is None:
        pytest.skip('Ray\'s state API needs the dashboard: pip install "ray[default]"')
    lock = tmp_path_factory.getbasetemp().parent / "spawnkit-ray-cluster.lock"
    with file_lock(lock, LOCK_WAIT_S):
        # Short: Ray puts unix sockets under it.  RAY_TMPDIR also keeps the cluster's address
        # file out of the shared /tmp/ray, where another suite's ray.init("auto") would find it.
        temp_dir = tempfile.mkdtemp(prefix="skrn-", dir="/tmp" if os.path.isdir("/tmp") else None)
        os.makedirs(os.path.join(temp_dir, "ray"))
        saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_TMPDIR")}
        os.environ.pop("RAY_ADDRESS", None)
        os.environ["RAY_TMPDIR"] = temp_dir
        cluster = None
        try:
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 0,
                    "include_dashboard": True,
                    "dashboard_port": 0,
                    "object_store_memory": NODE_ARGS["object_store_memory"],
                    "_system_config": HEALTH,
                },
            )
            nodes = Nodes(cluster)
            nodes.add_worker()
            nodes.add_worker()
            ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # pragma: no cover - environment-dependent
            if cluster is not None:
                cluster.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
            pytest.skip(f"cannot start a multi-node Ray cluster here: {type(exc).__name__}: {exc}")
        try:
            yield nodes
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _site(root: Path) -> dict[str, str]:
    write_distribution(root, "skrn-app", "1.0", modules={"skrn_app": APP_SRC})
    return {"PYTHONPATH": str(root)}


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _leftovers(within: float = 20.0) -> tuple[list[str], list[str]]:
    """Actors not DEAD and placement groups not REMOVED, as Ray's state API lists them.

    Polled: ``ray.kill`` and placement-group removal are asynchronous.
    """
    from ray.util.state import list_actors, list_placement_groups

    deadline = time.monotonic() + within
    while True:
        actors = [
            f"{a.actor_id} {a.class_name} {a.state}"
            for a in list_actors(filters=[("state", "!=", "DEAD")], timeout=30)
        ]
        groups = [
            f"{g.placement_group_id} {g.state}"
            for g in list_placement_groups(filters=[("state", "!=", "REMOVED")], timeout=30)
        ]
        if (not actors and not groups) or time.monotonic() > deadline:
            return actors, groups
        time.sleep(0.2)


# -------------------------------------------------------------------------- tests
def test_spread_places_ranks_on_different_nodes_and_reports_name_them(
    ray_nodes: Nodes, tmp_path: Path
) -> None:
    with skray.spawn_on_ray(
        "skrn_app:where",
        {},
        nprocs=2,
        env=_site(tmp_path / "site"),
        strategy="SPREAD",
        ready_timeout=READY_S,
        join_timeout=60,
    ) as group:
        reports = group.wait_ready()
        results = group.results()
    nodes = [r.node for r in reports]
    assert len(set(nodes)) == 2, f"SPREAD put both ranks on one node: {nodes}"
    assert set(nodes) == ray_nodes.worker_ids  # the head has no CPUs
    assert nodes == group.nodes
    for rank, (report, res) in enumerate(zip(reports, results, strict=True)):
        assert report.rank == rank and res["rank"] == rank
        assert res["node"] == report.node == res["report_node"]  # where it really ran
        assert report.node in report.format()
        # one rank per node: each is local rank 0 of a local world of 1
        assert report.local_rank == res["local_rank"] == 0
        assert res["local_world_size"] == "1"
    assert _leftovers() == ([], [])


def test_strict_spread_over_more_ranks_than_nodes_says_so(ray_nodes: Nodes) -> None:
    # Resources would fit (2 nodes x 2 CPUs); distinct nodes for 3 ranks do not exist.
    with pytest.raises(BootstrapTimeoutError) as info:
        skray.spawn_on_ray(
            "time:sleep",
            1,
            nprocs=3,
            resources={"CPU": 0.5},
            strategy="STRICT_SPREAD",
            ready_timeout=3,
        )
    err = info.value
    assert err.stage == "placement"
    assert "STRICT_SPREAD needs 3 distinct nodes" in str(err)
    assert "the cluster has 2" in str(err)  # the CPU-less head cannot hold one
    assert _leftovers() == ([], [])


def test_losing_a_node_fails_its_rank_naming_the_node_and_tears_down(
    ray_nodes: Nodes, tmp_path: Path
) -> None:
    group = skray.spawn_on_ray(
        "skrn_app:where",
        {"block_s": 120},
        nprocs=2,
        env=_site(tmp_path / "site"),
        strategy="SPREAD",
        ready_timeout=READY_S,
        join_timeout=180,
    )
    try:
        group.wait_ready()
        victim = group.nodes[1]
        survivor_pid = group.pids[0]
        assert victim != group.nodes[0]
        started = time.monotonic()
        ray_nodes.remove(victim)
        with pytest.raises(NodeLostError) as info:
            group.join(60)
        took = time.monotonic() - started
    finally:
        group.terminate()
        ray_nodes.add_worker()  # the next test gets two worker nodes again
    err = info.value
    assert isinstance(err, ChildExitedError)  # handlers of dead workers still catch it
    assert err.rank == 1 and err.node == victim and err.stage == "entry"
    assert f"rank 1 (ray, pid {group.pids[1]}" in str(err) and victim in str(err)
    assert "rank 0: entry" in str(err)  # what else it stopped
    assert took < 30, f"the node loss took {took:.1f}s to surface"
    assert group.failure is err
    # the rank on the surviving node was stopped, and nothing of the group is left in Ray
    deadline = time.monotonic() + 20
    while _alive(survivor_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(survivor_pid)
    assert _leftovers() == ([], [])
