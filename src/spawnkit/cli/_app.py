"""Argument parsing and the error policy shared by every subcommand.

Bad input is one line on stderr with the fix and exit status 2 (argparse's
usage dump is replaced, since the line already says what to do); a failure
of the work itself is the error's own message and exit status 1 or the
group's status; a traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

from spawnkit.cli._errors import EXIT_FAILURE, EXIT_USAGE, UsageError
from spawnkit.cli._output import Output

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace, Output, TextIO], int]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    from spawnkit.cli import bench, demo, doctor, launch, trace

    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show full tracebacks for errors (also child ones)"
    )
    parser = _Parser(
        prog="spawnkit",
        description="Spawn-safe worker bootstrap: inspect, launch, benchmark, demo, trace.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (doctor, launch, bench, demo, trace):
        module.add_parser(sub, common)
    return parser


def _command_of(argv: Sequence[str]) -> str:
    for arg in argv:
        if arg in ("doctor", "launch", "bench", "demo", "trace"):
            return arg
    return ""


def _split_at_dashes(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``argv`` before the first ``--`` and what follows it (None: no ``--``)."""
    if "--" not in argv:
        return argv, None
    at = argv.index("--")
    return argv[:at], argv[at + 1 :]


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one ``spawnkit`` command line and return its exit status (never raises)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    out_stream = stdout if stdout is not None else sys.stdout
    err_stream = stderr if stderr is not None else sys.stderr
    debug = "--debug" in args_list
    command = _command_of(args_list)
    args: argparse.Namespace | None = None
    try:
        parser = build_parser()
        # launch's own arguments end at "--", whatever their order: argparse fills ENTRY and
        # the (empty) torchrun arguments at once, so "launch ENTRY ... -- --max-restarts 1",
        # README's form, was "unrecognized arguments" unless ENTRY came last.
        head, tail = _split_at_dashes(args_list) if command == "launch" else (args_list, None)
        try:
            args = parser.parse_args(head)
        except SystemExit as exc:  # --help / --version
            return int(exc.code) if isinstance(exc.code, int) else 0
        if tail is not None:
            args.torchrun_args = [*args.torchrun_args, *tail]
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(out_stream)
            return EXIT_USAGE
        return handler(args, Output(out_stream), err_stream)
    except UsageError as exc:
        if debug:
            traceback.print_exc(file=err_stream)
        err_stream.write(exc.line(command) + "\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        line = f"spawnkit {command}: interrupted".replace("  ", " ")
        _interrupted_json(args, command, line, Output(out_stream))
        err_stream.write(line + "\n")
        return 130
    except Exception as exc:
        from spawnkit.errors import SpawnkitError

        if debug:
            traceback.print_exc(file=err_stream)
        prefix = f"spawnkit {command}: " if command else "spawnkit: "
        if isinstance(exc, SpawnkitError):
            err_stream.write(f"{prefix}{type(exc).__name__}: {exc}\n")
        elif isinstance(exc, Warning):  # the user's own ``-W error::...``: a refusal, no bug
            err_stream.write(
                f"{prefix}{type(exc).__name__}: {exc} (raised as an error by this process's "
                "warnings filter, -W or PYTHONWARNINGS: the launch refused as it asked)\n"
            )
        else:
            err_stream.write(
                f"{prefix}internal error: {type(exc).__name__}: {exc} "
                "(rerun with --debug for the traceback, and report it)\n"
            )
        return EXIT_FAILURE


def _interrupted_json(
    args: argparse.Namespace | None, command: str, line: str, out: Output
) -> None:
    """A Ctrl-C that reached here (torchrun's or ray's run, or before the launch) still writes
    the ``--json`` document launch and demo promise, saying it was interrupted."""
    target = getattr(args, "json", None) if command in ("launch", "demo") else None
    if not isinstance(target, str):
        return
    import contextlib
    import signal

    from spawnkit.cli._group import interrupted_document
    from spawnkit.cli._output import emit_json

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: write it whole
    try:
        with contextlib.suppress(OSError):
            emit_json(
                out, target, interrupted_document(line, launcher=getattr(args, "launcher", None))
            )
    finally:
        if previous is not None:  # None: a handler not installed from Python
            signal.signal(signal.SIGINT, previous)
