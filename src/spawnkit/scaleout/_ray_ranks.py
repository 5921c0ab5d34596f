"""The Ray driver's view of its ranks: where each runs, its last stage, and errors naming a rank.

The counterpart of ``launch/_rank.py``; failure wording shared via :mod:`spawnkit.protocol.failure`.
"""

from __future__ import annotations

import logging
from typing import Any

from spawnkit.errors import BootstrapTimeoutError, ChildError, ChildExitedError, NodeLostError
from spawnkit.launch._timeouts import first_late, join_timeout_error, results_timeout_error
from spawnkit.protocol import failure

__all__ = ["LAUNCHER", "RankOutput", "RankTable"]

LAUNCHER = "ray"

_log = logging.getLogger("spawnkit.ray")


class RankTable:
    """Per rank: ``where`` (pid, host, node id, ip, as the actor said) and ``stage``."""

    def __init__(self, run_id: str, nprocs: int) -> None:
        self.name = f"Ray group {run_id}"
        self.nprocs = nprocs
        self.where: list[dict[str, Any]] = [{} for _ in range(nprocs)]
        self.stage: list[str] = ["placement"] * nprocs

    def locate(self, rank: int, where: dict[str, Any]) -> None:
        """Keep where ``rank``'s actor runs; without a node id a node loss could not be named."""
        self.where[rank] = where
        why = where.get("node_error")
        if why:
            _log.warning(
                "%s: rank %d (pid %s, host %s) could not learn its Ray node id (%s); node-loss "
                "detection is off for that rank: if its node dies, the rank is reported as a "
                "dead actor (ChildExitedError), not as NodeLostError naming the node.",
                self.name,
                rank,
                where.get("pid"),
                where.get("host", ""),
                why,
            )

    def worker(self, rank: int) -> failure.Worker:
        where = self.where[rank] if rank < len(self.where) else {}
        host, node = str(where.get("host", "")), str(where.get("node", ""))
        return failure.Worker(rank, where.get("pid"), host, node, LAUNCHER)

    def effect(self, rank: int, ends: dict[int, str] | None = None) -> str:
        """What rank ``rank`` failing affects (``ends``: how each other rank ended, once the
        driver knows: failed too, returned, stopped)."""
        ends = ends or {}
        others = [
            (r, f"{self.stage[r]} ({ends[r]})" if ends.get(r) else self.stage[r])
            for r in range(self.nprocs)
            if r != rank
        ]
        return failure.effect_line(f"{self.name} ({self.nprocs} rank(s))", others)

    def add_other_failures(
        self, err: ChildError, others: dict[int, ChildError], said: str, ends: dict[int, str]
    ) -> None:
        """``others`` (the other ranks' own failures) on ``err``, as a local group's are: in
        ``err.other_failures``, in brief after its Effect line (``said``, as it was built),
        which now tells the ranks that failed from those stopped."""
        err.other_failures = others
        text, block = str(err.args[0]) if err.args else "", failure.also_failed(others)
        if err.rank is None or not said or said not in text:  # a timeout's: no Effect line
            err.args = (f"{text}\n{block}",)
            return
        err.args = (text.replace(said, f"{self.effect(err.rank, ends)}\n{block}", 1),)

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


class RankOutput:
    """The ranks' captured stdout/stderr, printed here in whole lines (see ``_ray_output``)."""

    def __init__(self, prefix: bool) -> None:
        self._prefix = prefix
        self._streams: dict[tuple[int, str], Any] = {}

    def show(self, rank: int, chunks: dict[str, bytes], *, final: bool = False) -> None:
        from spawnkit.launch._output import LineStream, emit_lines

        for name in ("stdout", "stderr"):
            key = (rank, name)
            stream = self._streams.get(key)
            if stream is None:
                prefix = f"[rank{rank}]: ".encode() if self._prefix else b""
                stream = self._streams[key] = LineStream(-1, name, prefix)
            if chunks.get(name):
                emit_lines(name, stream.lines(chunks[name]))
            if final:
                emit_lines(name, stream.rest())

    def poll(self, ray: Any, actors: list[Any], timeout: float) -> None:
        """Ask every rank for what it wrote since the last call; a rank that cannot answer
        (gone, or busy past ``timeout``) is skipped: its death is reported elsewhere."""
        refs = {}
        for rank, actor in enumerate(actors):
            try:
                refs[actor.output.remote()] = rank
            except Exception:
                continue
        if not refs:
            return
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in done:
            try:
                self.show(refs[ref], ray.get(ref, timeout=0))
            except Exception:
                continue
