"""The Ray driver's view of its ranks: where each one runs, the stage it was last seen in,
and the errors that name a rank (the counterpart of the local launcher's ``launch/_rank.py``).

``RayWorkerGroup`` decides when to wait and which failure wins; the words
come from here and, for what a failure says about the rank itself, from
:mod:`spawnkit.protocol.failure`, shared with the local launcher.
"""

from __future__ import annotations

from typing import Any

from spawnkit.errors import BootstrapTimeoutError, ChildError, ChildExitedError, NodeLostError
from spawnkit.launch._timeouts import first_late, join_timeout_error, results_timeout_error
from spawnkit.protocol import failure

__all__ = ["LAUNCHER", "RankTable"]

LAUNCHER = "ray"


class RankTable:
    """Per rank: ``where`` (pid, host, node id, ip, as the actor said) and ``stage``."""

    def __init__(self, run_id: str, nprocs: int) -> None:
        self.name = f"Ray group {run_id}"
        self.nprocs = nprocs
        self.where: list[dict[str, Any]] = [{} for _ in range(nprocs)]
        self.stage: list[str] = ["placement"] * nprocs

    def worker(self, rank: int) -> failure.Worker:
        where = self.where[rank] if rank < len(self.where) else {}
        host, node = str(where.get("host", "")), str(where.get("node", ""))
        return failure.Worker(rank, where.get("pid"), host, node, LAUNCHER)

    def effect(self, rank: int) -> str:
        others = [(r, self.stage[r]) for r in range(self.nprocs) if r != rank]
        return failure.effect_line(f"{self.name} ({self.nprocs} rank(s))", others)

    def died(self, rank: int, ray_says: str) -> ChildExitedError:
        return failure.actor_died_error(self.worker(rank), self.stage[rank], ray_says)

    def node_lost(self, rank: int) -> NodeLostError:
        ip = str(self.where[rank].get("ip", ""))
        return failure.node_lost_error(self.worker(rank), self.stage[rank], ip, self.effect(rank))

    def stopped(self, rank: int, what: str) -> ChildExitedError:
        """Rank ``rank`` never did ``what``: ``terminate()`` stopped the group first."""
        return failure.stopped_error(self.worker(rank), self.name, self.stage[rank], None, what)

    def late(self, ranks: list[int], doing: str, waited: float) -> BootstrapTimeoutError:
        """``ranks`` did not finish ``doing`` by the startup deadline."""
        late = ", ".join(f"rank {r} in stage {self.stage[r]!r}" for r in ranks)
        return BootstrapTimeoutError(
            f"{self.name}: {len(ranks)} of {self.nprocs} rank(s) did not finish {doing} within "
            f"{waited:.1f}s ({late}). The group was stopped. Raise ready_timeout if the "
            "bootstrap is just slow, or look at the stage named for a hang.",
            waited_s=waited,
            stage=self.stage[ranks[0]],
            **self.worker(ranks[0]).fields(),
        )

    def join_timed_out(
        self, running: list[int], waited: float, join_timeout: float | None
    ) -> ChildError:
        """The group's ``join_timeout`` passed with ``running`` unfinished (entry or bootstrap)."""
        who, stage = first_late([(self.worker(r), self.stage[r]) for r in running])
        return join_timeout_error(
            who,
            stage,
            running=len(running),
            world=self.nprocs,
            group=self.name,
            join_timeout=join_timeout,
            waited=waited,
        )

    def results_timeout(self, running: list[int], waited: float) -> ChildError:
        """``results(timeout=)`` passed with ``running`` unfinished; the group runs on."""
        late = [(self.worker(r), self.stage[r]) for r in running]
        return results_timeout_error(late, group=self.name, waited=waited)
