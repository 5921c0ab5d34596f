"""``spawnkit bench``: run the project's benchmarks side by side and print their ratios.

The benchmarks live in the source tree (``benchmarks/*.py``, each with
``run(quick) -> dict``), not in the installed package, so this finds them
from ``--dir``, the working directory, or the checkout an editable install
points at.  Each module is imported under its plain name with its folder on
``sys.path``, because the spawn benchmarks start children that must import
the same module by the same name.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from spawnkit.cli._errors import EXIT_OK, UsageError
from spawnkit.cli._output import Output

__all__ = ["BENCHMARKS", "add_parser", "find_benchmarks_dir", "run"]

BENCHMARKS = ("spawn_latency", "hook_overhead")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench",
        parents=[common],
        help="run the spawn-latency and hook-overhead benchmarks",
        description="Run spawnkit's benchmarks in one process and print the side-by-side ratios.",
    )
    p.add_argument("--quick", action="store_true", help="few iterations (seconds, not minutes)")
    p.add_argument("--json", metavar="FILE", help="also write all figures to FILE as JSON")
    p.add_argument("--dir", metavar="DIR", help="the benchmarks folder (default: found)")
    p.add_argument(
        "--only",
        metavar="NAME",
        action="append",
        help="run only benchmarks/NAME.py (repeatable; any module with run(quick))",
    )
    p.set_defaults(handler=run)


def find_benchmarks_dir(explicit: str | None = None, names: tuple[str, ...] = BENCHMARKS) -> Path:
    """The folder holding the ``names`` benchmarks: explicit, cwd, or the source checkout."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    else:
        import spawnkit

        candidates.append(Path.cwd() / "benchmarks")
        candidates.append(Path(spawnkit.__file__).resolve().parents[2] / "benchmarks")
    for folder in candidates:
        if all((folder / f"{name}.py").is_file() for name in names):
            return folder.resolve()
    where = ", ".join(str(c) for c in candidates)
    wanted = ", ".join(f"{n}.py" for n in names)
    raise UsageError(
        f"benchmarks not found (looked for {wanted} in {where})",
        "run from a spawnkit source checkout or pass --dir path/to/benchmarks",
    )


def _flatten(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(data, list | tuple) and all(not isinstance(v, dict | list) for v in data):
        yield prefix, ", ".join(str(v) for v in data)
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            yield from _flatten(value, f"{prefix}[{i}]")
    else:
        yield prefix, data


def _is_ratio(key: str) -> bool:
    leaf = key.rsplit(".", 1)[-1].lower()
    return "ratio" in leaf or "speedup" in leaf or leaf.endswith("_x") or "vs" in leaf.split("_")


def run(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    names = tuple(args.only) if args.only else BENCHMARKS
    for name in names:
        if not name.isidentifier():
            raise UsageError(f"--only {name!r} is not a module name", "pass e.g. spawn_latency")
    folder = find_benchmarks_dir(args.dir, names)
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise UsageError(
            f"the folder of --json file {args.json!r} does not exist",
            "create the folder first or pass another path",
        )
    results: dict[str, Any] = {}
    added = str(folder) not in sys.path
    if added:
        sys.path.insert(0, str(folder))
    try:
        for name in names:
            module = importlib.import_module(name)
            runner = getattr(module, "run", None)
            if not callable(runner):
                raise UsageError(
                    f"benchmark {folder / (name + '.py')} has no run(quick) function",
                    "give the benchmark module a run(quick: bool) -> dict",
                )
            start = time.perf_counter()
            figures = runner(args.quick)
            elapsed = time.perf_counter() - start
            if not isinstance(figures, dict):
                raise UsageError(
                    f"benchmark {name}.run() returned {type(figures).__name__}, not a dict",
                    "return the figures as a dict",
                )
            results[name] = figures
            rows = list(_flatten(figures))
            out.heading(f"{name} ({elapsed:.1f} s{', quick' if args.quick else ''})")
            out.table(["figure", "value"], rows)
    finally:
        if added and str(folder) in sys.path:
            sys.path.remove(str(folder))
    ratios = [(f"{n}.{k}", v) for n, figs in results.items() for k, v in _flatten(figs)]
    ratios = [(k, v) for k, v in ratios if _is_ratio(k)]
    if ratios:
        out.heading("ratios")
        out.table(["ratio", "value"], ratios)
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True, default=str))
        except OSError as exc:
            raise UsageError(
                f"cannot write --json file {args.json!r}: {exc.strerror}",
                "pass a path in a writable folder",
            ) from exc
        out.line(f"figures written to {args.json}")
    return EXIT_OK
