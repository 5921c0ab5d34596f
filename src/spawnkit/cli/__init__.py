"""The ``spawnkit`` command (``spawnkit.cli:main``); subcommands import what they need lazily."""

from __future__ import annotations

from collections.abc import Sequence

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["main"]


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one ``spawnkit`` command line and return its exit status (never raises)."""
    # The console script imports this package at its top, and spawn re-runs that top in every
    # worker a command starts (``spawnkit launch``, ``demo``, ``bench``): the argument parser
    # and its output helpers are imported only when a command line runs.
    from spawnkit.cli._app import main as run

    return run(argv, stdout=stdout, stderr=stderr)
