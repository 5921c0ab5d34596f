"""A benchmark target and its verdict, printed the same way by the scripts and ``spawnkit bench``.

Benchmarks measure; they never fail a test.  A target that is missed is
shown with ✘ next to the figure and the limit, so a regression is visible in
the table without reading the numbers against the README.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from spawnkit._namedtuple import NamedTuple

__all__ = ["Check", "bytecode_note", "load_average", "marks_for", "present", "print_checks"]


class Check(NamedTuple):
    """``value`` against ``target``: at most the target, or at least it when ``at_least``."""

    label: str
    value: float
    target: float
    at_least: bool = False

    @property
    def ok(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target

    @property
    def target_text(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.target:g}"


def load_average() -> str:
    """The 1/5/15-minute load, printed with every run: ratios taken on a busy machine say so."""
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # no load average on this platform
        return "unknown"


def bytecode_note() -> str | None:
    """A note when any of spawnkit's modules lacks current bytecode; ``None`` when none does.

    Every module is looked at, not one: a checkout where bytecode was written for some modules
    and not for others (a test run here, ``PYTHONDONTWRITEBYTECODE`` there) compiles the rest in
    every cold worker, and a cache older than its source is compiled again just the same.
    """
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    sources = [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    missing = 0
    for source in sources:
        try:
            cached = Path(importlib.util.cache_from_source(str(source)))
            with cached.open("rb") as f:
                header = f.read(16)
            missing += not _current(header, source.stat())
        except (NotImplementedError, ValueError, OSError):
            missing += 1
    if not missing:
        return None
    why = "PYTHONDONTWRITEBYTECODE is set" if sys.dont_write_bytecode else "none was written"
    return (
        f"spawnkit at {root} has no cached bytecode ({why}) for {missing} of its "
        f"{len(sources)} modules: every cold worker compiles them, so cold figures are "
        "pessimistic; run from an installed wheel or run `python -m compileall` on that "
        "folder first"
    )


def _current(header: bytes, stat: os.stat_result) -> bool:
    """Whether a ``.pyc`` header still matches its source, as the import system decides (PEP 552):
    a hash-based one is taken as current; a timestamp one records the source's mtime and size."""
    if len(header) < 16:
        return False
    if int.from_bytes(header[4:8], "little") & 1:
        return True
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


def marks_for(stream: TextIO) -> tuple[str, str]:
    """✔/✘ where the stream can encode them; OK/MISS on an ASCII-only stream."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "✔✘".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return "OK", "MISS"
    return "✔", "✘"


def print_checks(checks: Sequence[Check], stream: TextIO | None = None) -> None:
    """The targets as an aligned table, then one summary line."""
    out = stream if stream is not None else sys.stdout
    yes, no = marks_for(out)
    width = max((len(c.label) for c in checks), default=6)
    out.write(f"{'target':<{width}}  {'value':>9}  {'limit':>8}\n")
    out.write(f"{'-' * width}  {'-' * 9}  {'-' * 8}  --\n")
    for c in checks:
        mark = yes if c.ok else no
        out.write(f"{c.label:<{width}}  {c.value:>9.3f}  {c.target_text:>8}  {mark}\n")
    missed = [c for c in checks if not c.ok]
    out.write(
        "all targets met\n"
        if not missed
        else f"{len(missed)} of {len(checks)} targets missed: "
        + ", ".join(c.label for c in missed)
        + "\n"
    )
    out.flush()


def present(
    results: dict[str, Any],
    report: Callable[[dict[str, Any]], None],
    checks: Callable[[dict[str, Any]], list[Check]],
    json_path: str | None = None,
) -> list[Check]:
    """A benchmark script's ending: its table, its targets with verdicts, optionally JSON."""
    report(results)
    print(f"\nload average: {load_average()} (1, 5, 15 min)")
    found = checks(results)
    print_checks(found)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return found
