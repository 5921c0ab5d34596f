"""The run-id scan every group's teardown does: ``/proc`` read directly vs. psutil, one run.

``_cleanup._tagged`` finds this user's processes whose environment carries the group's run id
(orphans its workers left behind).  It reads every process of the user on every teardown, so
its cost grows with the machine, not with the group.  Linux only.

Run: ``python benchmarks/cleanup_scan.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import psutil

from spawnkit.launch import _cleanup


def _with_psutil(run_id: str) -> list[psutil.Process]:
    """The scan as it was: psutil parses each environment into a dict."""
    me, found = os.getuid(), []
    for proc in psutil.process_iter():
        try:
            if proc.uids().real == me and proc.environ().get(_cleanup.RUN_ID_VAR) == run_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    best = {"psutil": float("inf"), "procfs": float("inf")}
    for _ in range(args.repeat):  # alternated, best kept: the machine's noise cancels
        for name, scan in (("psutil", _with_psutil), ("procfs", _cleanup._tagged_procfs)):
            t0 = time.perf_counter()
            scan("no-such-run")
            best[name] = min(best[name], time.perf_counter() - t0)
    count = sum(1 for p in os.listdir("/proc") if p.isdigit())
    print(f"{count} processes; best of {args.repeat}:")
    for name, seconds in best.items():
        print(f"  {name:7s} {seconds * 1e3:7.2f} ms per scan")
    print(f"  procfs / psutil = {best['procfs'] / best['psutil']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
