"""Running a worker group for the CLI: live stage progress, the timing table, failures.

The live view polls the group's public state (``stages``, ``exit_codes``)
between bounded ``join(timeout)`` calls, so it never holds up supervision:
the launcher still sees every report and exit as it happens.  On a terminal
the view is a rich live table; piped, it prints one line per stage change,
which reads well in CI logs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, TextIO

from spawnkit.cli._errors import EXIT_FAILURE, EXIT_OK
from spawnkit.cli._output import Output, emit_json

__all__ = ["exit_status", "render_failure", "render_stage_table", "run_group", "run_probe"]

_POLL_S = 0.1


def exit_status(exc: BaseException) -> int:
    """The process exit status that reports ``exc``: the rank's own code, 128+N for signal N."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and code != 0:
        return 128 - code if code < 0 else code
    return EXIT_FAILURE


def render_failure(exc: BaseException, out: Output, err: TextIO, *, debug: bool) -> None:
    """The root cause first (the launcher's message starts with it), then the child's traceback."""
    text = str(exc)
    head = text.splitlines()[0] if text else type(exc).__name__
    err.write(f"spawnkit: FAILED: {type(exc).__name__}: {head}\n")
    rest = "\n".join(text.splitlines()[1:])
    if rest:
        err.write(rest.rstrip() + "\n")
    tb = getattr(exc, "traceback_text", "")
    if debug and tb and tb.strip() not in text:
        err.write(tb.rstrip() + "\n")
    err.flush()


def _stage_names(reports: list[Any]) -> list[str]:
    names: list[str] = []
    for report in reports:
        for stage in getattr(report, "stage_seconds", None) or {}:
            if stage not in names:
                names.append(stage)
    return names


def render_stage_table(
    out: Output, reports: list[Any], entry_seconds: dict[int, float] | None = None
) -> None:
    """Milliseconds per stage and rank, from each rank's BootstrapReport (plus the entry)."""
    reports = [r for r in reports if r is not None]
    if not reports:
        return
    stages = _stage_names(reports)
    columns = ["rank", *stages, "bootstrap"]
    if entry_seconds:
        columns.append("entry")
    rows = []
    for report in sorted(reports, key=lambda r: r.rank):
        secs = report.stage_seconds
        row: list[Any] = [report.rank]
        row += [f"{secs[s] * 1e3:.1f}" if s in secs else "-" for s in stages]
        row.append(f"{sum(secs.values()) * 1e3:.1f}")
        if entry_seconds:
            value = entry_seconds.get(report.rank)
            row.append(f"{value * 1e3:.1f}" if value is not None else "-")
        rows.append(row)
    out.table(columns, rows, title="stage timings (ms)")


class _Progress:
    """What the parent saw of each rank: its stage changes, with the time they were seen."""

    def __init__(self, out: Output, nprocs: int, *, live: bool) -> None:
        self.out = out
        self.nprocs = nprocs
        self.stages: list[str] = ["starting"] * nprocs
        self.exit_codes: list[int | None] = [None] * nprocs
        self.entry_started: dict[int, float] = {}
        self.finished_at: dict[int, float] = {}
        self._live_obj: Any = None
        self._live = live and out.rich

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title="workers", title_justify="left")
        for col in ("rank", "stage", "exit"):
            table.add_column(col)
        for rank in range(self.nprocs):
            code = self.exit_codes[rank]
            table.add_row(str(rank), self.stages[rank], "-" if code is None else str(code))
        return table

    @contextlib.contextmanager
    def running(self) -> Iterator[_Progress]:
        if self._live:
            from rich.live import Live

            with Live(self._table(), console=self.out.console, refresh_per_second=10) as live:
                self._live_obj = live
                try:
                    yield self
                finally:
                    live.update(self._table())
                    self._live_obj = None
        else:
            yield self

    def update(self, stages: list[str], exit_codes: list[int | None]) -> None:
        now = time.monotonic()
        changed = False
        for rank, (stage, code) in enumerate(zip(stages, exit_codes, strict=False)):
            if stage == "entry" and rank not in self.entry_started:
                self.entry_started[rank] = now
            if code is not None and rank not in self.finished_at:
                self.finished_at[rank] = now
            shown = stage if code is None else f"exited ({stage})"
            if shown != self.stages[rank] or code != self.exit_codes[rank]:
                changed = True
                self.stages[rank], self.exit_codes[rank] = shown, code
                if not self._live:
                    suffix = f", exit code {code}" if code is not None else ""
                    self.out.line(f"rank {rank}: {shown}{suffix}")
        if changed and self._live_obj is not None:
            self._live_obj.update(self._table())

    def entry_seconds(self) -> dict[int, float]:
        return {
            rank: self.finished_at[rank] - start
            for rank, start in self.entry_started.items()
            if rank in self.finished_at
        }


def run_group(
    *,
    entry: str,
    payload: Any,
    nprocs: int,
    namespace: Any,
    start_method: str,
    preload: list[str],
    timeout: float,
    as_json: str | None,
    debug: bool,
    out: Output,
    err: TextIO,
) -> int:
    """``spawnkit launch``: start, show progress, print timings and results; the exit status."""
    from spawnkit.bootstrap import spawn_with_plugins
    from spawnkit.errors import SpawnkitError

    progress = _Progress(out, nprocs, live=as_json != "-")
    started = time.monotonic()
    try:
        group = spawn_with_plugins(
            entry,
            payload,
            nprocs=nprocs,
            namespace=namespace,
            start_method=start_method,
            preload=tuple(preload),
            ready_timeout=timeout,
            join_timeout=timeout,
        )
        with group, progress.running():
            while not group.join(timeout=_POLL_S):
                progress.update(group.stages, group.exit_codes)
            progress.update(group.stages, group.exit_codes)
            reports = group.wait_ready(timeout=1.0)
            results = group.results(timeout=1.0)
    except SpawnkitError as exc:
        _name_the_timeout_option(exc)
        if as_json:
            emit_json(
                out,
                as_json,
                {
                    "ok": False,
                    "error": type(exc).__name__,
                    "message": str(exc),
                    "rank": getattr(exc, "rank", None),
                    "stage": getattr(exc, "stage", None),
                    "exit_status": exit_status(exc),
                },
            )
        render_failure(exc, out, err, debug=debug)
        return exit_status(exc)
    wall = time.monotonic() - started
    if as_json:
        emit_json(
            out,
            as_json,
            {
                "ok": True,
                "entry": entry,
                "nprocs": nprocs,
                "start_method": start_method,
                "wall_seconds": wall,
                "reports": [r.to_dict() if r is not None else None for r in reports],
                "entry_seconds": {str(k): v for k, v in progress.entry_seconds().items()},
                "results": [repr(r) for r in results],
            },
        )
        if as_json == "-":
            return EXIT_OK
    render_stage_table(out, reports, progress.entry_seconds())
    for rank, value in enumerate(results):
        text = repr(value)
        out.line(f"rank {rank} returned: {text if len(text) <= 200 else text[:197] + '...'}")
    out.line(f"{nprocs} rank(s) finished in {wall:.2f} s ({start_method})")
    return EXIT_OK


def _name_the_timeout_option(exc: BaseException) -> None:
    """A launcher timeout names ready_timeout= / join_timeout=; a CLI user sets --timeout."""
    from spawnkit.errors import BootstrapTimeoutError

    if isinstance(exc, BootstrapTimeoutError) and exc.args and isinstance(exc.args[0], str):
        text = exc.args[0]
        text = text.replace("join_timeout= (or None for no limit)", "--timeout")
        for keyword in ("ready_timeout=", "join_timeout="):
            text = text.replace(f"larger {keyword}", "larger --timeout")
            text = text.replace(keyword, "--timeout ")
        exc.args = (text, *exc.args[1:])


def run_probe(namespace: Any, *, timeout: float) -> dict[str, Any]:
    """``spawnkit doctor``'s dry run: one clean spawned worker, full bootstrap, then a report."""
    from spawnkit.bootstrap import spawn_with_plugins
    from spawnkit.errors import SpawnkitError

    try:
        group = spawn_with_plugins(
            "spawnkit.cli._probe:probe",
            nprocs=1,
            namespace=namespace,
            ready_timeout=timeout,
            join_timeout=timeout,
        )
        with group:
            result = group.results(timeout=timeout)[0]
    except SpawnkitError as exc:
        text = str(exc)
        head = text.split("\nChild traceback", 1)[0]
        return {
            "result": None,
            "error": f"{type(exc).__name__}: {head}",
            "stage": getattr(exc, "stage", None),
            "exc_type": getattr(exc, "exc_type", type(exc).__name__),
            "traceback": getattr(exc, "traceback_text", "") or text,
        }
    return {"result": result, "error": None}
