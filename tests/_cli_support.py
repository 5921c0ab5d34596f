"""What the command-line test modules share: ``spawnkit``'s ``main`` run in this process."""

from __future__ import annotations

import io

from spawnkit.cli import main


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``spawnkit ARGV...`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()
