"""Terminal output: rich tables on a TTY when rich imports, stable plain text otherwise."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["Output", "check_json_target", "emit_json"]


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


class Output:
    """Where a subcommand writes: one stream, tables and sections in the stream's style."""

    def __init__(self, stream: TextIO | None = None, *, rich: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if rich is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
            rich = tty and not os.environ.get("NO_COLOR") and _rich_available()
        self.rich = rich
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False)
        return self._console

    def line(self, text: str = "") -> None:
        if self.rich:
            self.console.print(text, markup=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def heading(self, text: str) -> None:
        if self.rich:
            self.console.rule(text, style="bold")
        else:
            self.line(f"== {text} ==")

    def table(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = ""
    ) -> None:
        """A table; plain mode aligns columns with two spaces so it greps and diffs well."""
        cells = [[_cell(v) for v in row] for row in rows]
        if self.rich:
            from rich.table import Table

            table = Table(title=title or None, title_justify="left")
            for col in columns:
                table.add_column(col)
            for row in cells:
                table.add_row(*row)
            self.console.print(table)
            return
        if title:
            self.line(title)
        widths = [len(c) for c in columns]
        for row in cells:
            for i, value in enumerate(row):
                widths[i] = max(widths[i], max((len(p) for p in value.split("\n")), default=0))
        self.line("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
        self.line("  ".join("-" * w for w in widths))
        for row in cells:
            parts = [v.split("\n") for v in row]
            height = max(len(p) for p in parts)
            for k in range(height):
                self.line(
                    "  ".join(
                        (p[k] if k < len(p) else "").ljust(w)
                        for p, w in zip(parts, widths, strict=True)
                    ).rstrip()
                )

    def json(self, data: Any) -> None:
        self.stream.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        self.stream.flush()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def add_json_output_option(parser: argparse.ArgumentParser) -> None:
    """``--json [FILE]`` for commands whose workers also print: ``-`` or no value is stdout."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the outcome as JSON to FILE (or stdout, after the workers' own output)",
    )


def check_json_target(target: str | None) -> None:
    """Fail before any work when ``--json FILE`` could not be written afterwards."""
    from pathlib import Path

    from spawnkit.cli._errors import UsageError

    if target and target != "-" and not Path(target).resolve().parent.is_dir():
        raise UsageError(
            f"the folder of --json file {target!r} does not exist",
            "create the folder first or pass another path",
        )


def emit_json(out: Output, target: str, data: Any) -> None:
    """``-`` writes to the output stream; anything else is a file path."""
    if target == "-":
        out.json(data)
        return
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
