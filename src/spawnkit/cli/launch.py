"""``spawnkit launch ENTRY``: start a worker group and watch every rank through its stages.

All input is checked before the first worker starts (entry, payload file,
namespace, preload modules), so a mistake is one line and exit status 2.
Once the group runs, the exit status is the group's: 0 when every rank
returned, otherwise the failing rank's exit code (or 1), with the root cause
and the child's traceback (``--debug`` shows the full one).

``--launcher torchrun`` and ``--launcher ray`` run the same entry and payload
under those launchers instead (see ``_torchrun`` and ``_ray``); the spec is
built by the same code as ``spawn_with_plugins``'s.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

from spawnkit.cli._errors import UsageError
from spawnkit.cli._output import Output, add_json_output_option

__all__ = ["LAUNCHERS", "START_METHODS", "add_parser", "positive_int", "positive_seconds", "run"]

START_METHODS = ("spawn", "forkserver")
LAUNCHERS = ("local", "torchrun", "ray")


_N = TypeVar("_N", int, float)


def _at_least(kind: Callable[[str], _N], low: _N, words: str) -> Callable[[str], _N]:
    """An argparse ``type=``: ``kind(text)`` no less than ``low`` (more than it for 0.0)."""

    def parse(text: str) -> _N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {words}") from None
        if kind is float and not value > low:  # NaN included
            raise argparse.ArgumentTypeError(f"{text} must be more than {low:g} seconds")
        if kind is float and not math.isfinite(value):
            # inf reached the launcher as ready_timeout=inf, refused there with "pass None",
            # an argument the command-line user does not have
            raise argparse.ArgumentTypeError(
                f"{text} is not a finite number of seconds: pass the bound itself (86400: a day)"
            )
        if not value >= low:
            raise argparse.ArgumentTypeError(f"{value} must be at least {low}")
        return value

    return parse


positive_int = _at_least(int, 1, "whole number")
_nonnegative_int = _at_least(int, 0, "whole number")
positive_seconds = _at_least(float, 0.0, "number of seconds")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "launch",
        parents=[common],
        help="start a worker group running ENTRY with plugins bootstrapped",
        description=(
            "Start NPROCS workers that each bootstrap (platform, plugins, hooks, payload) and "
            "then call ENTRY; show each rank's progress and a table of stage timings."
        ),
    )
    p.add_argument("entry", metavar="ENTRY", help="the worker function, as module:function")
    # None when not given: told apart from --nproc-per-node, which gives the same count
    p.add_argument("--nprocs", type=positive_int, default=None, metavar="N", help="ranks (1)")
    p.add_argument(
        "--payload-file",
        metavar="F",
        help="argument for ENTRY: a .json file, or pickle bytes passed on unopened",
    )
    _add_call_options(p)
    p.add_argument("--start-method", choices=START_METHODS, default="spawn")
    p.add_argument(
        "--preload",
        metavar="MOD",
        nargs="+",
        action="extend",
        default=[],
        help="modules the forkserver imports once (forkserver only)",
    )
    p.add_argument("--namespace", metavar="NS", help="the engine namespace (default spawnkit)")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=600.0,
        metavar="S",
        help="bound on the whole run, bootstrap and entry (600 s)",
    )
    p.add_argument(
        "--app-dir",
        default=".",
        metavar="DIR",
        help="folder put first on sys.path (in the workers too) to find ENTRY (default: .)",
    )
    _add_launcher_options(p)
    _add_torchrun_options(p)
    add_json_output_option(p)
    p.set_defaults(handler=run)


def _add_launcher_options(p: argparse.ArgumentParser) -> None:
    """Which launcher starts the ranks, and the options only one of them takes."""
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="local: spawned here (default); torchrun: `-m spawnkit.run` ranks from a signed "
        "spec; ray: Ray actors on --address or a local cluster",
    )
    p.add_argument(
        "--print-only",
        action="store_true",
        help="torchrun: write the spec and key, print the command, start nothing",
    )
    p.add_argument(
        "--address", metavar="ADDR", help="ray: the cluster to join (default: start a local one)"
    )
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="local: write a start-up trace (Chrome trace-event JSON; ui.perfetto.dev opens it)",
    )


def _add_call_options(p: argparse.ArgumentParser) -> None:
    """How ENTRY is called and what the ranks print: payload factory, arguments, prefix."""
    p.add_argument(
        "--payload-factory",
        metavar="MOD:FN",
        help="argument for ENTRY: FN() called here, its object sent to every rank (for a "
        "ServerArgs dataclass)",
    )
    p.add_argument(
        "--entry-args",
        metavar="NAME",
        nargs="+",
        choices=("rank", "local_rank", "world_size", "payload"),
        help="call ENTRY with these arguments, e.g. local_rank rank payload (default: payload)",
    )
    p.add_argument(
        "--prefix-output",
        action="store_true",
        help="start each line a rank writes with [rankN]: (local and ray)",
    )


def _add_torchrun_options(p: argparse.ArgumentParser) -> None:
    """torchrun's multi-node options, passed through; anything after ``--`` goes to torchrun."""
    t = p.add_argument_group("torchrun across nodes (--launcher torchrun)")
    t.add_argument("--nnodes", type=positive_int, metavar="N", help="nodes in the job")
    t.add_argument("--node-rank", type=_nonnegative_int, metavar="R", help="this node's rank")
    t.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="the rendezvous (node 0's store)")
    t.add_argument("--rdzv-id", metavar="ID", help="the job id every node passes")
    t.add_argument(
        "--nproc-per-node", type=positive_int, metavar="K", help="ranks per node (--nprocs)"
    )
    t.add_argument(
        "--spec-dir",
        metavar="DIR",
        help="the signed spec and key: reused when DIR holds them (written by --print-only "
        "--spec-dir DIR on one node), else written there and kept",
    )
    p.add_argument("torchrun_args", nargs="*", metavar="-- TORCHRUN_ARG", help=argparse.SUPPRESS)


#: (option, the launchers it belongs to, what it is, the fix) for options of some launchers.
_ONE_LAUNCHER = (
    (
        "print_only",
        ("torchrun",),
        "--print-only prints a torchrun command",
        "add --launcher torchrun, or drop --print-only",
    ),
    (
        "prefix_output",
        ("local", "ray"),
        "--prefix-output is for --launcher local and ray; "
        "torchrun prefixes its ranks' lines itself",
        "drop --prefix-output (torchrun's own --tee/--log-dir options choose its output)",
    ),
    (
        "entry_args",
        ("local",),
        "--entry-args is for --launcher local",
        "drop --entry-args and take the ranks from spawnkit.bootstrap.current_spec()",
    ),
    ("address", ("ray",), "--address names a Ray cluster", "add --launcher ray, or drop --address"),
    (
        "trace",
        ("local",),
        "--trace draws ranks this process starts, which only --launcher local does",
        "drop --trace, or use --launcher local",
    ),
)
_TORCHRUN_ONLY = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "nproc_per_node", "spec_dir")


def _validate(args: argparse.Namespace) -> tuple[Any, Any]:
    from spawnkit.cli._output import check_json_target
    from spawnkit.cli._resolve import (
        check_entry,
        check_preload,
        load_payload_file,
        resolve_namespace,
    )
    from spawnkit.cli.trace import check_trace_target

    if args.preload and args.start_method != "forkserver":
        raise UsageError(
            f"--preload needs --start-method forkserver (got {args.start_method})",
            "add --start-method forkserver, or drop --preload",
        )
    check_json_target(args.json)
    _check_launcher_options(args)
    check_trace_target(args.trace, args.json)
    app_dir = os.path.abspath(args.app_dir)
    if not os.path.isdir(app_dir):
        raise UsageError(f"--app-dir {args.app_dir!r} is not a folder", "pass an existing folder")
    if app_dir not in sys.path:
        # As `python -m` does for the working directory; spawned workers inherit sys.path.
        sys.path.insert(0, app_dir)
    namespace = resolve_namespace(args.namespace)
    check_entry(args.entry)
    check_preload(list(args.preload))
    if args.payload_file and args.payload_factory:
        raise UsageError(
            "--payload-file and --payload-factory both give ENTRY's argument",
            "pass one of them",
        )
    if args.payload_factory:
        from spawnkit.cli._resolve import build_payload

        return namespace, build_payload(args.payload_factory)
    payload = load_payload_file(args.payload_file) if args.payload_file else None
    return namespace, payload


def _check_launcher_options(args: argparse.Namespace) -> None:
    """Options that only one launcher understands are refused with the others."""
    launcher = args.launcher
    for dest, launchers, what, fix in _ONE_LAUNCHER:
        # given at all, not truthy: `--trace ''` or `--address ''` is given, and would be dropped
        if getattr(args, dest) not in (None, False) and launcher not in launchers:
            raise UsageError(f"{what} (got --launcher {launcher})", fix)
    given = [name for name in _TORCHRUN_ONLY if getattr(args, name) is not None]
    if (given or args.torchrun_args) and launcher != "torchrun":
        shown = ", ".join("--" + n.replace("_", "-") for n in given) or "arguments after --"
        raise UsageError(
            f"{shown} are torchrun's (got --launcher {launcher})",
            "add --launcher torchrun, or drop them",
        )
    if args.nprocs is not None and args.nproc_per_node not in (None, args.nprocs):
        raise UsageError(
            f"--nprocs {args.nprocs} and --nproc-per-node {args.nproc_per_node} both give the "
            "ranks on this node, and differ",
            "pass one of them (--nproc-per-node K: K ranks on each of --nnodes nodes)",
        )
    if launcher != "local" and (args.start_method != "spawn" or args.preload):
        raise UsageError(
            f"--start-method/--preload choose how local workers start; {launcher} starts its own",
            "drop --start-method and --preload, or use --launcher local",
        )
    # What is installed is checked last: a wrong option combination is wrong everywhere.
    if launcher == "torchrun":
        from spawnkit.cli._torchrun import check_torchrun

        check_torchrun()
    elif launcher == "ray":
        from spawnkit.cli._ray import check_ray

        check_ray()


def run(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    namespace, payload = _validate(args)
    # What every launcher takes; each call below adds only the options of its own.
    common: dict[str, Any] = {
        "entry": args.entry,
        "payload": payload,
        "nprocs": args.nprocs or 1,
        "namespace": namespace,
        "timeout": args.timeout,
        "as_json": args.json,
        "out": out,
        "err": err,
    }
    app_dir = os.path.abspath(args.app_dir)
    if args.launcher == "torchrun":
        from spawnkit.cli._torchrun import Nodes, run_torchrun

        nodes = Nodes.from_args(args)
        if args.nproc_per_node is not None:
            common["nprocs"] = args.nproc_per_node
        return run_torchrun(**common, app_dir=app_dir, print_only=args.print_only, nodes=nodes)
    if args.launcher == "ray":
        from spawnkit.cli._ray import run_ray

        return run_ray(
            **common,
            app_dir=app_dir,
            address=args.address,
            debug=args.debug,
            prefix_output=args.prefix_output,
        )
    from spawnkit.cli._group import run_group

    return run_group(
        **common,
        start_method=args.start_method,
        preload=list(args.preload),
        debug=args.debug,
        prefix_output=args.prefix_output,
        entry_args=args.entry_args,
        trace=args.trace,
    )
