"""The live per-rank start-up view of ``spawnkit launch``/``demo``, and the Ctrl-C line.

Fed by ``spawn_with_plugins(progress=...)``: a ticking rich table on a terminal (a stuck rank is
visible before any timeout), one plain line per stage change when piped, silent with ``--json -``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from spawnkit.bootstrap.stages import Stage
from spawnkit.cli._output import Output
from spawnkit.launch._progress import DONE, END_STAGES, FAILED, STOPPED

__all__ = ["StageDisplay"]

_MARK = {DONE: "✔", FAILED: "✘", STOPPED: "✘"}


class _RankView:
    __slots__ = ("elapsed", "end", "end_elapsed", "entry_at", "seen_at", "stage")

    def __init__(self) -> None:
        self.stage = "starting"
        self.end = ""
        self.elapsed = 0.0  # seconds since the rank started, as of ``seen_at``
        self.seen_at = time.monotonic()
        self.end_elapsed: float | None = None
        self.entry_at: float | None = None


class StageDisplay:
    """Receives ``(rank, stage, elapsed)`` events; renders them as the output stream allows."""

    def __init__(self, out: Output, nprocs: int, *, mode: str) -> None:
        if mode not in ("auto", "quiet"):
            raise ValueError(f"mode must be 'auto' or 'quiet', got {mode!r}")
        self.out = out
        self.quiet = mode == "quiet"
        self.live = not self.quiet and out.rich
        self.ranks = [_RankView() for _ in range(nprocs)]
        self._lock = threading.Lock()

    # --------------------------------------------------------------- events
    def __call__(self, rank: int, stage: str, elapsed: float) -> None:
        """The progress callback: cheap, and it never raises on a rank it does not know."""
        if not 0 <= rank < len(self.ranks):
            return
        with self._lock:
            view = self.ranks[rank]
            view.seen_at = time.monotonic()
            view.elapsed = elapsed
            if stage in END_STAGES:
                view.end, view.end_elapsed = stage, elapsed
            else:
                view.stage = stage
                if stage == Stage.ENTRY:
                    view.entry_at = elapsed
        if not self.live and not self.quiet:
            self.out.line(self._plain(rank, view))

    def _plain(self, rank: int, view: _RankView) -> str:
        if view.end == DONE:
            return f"rank {rank}: done after {view.elapsed:.2f} s"
        if view.end:
            word = "FAILED" if view.end == FAILED else "stopped"
            return f"rank {rank}: {word} in stage {view.stage!r} after {view.elapsed:.2f} s"
        return f"rank {rank}: {view.stage} (at {view.elapsed:.2f} s)"

    # ------------------------------------------------------------ rendering
    def __rich__(self) -> Any:
        """Rebuilt at every refresh, so elapsed times tick between events."""
        from rich.table import Table

        table = Table(title="workers", title_justify="left")
        for col in ("rank", "stage", "in stage", "elapsed", ""):
            table.add_column(col, justify="right" if col in ("in stage", "elapsed") else "left")
        now = time.monotonic()
        with self._lock:
            for rank, view in enumerate(self.ranks):
                if view.end:
                    elapsed = view.end_elapsed or view.elapsed
                    mark = f"{_MARK[view.end]} {view.end}"
                    in_stage = ""
                else:
                    elapsed = view.elapsed + (now - view.seen_at)
                    mark = "…"
                    in_stage = f"{now - view.seen_at:.1f} s" if view.stage != "starting" else ""
                table.add_row(str(rank), view.stage, in_stage, f"{elapsed:.1f} s", mark)
        return table

    @contextlib.contextmanager
    def showing(self) -> Iterator[StageDisplay]:
        """The live table on a terminal for the duration; its last state stays on screen."""
        if not self.live:
            yield self
            return
        from rich.live import Live

        with Live(self, console=self.out.console, refresh_per_second=8, transient=False):
            yield self

    # -------------------------------------------------------------- summary
    def entry_seconds(self) -> dict[int, float]:
        """Per rank that finished: seconds from ready to exit, as the launcher saw them."""
        return {
            rank: view.end_elapsed - view.entry_at
            for rank, view in enumerate(self.ranks)
            if view.end == DONE and view.entry_at is not None and view.end_elapsed is not None
        }

    def rank_states(self) -> list[dict[str, Any]]:
        """Each rank as a Ctrl-C left it, for ``--json``: its last stage and how it ended
        (``stopped``: running when the group was stopped; ``not started``: never reported)."""
        with self._lock:
            return [
                {
                    "rank": rank,
                    "stage": view.stage,
                    "state": view.end or (STOPPED if view.stage != "starting" else "not started"),
                }
                for rank, view in enumerate(self.ranks)
            ]

    def interrupted_line(self, command: str) -> str:
        """The one line a Ctrl-C leaves: how many workers were stopped, and where each was."""
        with self._lock:
            stopped = [
                (r, v.stage)
                for r, v in enumerate(self.ranks)
                if v.end != DONE and v.stage != "starting"  # "starting": never started
            ]
        if not stopped:
            return f"spawnkit {command}: interrupted; every worker had already finished"
        where = ", ".join(f"rank {r} in {stage}" for r, stage in stopped)
        noun = "worker" if len(stopped) == 1 else "workers"
        return f"spawnkit {command}: interrupted; {len(stopped)} {noun} stopped ({where})"
