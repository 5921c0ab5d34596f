"""Where a Ray group's ranks live: one fresh actor per bundle of its placement group, and
their release.  Apart from ``ray.py`` so the group's class keeps to supervising."""

from __future__ import annotations

import logging
from typing import Any

from spawnkit.errors import BootstrapTimeoutError

__all__ = ["not_placed", "release", "start_actors"]

_log = logging.getLogger("spawnkit.ray")


def start_actors(
    ray: Any,
    pg: Any,
    bundle: dict[str, float],
    actor_env: dict[str, str],
    nprocs: int,
    *,
    into: list[Any],
) -> None:
    """One fresh actor per rank, each in its own bundle of ``pg``, appended to ``into`` as it
    is created (so that a failure half-way still leaves them to ``terminate()``)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from spawnkit.scaleout._ray_actor import RankActor

    remote_cls = ray.remote(RankActor)
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
    for rank in range(nprocs):
        opts: dict[str, Any] = {
            "num_cpus": bundle.get("CPU", 0.0),
            "num_gpus": bundle.get("GPU", 0.0),
            "max_restarts": 0,
            "max_task_retries": 0,
            "max_concurrency": 3,  # run, wait_ready and output answer at once
            "runtime_env": {"env_vars": dict(actor_env)},
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=rank
            ),
        }
        if custom:
            opts["resources"] = custom
        into.append(remote_cls.options(**opts).remote())


def not_placed(
    ray: Any, run_id: str, nprocs: int, bundle: dict[str, float], strategy: str, waited: float
) -> BootstrapTimeoutError:
    """The placement group did not fit in time: what was asked, what the cluster has."""
    strict = ""
    if strategy == "STRICT_SPREAD":
        fit = sum(
            1
            for n in ray.nodes()
            if n.get("Alive")
            and all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in bundle.items())
        )
        strict = (
            f" STRICT_SPREAD needs {nprocs} distinct nodes that can each hold one "
            f"bundle, and the cluster has {fit}: use SPREAD, fewer ranks, or more nodes."
        )
    return BootstrapTimeoutError(
        f"Ray group {run_id}: the placement group of {nprocs} bundle(s) "
        f"{bundle} (strategy {strategy}) was not placed within "
        f"{waited:.0f}s, so no rank started. The cluster has "
        f"{ray.available_resources()} available of {ray.cluster_resources()}; lower "
        f"resources=/nprocs or add nodes.{strict}",
        waited_s=waited,
        stage="placement",
    )


def release(ray: Any, actors: list[Any], pg: Any, run_id: str, bundles: int) -> None:
    """Kill ``actors`` and remove ``pg``; what could not be released is logged, with the fix."""
    from ray.util.placement_group import remove_placement_group

    for rank, actor in enumerate(actors):
        try:
            ray.kill(actor, no_restart=True)
        except Exception as exc:
            # ray.kill on an actor that already exited succeeds; a failure means the rank
            # may still run (and hold its resources) after this call.
            _log.warning(
                "Ray group %s: ray.kill of rank %d failed (%s: %s); that rank's actor "
                "may still be running and holding its resources. Check `ray list actors` "
                "and run spawnkit.cleanup(%r) on its node if it is.",
                run_id,
                rank,
                type(exc).__name__,
                exc,
                run_id,
            )
    try:
        remove_placement_group(pg)
    except Exception as exc:
        _log.warning(
            "Ray group %s: removing its placement group failed (%s: %s); its %d "
            "bundle(s) stay reserved on the cluster until the driver disconnects or you "
            "remove it (ray.util.remove_placement_group).",
            run_id,
            type(exc).__name__,
            exc,
            bundles,
        )
