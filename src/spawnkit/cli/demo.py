"""``spawnkit demo``: run the demo engine with two schedulers and show what the plugins did.

This is a user's first look: the bootstrap report (platform, plugins, hooks,
guard, stage timings), each scheduler's real torch work and throughput, and
per rank which hook actually ran, taken from what the workers sent back
rather than from what was merely installed.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any, TextIO

from spawnkit.cli._errors import EXIT_OK
from spawnkit.cli._output import Output, add_json_output_option
from spawnkit.cli.launch import positive_int, positive_seconds

__all__ = ["add_parser", "hook_summary", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="run the demo engine (two schedulers) with its plugins",
        description=(
            "Launch the demo engine's schedulers in namespace spawnkit.demo; each runs a small "
            "fixed-seed torch model on its platform's device. Shows the bootstrap report and "
            "what each plugin hook did in every rank."
        ),
    )
    p.add_argument("--nprocs", type=positive_int, default=2, metavar="N", help="schedulers (2)")
    p.add_argument(
        "--requests", type=positive_int, default=32, metavar="N", help="requests in all (32)"
    )
    p.add_argument("--start-method", choices=("spawn", "forkserver"), default="spawn")
    p.add_argument(
        "--timeout", type=positive_seconds, default=120.0, metavar="S", help="bound (120 s)"
    )
    p.add_argument(
        "--prefix-output", action="store_true", help="start each worker line with [rankN]:"
    )
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="write a start-up trace (Chrome trace-event JSON; spawnkit trace FILE --plot X.svg)",
    )
    add_json_output_option(p)
    p.set_defaults(handler=run)


def hook_summary(results: list[dict[str, Any]]) -> list[tuple[int, str, int, str]]:
    """(rank, hook, calls, detail) for every hook that recorded an event in a rank."""
    rows: list[tuple[int, str, int, str]] = []
    for result in sorted(results, key=lambda r: r["rank"]):
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for event in result.get("hook_events", []):
            grouped[event["hook"]].append(event)
        for hook, events in sorted(grouped.items()):
            seconds = [e["seconds"] for e in events if "seconds" in e]
            if seconds:
                detail = f"{sum(seconds) * 1e3:.3f} ms in all"
            else:
                keys = sorted({k for e in events for k in e if k not in ("hook", "rank")})
                detail = ", ".join(f"{k}={events[-1][k]}" for k in keys)
            rows.append((result["rank"], hook, len(events), detail))
    return rows


def run(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    from spawnkit._extras import require_torch

    # Before anything is printed: without torch this is the command's one line (exit 1).
    require_torch("spawnkit demo")
    from spawnkit.cli._group import _traced, report_failure, report_interrupt, trace_exit
    from spawnkit.cli._live import StageDisplay
    from spawnkit.cli._output import check_json_target, emit_json
    from spawnkit.cli.trace import check_trace_target
    from spawnkit.demo.engine import Engine
    from spawnkit.demo.server_args import ServerArgs
    from spawnkit.errors import SpawnkitError

    check_json_target(args.json)
    check_trace_target(args.trace, args.json)
    server_args = ServerArgs(dp_size=args.nprocs, num_requests=max(args.requests, args.nprocs))
    display = StageDisplay(out, server_args.dp_size, mode="quiet" if args.json == "-" else "auto")
    engine = Engine(
        server_args,
        start_method=args.start_method,
        timeout=args.timeout,
        progress=display,
        prefix_output=args.prefix_output,
        trace=args.trace,
    )
    if args.json != "-":
        out.heading(
            f"spawnkit demo: {server_args.dp_size} scheduler(s) in namespace 'spawnkit.demo'"
        )
        out.line("(worker output follows as it happens)")
    try:
        with display.showing():
            run_ = engine.run()
    except KeyboardInterrupt:
        return report_interrupt(display, "demo", err, out=out, as_json=args.json)
    except SpawnkitError as exc:
        # --json FILE gets its {"ok": false, ...} as launch's does: nothing was written, so
        # a FILE from an earlier run that passed stayed, saying "ok": true for this one.
        return report_failure(exc, out, err, as_json=args.json, debug=args.debug)
    if args.json:
        emit_json(out, args.json, {"ok": True, **run_.to_dict()})
    if args.json != "-":
        _render(run_, out)
        if args.trace:
            out.line(_traced(args.trace, run_.trace_error, braces=False).removeprefix("; "))
    return trace_exit(EXIT_OK, args.trace, run_.trace_error, "demo", err, args.json)


def _render(run_: Any, out: Output) -> None:
    """The demo's human report: rank 0's bootstrap, each scheduler, and what the hooks did."""
    from spawnkit.cli._group import render_stage_table

    if run_.reports:
        out.heading("bootstrap report (rank 0)")
        out.line(run_.reports[0].format())
        render_stage_table(out, run_.reports)
    out.heading("schedulers")
    out.table(
        ["rank", "pid", "platform", "device", "scheduler class", "requests", "batches", "tokens/s"],
        [
            (
                r["rank"],
                r["pid"],
                r["platform"],
                r["device"],
                r["scheduler_class"],
                len(r["checksums"]),
                r["batches"],
                f"{r['tokens_per_s']:.0f}",
            )
            for r in run_.results
        ],
    )
    for r in run_.results:
        if r.get("device_note"):
            out.line(f"rank {r['rank']}: {r['device_note']}")
    out.heading("what the hooks did")
    out.table(["rank", "hook", "calls", "detail"], hook_summary(run_.results))
    out.line(
        f"served {sum(len(r['checksums']) for r in run_.results)} requests in "
        f"{run_.wall_seconds:.2f} s wall (launch to last result)"
    )
