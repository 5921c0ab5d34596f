"""Running a worker group for the CLI: live stage progress, the timing table, failures, Ctrl-C.

Progress comes from ``spawn_with_plugins(progress=...)`` into a
:class:`~spawnkit.cli._live.StageDisplay`, fed as the launcher hears each
stage.  Ctrl-C: the launcher stops the group (bounded) and re-raises; the
command prints one line saying where each rank was, and exits 130.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from spawnkit.bootstrap.stages import Stage
from spawnkit.cli._errors import EXIT_FAILURE, EXIT_OK
from spawnkit.cli._live import StageDisplay
from spawnkit.cli._output import Output, emit_json

__all__ = [
    "EXIT_INTERRUPTED",
    "exit_status",
    "interrupted_document",
    "report_interrupt",
    "render_failure",
    "render_stage_table",
    "report_success",
    "run_group",
    "run_probe",
    "trace_exit",
    "trace_not_written",
]

EXIT_INTERRUPTED = 130
"""128 + SIGINT: what a shell reports for a command ended by Ctrl-C."""


def exit_status(exc: BaseException) -> int:
    """The process exit status that reports ``exc``: the rank's own code, 128+N for signal N."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and code != 0:
        return 128 - code if code < 0 else code
    return EXIT_FAILURE


def report_failure(
    exc: BaseException,
    out: Output,
    err: TextIO,
    *,
    as_json: str | None,
    debug: bool,
    **fields: Any,
) -> int:
    """One failed run, for every launcher: a JSON record if asked, the root cause on stderr."""
    if as_json:
        emit_json(
            out,
            as_json,
            {
                "ok": False,
                **fields,
                "error": type(exc).__name__,
                "message": str(exc),
                "rank": getattr(exc, "rank", None),
                "stage": getattr(exc, "stage", None),
                "exit_status": exit_status(exc),
            },
        )
    render_failure(exc, out, err, debug=debug)
    return exit_status(exc)


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
        columns.append(Stage.ENTRY.value)
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
    prefix_output: bool = False,
    entry_args: list[str] | None = None,
    trace: str | None = None,
) -> int:
    """``spawnkit launch``: start, show progress, print timings and results; the exit status."""
    from spawnkit.errors import SpawnkitError
    from spawnkit.launch import spawn_with_plugins

    display = StageDisplay(out, nprocs, mode="quiet" if as_json == "-" else "auto")
    started = time.monotonic()
    summary = {"entry": entry, "nprocs": nprocs, "start_method": start_method}
    group = None
    try:
        with display.showing():
            group = spawn_with_plugins(
                entry,
                payload,
                nprocs=nprocs,
                namespace=namespace,
                start_method=start_method,
                preload=tuple(preload),
                ready_timeout=timeout,
                join_timeout=timeout,
                progress=display,
                prefix_output=prefix_output,
                entry_args=entry_args,
                trace=trace,
            )
            with group:
                results = group.results()  # bounded by the group's join_timeout
                reports = group.wait_ready(timeout=1.0)
    except KeyboardInterrupt:
        return report_interrupt(display, "launch", err, group, out=out, as_json=as_json, **summary)
    except SpawnkitError as exc:
        _name_the_timeout_option(exc)
        return report_failure(exc, out, err, as_json=as_json, debug=debug)
    unwritten = trace_not_written(group) if trace else None
    code = report_success(
        out,
        as_json,
        {**summary, "wall_seconds": time.monotonic() - started},
        reports,
        results,
        f"{nprocs} rank(s) finished in {{wall:.2f}} s ({start_method}){_traced(trace, unwritten)}",
        entry_seconds=display.entry_seconds(),
    )
    return trace_exit(code, trace, unwritten, "launch", err, as_json)


def trace_not_written(group: Any) -> str | None:
    """Why ``group``'s ``--trace`` file was not written (None: it was, or none was asked for)."""
    from spawnkit.launch._trace import not_written

    return not_written(group)


def _traced(trace: str | None, unwritten: str | None = None, *, braces: bool = True) -> str:
    """The closing line's pointer to the trace file, or the word that it was not written
    (braces doubled unless ``braces=False``: the launch's closing line is format()ted)."""
    if not trace:
        return ""
    if unwritten is not None:
        text = f"; the start-up trace was NOT written to {trace} ({unwritten}; see the error above)"
    else:
        text = f"; start-up trace in {trace} (spawnkit trace {trace}, or ui.perfetto.dev)"
    return text.replace("{", "{{").replace("}", "}}") if braces else text


def trace_exit(
    code: int, trace: str | None, unwritten: str | None, command: str, err: TextIO, as_json: Any
) -> int:
    """A run that succeeded but whose ``--trace FILE`` was not written exits 1, as one whose
    ``--json FILE`` could not be written does: output asked for was not produced.  With
    ``--json -`` the closing line is not printed, so stderr says it."""
    if unwritten is None or code != EXIT_OK:
        return code
    if as_json == "-":
        err.write(f"spawnkit {command}: the start-up trace was NOT written to {trace}: ")
        err.write(f"{unwritten}\n")
    return EXIT_FAILURE


def report_success(
    out: Output,
    as_json: str | None,
    summary: dict[str, Any],
    reports: list[Any],
    results: list[Any],
    closing: str,
    *,
    entry_seconds: dict[int, float] | None = None,
) -> int:
    """A finished group: the JSON document, or the stage table, each rank's result, ``closing``."""
    if as_json:
        document = {"ok": True, **summary}
        document["reports"] = [r.to_dict() if r is not None else None for r in reports]
        if entry_seconds is not None:
            document["entry_seconds"] = {str(k): v for k, v in entry_seconds.items()}
        document["results"] = [repr(r) for r in results]
        emit_json(out, as_json, document)
        if as_json == "-":
            return EXIT_OK
    render_stage_table(out, reports, entry_seconds)
    for rank, value in enumerate(results):
        text = repr(value)
        out.line(f"rank {rank} returned: {text if len(text) <= 200 else text[:197] + '...'}")
    out.line(closing.format(wall=summary["wall_seconds"]))
    return EXIT_OK


def report_interrupt(
    display: StageDisplay,
    command: str,
    err: TextIO,
    group: Any = None,
    *,
    out: Output | None = None,
    as_json: str | None = None,
    **fields: Any,
) -> int:
    """After Ctrl-C (the launcher has stopped the group): one line on stderr, status 130.

    ``group`` is stopped here too, for a Ctrl-C between the launch returning and the ``with``
    taking it over; a further Ctrl-C while the line is written is ignored.  With ``--json``
    the document says so (``"interrupted": true`` and each rank's state): a reader of stdout
    got nothing before, and a ``--json FILE`` kept an earlier run's ``"ok": true``.
    """
    if group is not None:
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: SIGKILL, then on
            group.__exit__(KeyboardInterrupt, None, None)
    with _sigint_ignored():
        line = display.interrupted_line(command)
        if as_json and out is not None:
            emit_json(
                out, as_json, interrupted_document(line, ranks=display.rank_states(), **fields)
            )
        err.write(line + "\n")
        err.flush()
    return EXIT_INTERRUPTED


def interrupted_document(message: str, **fields: Any) -> dict[str, Any]:
    """The ``--json`` document of a run ended by Ctrl-C (``_app`` writes it for the launchers
    that let ``KeyboardInterrupt`` reach it: torchrun, ray, a Ctrl-C before the launch)."""
    return {
        "ok": False,
        "interrupted": True,
        **fields,
        "error": "KeyboardInterrupt",
        "message": message,
        "exit_status": EXIT_INTERRUPTED,
    }


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _name_the_timeout_option(exc: BaseException) -> None:
    """A launcher timeout names ready_timeout= / join_timeout=; a CLI user sets --timeout."""
    from spawnkit.errors import BootstrapTimeoutError, EntryTimeoutError

    if isinstance(exc, EntryTimeoutError) and exc.setting == "join_timeout":
        exc.setting = "--timeout"
    if (
        isinstance(exc, BootstrapTimeoutError | EntryTimeoutError)
        and exc.args
        and isinstance(exc.args[0], str)
    ):
        text = exc.args[0]
        text = text.replace("join_timeout= (or None for no limit)", "--timeout")
        for keyword in ("ready_timeout=", "join_timeout="):
            text = text.replace(f"larger {keyword}", "larger --timeout")
            text = text.replace(keyword, "--timeout ")
        exc.args = (text, *exc.args[1:])


def run_probe(
    namespace: Any,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    listed: Sequence[str] = (),
) -> dict[str, Any]:
    """``spawnkit doctor``'s dry run: one clean spawned worker, full bootstrap, then a report.

    ``listed``: what doctor's report already says; the dry run's launch, which warns of the
    same plugin selection (a blank allow-list, lenient mode, a misspelt group), does not say
    it again on stderr."""
    import re
    import warnings

    from spawnkit.errors import EnvVariableWarning, SpawnkitError
    from spawnkit.hooks.plugins import PluginSelectionWarning
    from spawnkit.launch import spawn_with_plugins

    try:
        with warnings.catch_warnings():
            # doctor lists these itself, once, in its report
            warnings.simplefilter("ignore", EnvVariableWarning)
            for message in listed:
                warnings.filterwarnings("ignore", re.escape(message), PluginSelectionWarning)
            group = spawn_with_plugins(
                "spawnkit.cli._probe:probe",
                nprocs=1,
                namespace=namespace,
                env=env,
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
