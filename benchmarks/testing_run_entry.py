"""What a test pays for ``spawnkit.testing.run_entry`` over starting a worker by hand.

Measured side by side in one run: a bare ``multiprocessing`` spawn of a
function that returns through a pipe (the floor any process test pays),
``spawn_with_plugins`` with ``nprocs=1`` (the launcher, full bootstrap), and
``run_entry`` (launcher plus the test conveniences: by-reference detection,
environment overlay, error translation).  Prints the medians and the ratios.

    python benchmarks/testing_run_entry.py [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


def work(payload: Any = None) -> int:
    return 42


def _bare_child(conn: Connection) -> None:
    conn.send(work())
    conn.close()


def bare_spawn() -> None:
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_bare_child, args=(send,))
    proc.start()
    send.close()
    try:
        if not recv.poll(60) or recv.recv() != 42:
            raise RuntimeError("bare child did not answer")
    finally:
        proc.join(60)


def launcher() -> None:
    from spawnkit import spawn_with_plugins

    with spawn_with_plugins(work, nprocs=1, ready_timeout=60, join_timeout=60) as group:
        group.wait_ready(60)
        if group.results(60) != [42]:
            raise RuntimeError("launcher result mismatch")


def via_run_entry() -> None:
    from spawnkit.testing import run_entry

    if run_entry(work, timeout=60).result != 42:
        raise RuntimeError("run_entry result mismatch")


def _median(fn: Callable[[], None], repeat: int) -> float:
    fn()  # warm caches (imports, resource tracker)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(quick: bool = False) -> dict[str, float]:
    repeat = 3 if quick else 10
    results = {
        "bare_spawn_s": _median(bare_spawn, repeat),
        "spawn_with_plugins_s": _median(launcher, repeat),
        "run_entry_s": _median(via_run_entry, repeat),
    }
    results["run_entry_vs_launcher"] = results["run_entry_s"] / results["spawn_with_plugins_s"]
    results["run_entry_vs_bare_spawn"] = results["run_entry_s"] / results["bare_spawn_s"]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 10")
    args = parser.parse_args(argv)
    r = run(args.quick)
    print(f"bare multiprocessing spawn : {r['bare_spawn_s'] * 1e3:8.1f} ms")
    print(f"spawn_with_plugins (1 rank): {r['spawn_with_plugins_s'] * 1e3:8.1f} ms")
    print(f"run_entry                  : {r['run_entry_s'] * 1e3:8.1f} ms")
    print(f"run_entry / launcher       : {r['run_entry_vs_launcher']:8.2f}x (target <= 1.10x)")
    print(f"run_entry / bare spawn     : {r['run_entry_vs_bare_spawn']:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
