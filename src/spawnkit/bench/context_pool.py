"""A process pool on a bootstrapping context against the same pool on a plain forkserver context.

``ProcessPoolExecutor(mp_context=spawnkit.get_context("forkserver", namespace=ns))`` forks its
workers from spawnkit's warm server, which loaded the plugins and applied the
hooks once; every worker still unpickles its spec and hands over its target
after a (skipped) bootstrap.  The baseline is the same executor on
``multiprocessing.get_context("forkserver")`` preloading the same modules.
Each round creates an executor, submits one task per worker (so every worker
is started) and waits for all of them; the first round of each (server start)
is left out.  Target: the context's pool starts within 1.25x of the plain one.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from spawnkit.bench._checks import Check, present
from spawnkit.bench._site import main_hidden

__all__ = ["checks", "main", "report", "run"]

_WORKERS = 4
_NAMESPACE = ("spawnkit.bench.context", "SPAWNKIT_BENCH_CONTEXT")


def _round(ctx: Any, workers: int) -> float:
    began = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        futures = [ex.submit(os.getpid) for _ in range(workers)]
        for f in futures:
            f.result(timeout=120)
        elapsed = time.perf_counter() - began
    return elapsed


def run(quick: bool = False) -> dict[str, Any]:
    """Seconds per pool start, both contexts alternating so drift hits both alike."""
    from spawnkit.launch.context import get_context
    from spawnkit.namespace import Namespace

    preload = ["torch"] if not quick and importlib.util.find_spec("torch") else []
    rounds = 3 if quick else 10
    plain = multiprocessing.get_context("forkserver")
    plain.set_forkserver_preload(["concurrent.futures.process", *preload])
    ours = get_context("forkserver", namespace=Namespace(*_NAMESPACE), preload=tuple(preload))
    plain_s: list[float] = []
    ours_s: list[float] = []
    with main_hidden():  # no worker re-runs the launching script (see bench._site)
        _round(plain, _WORKERS)  # each server's own start is not the pool's
        _round(ours, _WORKERS)
        for _ in range(rounds):
            plain_s.append(_round(plain, _WORKERS))
            ours_s.append(_round(ours, _WORKERS))
    return {
        "workers": _WORKERS,
        "preload": preload,
        "rounds": rounds,
        "plain_forkserver_s": plain_s,
        "spawnkit_forkserver_s": ours_s,
        "skipped": [] if preload or not quick else ["--quick: no torch preload"],
    }


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(r: dict[str, Any]) -> None:
    plain, ours = _median(r["plain_forkserver_s"]), _median(r["spawnkit_forkserver_s"])
    print(
        f"ProcessPoolExecutor({r['workers']}) start, median of {r['rounds']} rounds, "
        f"preload={r['preload']}"
    )
    print(f"{'context':<44}  {'seconds':>8}  {'ratio':>6}")
    print(f"{'multiprocessing.get_context(forkserver)':<44}  {plain:>8.3f}  {1.0:>6.2f}")
    print(f"{'spawnkit.get_context(forkserver, ns)':<44}  {ours:>8.3f}  {ours / plain:>6.2f}")


def checks(r: dict[str, Any]) -> list[Check]:
    ratio = _median(r["spawnkit_forkserver_s"]) / _median(r["plain_forkserver_s"])
    return [Check("context pool start / plain forkserver", ratio, 1.25)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    present(run(args.quick), report, checks, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
