"""The wording of a local worker group's failures: which rank, what it affects, which limit.

Apart from ``group.py`` so that the group's class keeps to supervising; every
error here is built from what the group saw, and the group raises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import ChildError
from spawnkit.launch._rank import Rank, dump_stacks
from spawnkit.launch._timeouts import (
    join_timeout_error,
    ready_timeout_error,
    results_timeout_error,
)
from spawnkit.protocol import failure
from spawnkit.protocol.popen import LaunchContext

__all__ = ["GroupErrors"]

_STACK_DUMP_WAIT = 0.5


def stacks_of(ranks: Sequence[Rank]) -> dict[int, str]:
    """Each worker's stacks from its faulthandler, a bounded wait."""
    return dump_stacks(ranks, _STACK_DUMP_WAIT)


def _named(ranks: list[Rank]) -> Rank:
    """The rank a timeout names: one still bootstrapping first (then the deadline is its),
    then one still in its entry, before one whose entry returned but that has not ended."""
    return next(
        (r for r in ranks if r.stage != Stage.ENTRY.value),
        next((r for r in ranks if r.result is None), ranks[0]),
    )


@dataclass(frozen=True)
class GroupErrors:
    run_id: str
    ctx: LaunchContext
    launched: float
    ready_timeout: float | None
    join_timeout: float | None

    @property
    def name(self) -> str:
        return f"worker group {self.run_id}"

    def effect(
        self, rank: int, stages: list[tuple[int, str]], ends: dict[int, str] | None = None
    ) -> str:
        """What rank ``rank`` failing affects: this group, and where its other ranks were
        (``ends``, once the teardown is over: how each ended, failed or stopped).

        Takes numbers and stage names, not ``Rank`` objects: the failure record itself goes
        from the group straight to ``failure.child_error`` (``tests/test_walks.py``)."""
        ends = ends or {}
        others = [
            (n, f"{stage} ({ends[n]})" if ends.get(n) else stage)
            for n, stage in stages
            if n != rank
        ]
        ctx = self.ctx
        group = f"{self.name} ({len(stages)} rank(s), {ctx.start_method}/{ctx.package})"
        return failure.effect_line(group, others)

    @property
    def preload(self) -> tuple[str, ...]:
        """The modules the warm server preloaded (a failure's hint may name one)."""
        return self.ctx.server.preload if self.ctx.server is not None else ()

    def not_ready(
        self, stuck: list[Rank], now: float, world: int, call_timeout: float | None
    ) -> ChildError:
        return ready_timeout_error(
            stuck,
            now,
            world=world,
            run_id=self.run_id,
            waited=now - self.launched,
            ready_timeout=self.ready_timeout,
            call_timeout=call_timeout,
            stacks=stacks_of(stuck),
        )

    def join_expired(self, running: list[Rank], now: float, world: int) -> ChildError:
        first = _named(running)
        return join_timeout_error(
            first.worker,
            first.stage,
            running=len(running),
            world=world,
            group=self.name,
            join_timeout=self.join_timeout,
            waited=now - self.launched,
            stacks=stacks_of(running),
            returned=first.result is not None,
        )

    def results_late(self, late: list[Rank], waited: float) -> ChildError:
        return results_timeout_error(
            [(r.worker, r.stage) for r in late],
            group=self.name,
            waited=waited,
            stacks=stacks_of([_named(late)]),  # only the rank named: results() is polled
            returned={r.rank for r in late if r.result is not None},
        )
