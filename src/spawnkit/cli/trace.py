"""``spawnkit trace FILE [--plot out.svg]``: a start-up trace per rank, and its Gantt chart.

The file is what ``spawn_with_plugins(trace=)`` and ``spawnkit launch/demo
--trace`` write.  The summary reads it back as tracks (the launcher, then
one per rank) of complete events; times are shown in ms after the launch
began, so ranks compare at a glance.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, TextIO

from spawnkit.cli._errors import EXIT_FAILURE, EXIT_OK, UsageError
from spawnkit.cli._output import Output
from spawnkit.cli._trace_plot import Track

__all__ = ["Track", "add_parser", "check_trace_target", "load_tracks", "run"]

#: File suffixes ``--plot`` writes (matplotlib picks the format from it).
PLOT_FORMATS = (".svg", ".png")
PLOT_HINT = 'pip install "spawnkit[plot]"'
#: A picture's suffixes: a trace named so would be taken for one (``--plot``'s output).
_PICTURES = (".png", ".svg", ".pdf")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "trace",
        parents=[common],
        help="summarise a start-up trace (launch/demo --trace FILE), or draw it",
        description=(
            "Read a start-up trace written by spawn_with_plugins(trace=FILE) or "
            "spawnkit launch/demo --trace FILE: print each rank's stages, its slowest plugin "
            "loads and target imports; --plot draws ranks against stages as a Gantt chart."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the trace file (Chrome trace-event JSON)")
    p.add_argument(
        "--plot", metavar="OUT", help=f"draw the timeline to OUT.svg or OUT.png ({PLOT_HINT})"
    )
    p.set_defaults(handler=run)


def check_trace_target(trace: str | None, json_target: str | None) -> None:
    """``launch``/``demo --trace FILE``, refused before anything runs where the file would not
    end up holding the trace."""
    if trace is None:
        return
    suffix = Path(trace).suffix.lower()
    if suffix in _PICTURES:
        # the file is JSON whatever its name; `spawnkit trace F --plot F` would draw over it
        as_json = Path(trace).with_suffix(".json")
        picture = trace if suffix in PLOT_FORMATS else Path(trace).with_suffix(".svg")
        raise UsageError(
            f"--trace {trace!r}: a start-up trace is Chrome trace-event JSON, not a picture",
            f"pass --trace {as_json}, and draw it with spawnkit trace {as_json} --plot {picture}",
        )
    if json_target not in (None, "-") and _same_file(trace, json_target):
        # the group writes the trace as it closes, the command its JSON outcome after that
        raise UsageError(
            f"--trace {trace!r} and --json {json_target!r} name the same file: the JSON "
            "outcome, written last, would replace the trace",
            "pass two files, e.g. --trace start.json --json outcome.json",
        )
    from spawnkit.errors import ConfigError
    from spawnkit.launch._trace import check_trace_path

    try:
        check_trace_path(trace)  # the library's own check, holding nothing (see open_trace)
    except ConfigError as exc:
        raise _as_option(exc, trace) from None


def _as_option(exc: Exception, trace: str) -> UsageError:
    """The library's refusal of ``trace=`` said of the option the CLI user passed."""
    text = str(exc).replace(f"trace={trace!r}", f"--trace {trace!r}", 1)
    problem, _, fix = text.partition(". ")  # "trace=X: what is wrong (why). How to fix it."
    return UsageError(problem, fix[:1].lower() + fix[1:])


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (through links too), existing or not."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either one not there (yet): the resolved paths said it all
        return False


def load_tracks(path: str) -> list[Track]:
    """The trace at ``path`` as tracks in display order; a file that is not one is a usage error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        events = data["traceEvents"]
        tracks: dict[int, Track] = {}
        for ev in events:
            if ev["ph"] == "M" and ev["name"] in ("process_name", "process_sort_index"):
                t = tracks.setdefault(ev["pid"], Track(ev["pid"], "", 0))
                if ev["name"] == "process_name":
                    t.name = ev["args"]["name"]
                else:
                    t.order = ev["args"]["sort_index"]
        launch = min(ev["ts"] for ev in events if ev["ph"] == "X")
        for ev in events:
            if ev["ph"] == "X":
                t0 = (ev["ts"] - launch) / 1e3
                span = (ev.get("cat", ""), ev["name"], t0, t0 + ev["dur"] / 1e3)
                tracks[ev["pid"]].spans.append(span)
                if (ev.get("args") or {}).get("seen_by") == "launcher":
                    tracks[ev["pid"]].seen_by_launcher = True
            elif ev["ph"] == "i":
                tracks[ev["pid"]].marks.append((_mark_label(ev), (ev["ts"] - launch) / 1e3))
    except OSError as exc:
        raise UsageError(f"cannot read trace file {path!r}: {exc.strerror}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{path!r} is not a spawnkit start-up trace ({type(exc).__name__}: {exc})",
            "pass the file written by spawn_with_plugins(trace=FILE) or launch/demo --trace FILE",
        ) from exc
    return sorted(tracks.values(), key=lambda t: t.order)


def _mark_label(ev: dict[str, Any]) -> str:
    """An instant's name, with the exit code (and signal) of a rank that did not exit 0."""
    code = (ev.get("args") or {}).get("code")
    if not isinstance(code, int) or code == 0:
        return str(ev["name"])
    import signal

    try:
        killed = f" ({signal.Signals(-code).name})" if code < 0 else ""
    except ValueError:  # no signal of this platform's
        killed = ""
    return f"{ev['name']} with code {code}{killed}"


def run(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    if args.plot:
        _check_plot(args.plot, args.file)
    tracks = load_tracks(args.file)
    ranks = sum(t.name.startswith("rank ") for t in tracks)  # not the launcher nor a server
    out.heading(f"start-up trace {args.file}: {ranks} rank(s), ms after the launch")
    for track in tracks:
        out.line(_summary(track))
    if args.plot:
        from spawnkit.cli._trace_plot import plot_tracks

        try:
            plot_tracks(tracks, args.plot, title=Path(args.file).name)
        except OSError as exc:  # a full disk, a file it may not replace: not spawnkit's bug
            err.write(f"spawnkit trace: the timeline was NOT written to {args.plot}: {exc}\n")
            return EXIT_FAILURE
        out.line(f"timeline written to {args.plot}")
    return EXIT_OK


def _summary(track: Track) -> str:
    """``name: stage a-b ms (d ms), ...``, then its three slowest plugin loads and imports."""
    parts = [f"{name} {(t1 - t0):.1f} ms (at {t0:.1f})" for _, name, t0, t1 in track.stages()]
    lines = [f"{track.name}: " + ", ".join(parts)]
    # no report came: not the worker's own clock reads (a warm server's stages are always
    # the launcher's reading of its messages, and say nothing of a failure)
    if track.seen_by_launcher and track.name.startswith("rank "):
        lines.append(
            "    (stage times as the launcher received the rank's stage messages: it failed "
            "before its report, which carries the worker's own)"
        )
    lines += _start_split(track)
    for label, at in track.marks:
        lines.append(f"    {label} at {at:.1f} ms")
    slow = sorted(
        (s for s in track.spans if s[0] in ("plugin", "import")), key=lambda s: s[2] - s[3]
    )
    for _, name, t0, t1 in slow[:3]:
        lines.append(f"    slowest: {name} {(t1 - t0):.1f} ms")
    return "\n".join(lines)


_EPS = 1e-6  # ms: the file's microseconds, rounded to the nanosecond


def _start_split(track: Track) -> list[str]:
    """Where each process start went: the parts inside each ``start rank N`` (launcher) or
    inside ``process start`` (a rank), as ``launch.START_PART`` spans."""
    wholes = [s for s in track.spans if s[1] == "process start" or s[1].startswith("start rank")]
    lines = []
    for _, whole, w0, w1 in sorted(wholes, key=lambda s: s[2]):
        inside = sorted(
            (s for s in track.spans if s[0] == "start" and w0 - _EPS <= s[2] and s[3] <= w1 + _EPS),
            key=lambda s: s[2],
        )
        if inside:
            split = ", ".join(f"{name} {(t1 - t0):.1f}" for _, name, t0, t1 in inside)
            lines.append(f"    {whole} ({w1 - w0:.1f} ms): {split}")
    return lines


def _check_plot(target: str, trace: str) -> None:
    """Everything ``--plot`` needs, checked before the trace is read."""
    import importlib.util

    if Path(target).suffix.lower() not in PLOT_FORMATS:
        raise UsageError(
            f"--plot {target!r} must end in {' or '.join(PLOT_FORMATS)}",
            "name the file e.g. start.svg",
        )
    if _same_file(target, trace):
        raise UsageError(
            f"--plot {target!r} is the trace file {trace!r}: the picture would replace the trace",
            f"draw it to another file, e.g. --plot {Path(target).stem}-timeline.svg",
        )
    folder = Path(target).parent
    if str(folder) and not folder.is_dir():
        raise UsageError(f"the folder of --plot file {target!r} does not exist")
    if Path(target).is_dir():
        raise UsageError(
            f"--plot {target!r} is a folder", f"name a file in it, e.g. --plot {target}/start.svg"
        )
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            "--plot needs matplotlib (the 'plot' extra), which is not installed", PLOT_HINT
        )
