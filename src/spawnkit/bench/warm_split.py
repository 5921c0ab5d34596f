"""Where a warm worker's start-up goes, next to a raw ``os.fork`` holding the same modules.

A warm worker is forked by a server that already bootstrapped, so its cost
is fixed per worker: pickling its spec, connecting to the server, sending
the start data, the fork (until the child has its request, its own ``handed``
stamp: a spare forked while the server was idle only has to be handed the
request; the server writes the pid before or after that, ``_fork_loop._serve``), the
child's set-up until its first stage starts, its own stages, then its report (READY)
until the entry runs.  All on one clock (``CLOCK_MONOTONIC``: ``perf_counter``
in the parent, ``monotonic`` in the child): the parent's phases where the
parent does the work, the child's own stamps for the rest (its stages' starts
and times from the READY report, and the stamp its entry returns), as the raw
fork's children stamp where their entry would run.  Stamps taken where the
launcher received messages would count its reading: with n workers it reads
one worker's report pipe after another, and a later worker's messages wait.
The baseline is a raw fork of a fresh interpreter that imported
only the worker module (and so torch for the torch worker), whose child
writes its stamp to a pipe where its entry would run
(:class:`~spawnkit.bench._raw_fork.RawForker`).  The target (#23): a warm worker starts
(``LaunchContext.start`` -> entry running) within 2x that raw fork.
Beside it, the floor: the same raw fork, of an interpreter that also holds ``spawnkit.spec``,
whose children first unpickle the worker's ``ProcessSpec``: the least a server that forks on
request must do for a worker.  It is no bound for spares (``_fork_loop``), forked before the
request, whose start pays no fork: a spare that only unpickled its spec could start faster
than the raw fork (an unpickle in a fresh child: 0.2-0.3 ms on the 2-core machine).

Each start, raw or warm, begins 0.1 s after the one before, as an engine launches a group on
a server that sat idle: a server forks its spares, and they take the pages a worker writes
(``protocol/_prefault``), in that idle time.  Back to back, a start would instead compete
with the refill that the start before it set off, a burst the two cores cannot absorb.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import statistics
import time
from pathlib import Path
from typing import Any

from spawnkit.bench._checks import Check, print_checks
from spawnkit.bench._raw_fork import RawForker
from spawnkit.bench._site import worker_site
from spawnkit.bootstrap.stages import STAGE_ORDER, Stage

__all__ = ["checks", "main", "report", "run"]

PHASES = ("pickle", "connect", "send", "fork", "child_setup", "stages", "entry")
#: A warm worker's first stage and the last before its entry (its READY follows that one)
_FIRST = STAGE_ORDER[0].value
_LAST = STAGE_ORDER[STAGE_ORDER.index(Stage.ENTRY) - 1].value
_CHILD_MARKS = ("first_stage", "stages_done", "entry")
TARGET = 2.0
_WAIT_S = 60.0
_SETTLE_S = 0.1
_WORKERS = {"trivial": "", "torch": "import torch  # noqa: F401\n"}


def _site(root: Path) -> None:
    for worker, head in _WORKERS.items():
        body = "import time\n\ndef main():\n    return time.monotonic()\n"
        (root / f"warm_split_{worker}.py").write_text(f"{head}{body}", encoding="utf-8")


def _warm(lctx: Any, template: Any, n: int) -> tuple[float, list[dict[str, float]]]:
    """Seconds until all ``n`` warm workers' entries ran, and each one's phases."""
    from spawnkit.protocol import messages as proto
    from spawnkit.spec._control import LaunchControl

    ranks = []
    begun = time.perf_counter()
    for rank in range(n):
        pipes = [lctx.pipe() for _ in range(3)]
        (report_r, report_w), (death_r, death_w), (fault_r, fault_w) = pipes
        spec = template.replace(
            rank=rank,
            world_size=n,
            report_conn=report_w,
            death_conn=death_r,
            _control=LaunchControl(fault_conn=fault_w, parent_pid=os.getpid()),
        )
        proc = lctx.process(spec, f"warm-split-{rank}")
        lctx.start(proc)
        for conn in (report_w, death_r, fault_w):
            conn.close()
        ranks.append((proc, report_r, death_w, fault_r))
    phases, last = [], begun
    for proc, report_r, death_w, fault_r in ranks:
        seen: dict[str, float] = {}
        while "entry" not in seen and report_r.poll(_WAIT_S):
            msg = report_r.recv()
            if isinstance(msg, proto.Hello):  # when the server handed it the request
                seen.update((k, t) for k, t in msg.marks if k == "handed")
            elif isinstance(msg, proto.Ready):  # the child's own stamps (see the docstring)
                starts, took = msg.report.stage_starts, msg.report.stage_seconds
                seen["first_stage"] = starts[_FIRST]
                seen["stages_done"] = starts[_LAST] + took[_LAST]
            elif isinstance(msg, proto.Result):
                if msg.data is None:
                    raise RuntimeError(f"warm worker sent no entry stamp: {msg.error}")
                seen["entry"] = pickle.loads(msg.data)  # main() returns its monotonic stamp
            elif isinstance(msg, (proto.Failed, proto.Exited)):
                raise RuntimeError(f"warm worker failed: {msg}")
        if "entry" not in seen:
            proc.kill()
            raise TimeoutError(f"warm worker {proc.name} did not reach its entry in {_WAIT_S} s")
        last = max(last, seen["entry"])
        marks = [*proc._popen.marks, *(seen[k] for k in _CHILD_MARKS)]
        if "handed" in seen:  # the fork phase ends as the child has its request, not at the
            marks[len(proc._popen.marks) - 1] = seen["handed"]  # pid's read (it may come later)
        # The child runs as soon as the server hands it over, while a busy launcher may take
        # its own marks (sent, pid read) late: each parent phase ends by the next event seen.
        for i in reversed(range(len(proc._popen.marks))):
            marks[i] = min(marks[i], marks[i + 1])
        phases.append({p: marks[i + 1] - marks[i] for i, p in enumerate(PHASES)})
        proc.join(30)
        for conn in (report_r, death_w, fault_r):
            conn.close()
    return last - begun, phases


def _call(module: str, n: int) -> tuple[float, list[float]]:
    """``spawn_with_plugins`` itself, the call the target is about: seconds from the call until
    every entry ran, and the launcher's own work before each worker's start (rank 0: from the
    call; rank r: from rank r-1's pid read), which ``_warm`` leaves out."""
    from spawnkit.launch import spawn_with_plugins

    t0 = time.perf_counter()  # CLOCK_MONOTONIC, as the entries' stamps
    with spawn_with_plugins(
        f"{module}:main", nprocs=n, start_method="forkserver", preload=(module,)
    ) as group:
        marks = [r.proc._popen.marks for r in group._ranks]  # every rank started by now
        stamps = group.results(timeout=_WAIT_S)
    before = [t0, *(m[-1] for m in marks[:-1])]
    return max(stamps) - t0, [m[0] - b for m, b in zip(marks, before, strict=True)]


def _rows(worker: str, sizes: tuple[int, ...], repeats: int) -> list[dict[str, Any]]:
    """One worker's rows: at each size, the raw fork and the warm start with its phases."""
    from spawnkit.launch.specs import build_spec
    from spawnkit.protocol.popen import get_launch_context

    module = f"warm_split_{worker}"
    template = build_spec(f"{module}:main", None)
    lctx = get_launch_context("multiprocessing", "forkserver", (module,), template, 120)
    _warm(lctx, template, 1)  # the first fork of a server warms its pages: not timed
    rows = []
    with (
        contextlib.closing(RawForker(module, _WAIT_S)) as forker,
        contextlib.closing(RawForker(module, _WAIT_S, spec=pickle.dumps(template))) as floor,
    ):
        for n in sizes:  # side by side per size: the machine's noise hits all alike
            raw, handed, runs, calls = [], [], [], []
            for _ in range(repeats):  # in turn, each after the same pause (see the docstring)
                time.sleep(_SETTLE_S)
                raw.append(max(forker.fork(n)))
                time.sleep(_SETTLE_S)
                handed.append(max(floor.fork(n)))
                time.sleep(_SETTLE_S)
                runs.append(_warm(lctx, template, n))
                time.sleep(_SETTLE_S)
                calls.append(_call(module, n))
            split = {p: statistics.median(ph[p] for _, w in runs for ph in w) for p in PHASES}
            launcher = statistics.median(s for _, each in calls for s in each)
            raw_ms = statistics.median(raw) * 1e3
            floor_ms = statistics.median(handed) * 1e3
            warm_ms = statistics.median(t for t, _ in runs) * 1e3
            call_ms = statistics.median(t for t, _ in calls) * 1e3
            rows.append(
                {
                    "worker": worker,
                    "n": n,
                    "raw_fork_ms": raw_ms,
                    "spec_floor_ms": floor_ms,
                    "warm_ms": warm_ms,
                    "ratio": warm_ms / raw_ms,
                    "floor_ratio": floor_ms / raw_ms,
                    "call_ms": call_ms,
                    "launcher_ms": launcher * 1e3,
                    **{f"{p}_ms": v * 1e3 for p, v in split.items()},
                }
            )
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    """Both workers at each size: raw fork, warm worker, the warm worker's phases (ms)."""
    from spawnkit.protocol import warm

    sizes = (1, 2) if quick else (1, 2, 4, 8)
    repeats = 2 if quick else 5
    rows: list[dict[str, Any]] = []
    with worker_site("spawnkit-warm-split-", _site):
        try:
            for worker in _WORKERS:
                _call(f"warm_split_{worker}", 1)  # its server starts: not timed
                rows += _rows(worker, sizes, repeats)
        finally:
            warm.shutdown_forkservers()
    return {"sizes": list(sizes), "repeats": repeats, "rows": rows, "load": os.getloadavg()}


def report(results: dict[str, Any]) -> None:
    """The table: per worker and size, raw fork, warm, their ratio and the warm worker's split."""
    head = (
        f"{'worker':8s} {'n':>2s} {'raw fork':>9s} {'floor':>7s} {'x':>5s} {'warm':>8s} "
        f"{'x':>6s} {'call':>7s}  {'launcher':>9s} " + " ".join(f"{p:>11s}" for p in PHASES)
    )
    print(f"load average {results['load'][0]:.2f}; times in ms, medians of per-worker phases")
    print(
        "floor: the same raw fork whose children first unpickle the worker's ProcessSpec, the "
        "least a server forking on request must do (a spare, forked ahead, pays no fork); "
        "x: over the raw fork; warm: from the start of "
        "the worker's process (LaunchContext.start); call: from the spawn_with_plugins call, "
        "whose own work before each start is the launcher column (rank 0: the spec, the "
        "launch context, the group; every rank: its pipes)"
    )
    print(head)
    for r in results["rows"]:
        split = " ".join(f"{r[p + '_ms']:11.2f}" for p in PHASES)
        launch = (
            f" {r['call_ms']:7.2f}  {r['launcher_ms']:9.2f}" if "call_ms" in r else " " * 19
        )  # results files of older runs have no call column
        print(
            f"{r['worker']:8s} {r['n']:2d} {r['raw_fork_ms']:9.2f} {r['spec_floor_ms']:7.2f} "
            f"{r['floor_ratio']:5.2f} {r['warm_ms']:8.2f} {r['ratio']:6.2f}{launch} {split}"
        )


def checks(results: dict[str, Any]) -> list[Check]:
    return [
        Check(f"warm {r['worker']} n={r['n']} / raw os.fork", r["ratio"], TARGET)
        for r in results["rows"]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    results = run(args.quick)
    report(results)
    found = checks(results)
    print_checks(found)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0 if all(c.ok for c in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
