"""``spawnkit bench``: run the shipped benchmarks and print their tables and targets with ✔/✘.

The benchmarks are part of the package (:mod:`spawnkit.bench`), so this
works from an installed wheel; ``benchmarks/*.py`` in a checkout are thin
entry points over the same modules.  Each benchmark prints its own
side-by-side table (what the script prints), then its targets.  Speed is
reported, not enforced: the exit status is 0 unless ``--check`` is given
and a target was missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Any, TextIO

from spawnkit.bench import BENCHMARKS
from spawnkit.cli._errors import EXIT_FAILURE, EXIT_OK, UsageError
from spawnkit.cli._output import Output

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench",
        parents=[common],
        help="run the spawn-latency, hook-overhead and bootstrap-stage benchmarks",
        description="Run spawnkit's benchmarks and print each one's table and targets.",
    )
    p.add_argument("--quick", action="store_true", help="few iterations (seconds, not minutes)")
    p.add_argument("--json", metavar="FILE", help="also write all figures to FILE as JSON")
    p.add_argument(
        "--only",
        metavar="NAME",
        action="append",
        choices=BENCHMARKS,
        help=f"run only this benchmark (repeatable; one of {', '.join(BENCHMARKS)})",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw spawn latency against the number of workers to FILE (.svg or .png; "
        "needs matplotlib: pip install 'spawnkit[plot]')",
    )
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument(
        "--settle",
        metavar="SECONDS",
        type=_seconds,
        default=None,
        help="before each benchmark, wait at most this long for the CPUs to go quiet "
        "(default 20; 0 with --quick; 0: do not wait)",
    )
    p.set_defaults(handler=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _check_file_target(option: str, target: str) -> None:
    if not Path(target).resolve().parent.is_dir():
        raise UsageError(
            f"the folder of {option} file {target!r} does not exist",
            "create the folder first or pass another path",
        )


def _check_plot(target: str, names: tuple[str, ...]) -> None:
    """Everything --plot needs is checked before minutes of measuring, not after."""
    import importlib.util

    from spawnkit.bench.plot import FORMATS, INSTALL_HINT

    if Path(target).suffix.lower() not in FORMATS:
        raise UsageError(
            f"--plot {target!r} must end in {' or '.join(FORMATS)}",
            "name the file e.g. spawn.svg",
        )
    _check_file_target("--plot", target)
    if "spawn_latency" not in names:
        raise UsageError(
            "--plot draws the spawn_latency benchmark, which --only leaves out",
            "add --only spawn_latency, or drop --plot",
        )
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib, which is not installed", INSTALL_HINT)


def _write_json(target: str, data: Any) -> None:
    try:
        Path(target).write_text(
            json.dumps(data, indent=2, sort_keys=True, default=str), encoding="utf-8"
        )
    except OSError as exc:
        raise UsageError(
            f"cannot write --json file {target!r}: {exc.strerror}",
            "pass a path in a writable folder",
        ) from exc


#: The longest wait for a quiet machine before each benchmark (see spawnkit.bench._settle).
SETTLE_S = 20.0

#: The benchmarks whose workers (or whose guard figure) import torch.
_NEEDS_TORCH = ("spawn_latency", "bootstrap_stages", "warm_split")


def _settle_first(seconds: float, out: Output) -> dict[str, Any] | None:
    """Wait, at most ``seconds``, for a quiet machine and say how it went; None: no wait."""
    if seconds <= 0:
        return None
    from spawnkit.bench._settle import settle

    settled = settle(seconds)
    out.line(settled.describe())
    return settled._asdict()


def _run_one(
    name: str,
    quick: bool,
    settle_s: float,
    out: Output,
    everything: dict[str, Any],
    missed: list[str],
    marks: tuple[str, str],
) -> None:
    from spawnkit.bench import load

    module = load(name)
    out.heading(f"{name}{' (quick)' if quick else ''}")
    settled = _settle_first(settle_s, out)
    start = time.perf_counter()
    results = module.run(quick)
    elapsed = time.perf_counter() - start
    # The module prints its table with print(), as the script does; it goes to our stream.
    with contextlib.redirect_stdout(out.stream):
        module.report(results)
    found = module.checks(results)
    missed += [f"{name}: {c.label}" for c in found if not c.ok]
    yes, no = marks
    out.table(
        ["target", "value", "limit", ""],
        [(c.label, f"{c.value:.3f}", c.target_text, yes if c.ok else no) for c in found],
        title=f"{name} targets ({elapsed:.1f} s)",
    )
    everything[name] = dict(
        results,
        checks=[dict(c._asdict(), ok=c.ok) for c in found],
        seconds=elapsed,
        settled=settled,
    )


def _write_interrupted(target: str, everything: dict[str, Any], names: tuple[str, ...]) -> None:
    """Ctrl-C still writes ``--json FILE``: left as it was, an earlier run's figures in it read
    as this run's.  The document says it was interrupted and keeps the benchmarks that
    finished (their figures are whole); a second Ctrl-C while it is written is ignored."""
    import signal

    from spawnkit.bench import load_average
    from spawnkit.cli._group import interrupted_document

    finished = [name for name in names if name in everything]
    left = [name for name in names if name not in everything]
    everything["load_average"]["end"] = load_average()
    document = interrupted_document(
        f"spawnkit bench: interrupted in {left[0] if left else 'the summary'}",
        finished=finished,
        not_run=left,
        **everything,
    )
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with contextlib.suppress(UsageError):  # an unwritable file: the interrupt still wins
            _write_json(target, document)
    finally:
        if previous is not None:  # None: a handler not installed from Python
            signal.signal(signal.SIGINT, previous)


def run(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    from spawnkit._extras import require_torch
    from spawnkit.bench import load_average
    from spawnkit.bench._checks import marks_for

    names = tuple(dict.fromkeys(args.only)) if args.only else BENCHMARKS
    if args.json:
        _check_file_target("--json", args.json)
    if args.plot:
        _check_plot(args.plot, names)
    with_torch = [name for name in names if name in _NEEDS_TORCH]
    if with_torch:  # one line now, not a crash in the middle of the tables
        require_torch(f"spawnkit bench ({', '.join(with_torch)})")
    yes, no = marks_for(out.stream)
    everything: dict[str, Any] = {"load_average": {"start": load_average()}}
    out.line(f"load average at start: {everything['load_average']['start']}")
    missed: list[str] = []
    total = 0
    settle_s = args.settle if args.settle is not None else (0.0 if args.quick else SETTLE_S)
    try:
        for name in names:
            _run_one(name, args.quick, settle_s, out, everything, missed, (yes, no))
            total += len(everything[name]["checks"])
    except KeyboardInterrupt:
        if args.json:
            _write_interrupted(args.json, everything, names)
        raise  # _app.main says "spawnkit bench: interrupted" and exits 130
    everything["load_average"]["end"] = load_average()
    out.line(f"load average at end: {everything['load_average']['end']} (1, 5, 15 min)")
    if args.plot and "spawn_latency" in everything:
        from spawnkit.bench.plot import plot_spawn_latency

        plot_spawn_latency(everything["spawn_latency"], args.plot)
        out.line(f"spawn latency plot written to {args.plot}")
    if args.json:
        _write_json(args.json, everything)
        out.line(f"figures written to {args.json}")
    if missed:
        out.line(f"{no} {len(missed)} of {total} targets missed: {'; '.join(missed)}")
    else:
        out.line(f"{yes} all {total} targets met")
    return EXIT_FAILURE if (missed and args.check) else EXIT_OK
