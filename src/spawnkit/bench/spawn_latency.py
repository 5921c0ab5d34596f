"""Time from the start call to the entry function running: raw multiprocessing vs. spawnkit.

Side by side in one run, for groups of 1, 2, 4 and 8 workers, each with a
trivial worker and with one whose module imports torch:

* ``raw-spawn``        ``multiprocessing`` spawn ``Process`` objects
* ``raw-forkserver``   the stdlib forkserver (torch preloaded for the torch worker)
* ``raw-fork``         plain fork: the floor
* ``spawnkit-cold``    ``spawn_with_plugins(start_method="spawn")`` with 10 plugins
                       registering 100 hooks installed (real distributions)
* ``spawnkit-warm``    ``spawn_with_plugins(start_method="forkserver", preload=...)``

Latency is ``CLOCK_MONOTONIC`` at the entry's first line minus the same clock
right before the start call (system-wide on Linux, so comparable across
processes).  Per group we report the mean over workers and the slowest
worker (the time until the whole group runs), as medians over repeats.

Targets (issue 5): spawnkit-cold <= 1.10x raw-spawn; warm torch worker >= 50x
faster than cold torch spawn and <= 2x raw-forkserver.

Run: ``python benchmarks/spawn_latency.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import multiprocessing.forkserver
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spawnkit.bench._checks import Check, print_checks

N_PLUGINS = 10
HOOKS_PER_PLUGIN = 10
NS_NAME = "bench_spawn_ns"

_WORKER = """
import time
{imports}

def entry(conn=None):
    t = time.monotonic()
    if conn is not None:
        conn.send(t)
        conn.close()
    return t
"""

_TARGETS = "\n".join(f"def f{i}(x):\n    return x\n" for i in range(N_PLUGINS * HOOKS_PER_PLUGIN))

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def around(original, *args, **kwargs):
    return original(*args, **kwargs)

def register():
    hooks = get_namespace({ns!r}).hooks
    for i in range({first}, {last}):
        hooks.register(f"bench_spawn_targets.f{{i}}", around, HookType.AROUND)
"""


def _write_site(root: Path) -> None:
    from spawnkit.testing import write_distribution

    (root / "bench_spawn_trivial.py").write_text(_WORKER.format(imports=""))
    (root / "bench_spawn_torch.py").write_text(_WORKER.format(imports="import torch  # noqa"))
    (root / "bench_spawn_targets.py").write_text(_TARGETS)
    for p in range(N_PLUGINS):
        write_distribution(
            root,
            f"bench-spawn-plugin-{p}",
            "1.0",
            entry_points={f"{NS_NAME}.plugins": {f"plug{p}": f"bench_spawn_plugin_{p}:register"}},
            modules={
                f"bench_spawn_plugin_{p}": _PLUGIN.format(
                    ns=NS_NAME, first=p * HOOKS_PER_PLUGIN, last=(p + 1) * HOOKS_PER_PLUGIN
                )
            },
        )


def _raw(method: str, module: str, n: int) -> list[float]:
    import importlib

    ctx = mp.get_context(method)
    entry = importlib.import_module(module).entry
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
    t0 = time.monotonic()
    procs = [ctx.Process(target=entry, args=(w,)) for _r, w in pipes]  # type: ignore[attr-defined]
    for proc in procs:
        proc.start()
    stamps = [r.recv() - t0 for r, _w in pipes]
    for proc in procs:
        proc.join(60)
    for r, w in pipes:
        r.close()
        w.close()
    return stamps


def _spawnkit(method: str, module: str, n: int, preload: tuple[str, ...]) -> list[float]:
    from spawnkit.bootstrap import spawn_with_plugins

    t0 = time.monotonic()
    with spawn_with_plugins(
        f"{module}:entry", nprocs=n, namespace=NS_NAME, start_method=method, preload=preload
    ) as group:
        stamps = group.results(timeout=120)
    return [t - t0 for t in stamps]


def _measure(fn: Any, repeats: int) -> dict[str, float]:
    means, slowest = [], []
    for _ in range(repeats):
        stamps = fn()
        means.append(statistics.fmean(stamps))
        slowest.append(max(stamps))
    return {"mean_ms": statistics.median(means) * 1e3, "group_ms": statistics.median(slowest) * 1e3}


def run(quick: bool = False) -> dict[str, Any]:
    """Measure every variant; returns the table as a dict (also used by the CLI)."""
    from spawnkit.bootstrap import _forkserver
    from spawnkit.namespace import Namespace

    sizes = (1, 2) if quick else (1, 2, 4, 8)
    repeats = 1 if quick else 3
    tmp = tempfile.TemporaryDirectory(prefix="spawnkit-bench-")
    root = Path(tmp.name)
    _write_site(root)
    sys.path.insert(0, str(root))
    Namespace(NS_NAME, env_prefix="BENCH_SPAWN_NS")
    results: dict[str, Any] = {"sizes": list(sizes), "repeats": repeats, "rows": []}
    try:
        for worker in ("trivial", "torch"):
            module = f"bench_spawn_{worker}"
            preload = ("torch",) if worker == "torch" else ()
            # The stdlib forkserver is a per-process singleton: restart it per preload list.
            mp.forkserver._forkserver._stop()  # type: ignore[attr-defined]
            mp.set_forkserver_preload(list(preload))
            variants: dict[str, Any] = {
                "raw-spawn": lambda n, m=module: _raw("spawn", m, n),
                "raw-forkserver": lambda n, m=module: _raw("forkserver", m, n),
                "raw-fork": lambda n, m=module: _raw("fork", m, n),
                "spawnkit-cold": lambda n, m=module: _spawnkit("spawn", m, n, ()),
                "spawnkit-warm": lambda n, m=module, p=preload: _spawnkit("forkserver", m, n, p),
            }
            for name, fn in variants.items():
                if name in ("raw-forkserver", "spawnkit-warm"):
                    fn(1)  # start the server outside the timed region, as a warm start does
                for n in sizes:
                    row: dict[str, Any] = {"worker": worker, "variant": name, "n": n}
                    row.update(_measure(lambda fn=fn, n=n: fn(n), repeats))
                    results["rows"].append(row)
                    print(
                        f"  {worker:8s} {name:15s} n={n}  mean {row['mean_ms']:8.1f} ms  "
                        f"group {row['group_ms']:8.1f} ms",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        _forkserver.shutdown_forkservers()
        mp.forkserver._forkserver._stop()  # type: ignore[attr-defined]
        sys.path.remove(str(root))
        tmp.cleanup()
    results["ratios"] = _ratios(results["rows"], sizes)
    return results


def _ratios(rows: list[dict[str, Any]], sizes: tuple[int, ...]) -> dict[str, Any]:
    def get(worker: str, variant: str, n: int) -> float:
        for row in rows:
            if (row["worker"], row["variant"], row["n"]) == (worker, variant, n):
                return float(row["mean_ms"])
        raise KeyError((worker, variant, n))

    out: dict[str, Any] = {}
    for n in sizes:
        out[f"n={n}"] = {
            "cold_vs_raw_spawn_trivial": get("trivial", "spawnkit-cold", n)
            / get("trivial", "raw-spawn", n),
            "cold_vs_raw_spawn_torch": get("torch", "spawnkit-cold", n)
            / get("torch", "raw-spawn", n),
            "warm_speedup_vs_cold_torch": get("torch", "spawnkit-cold", n)
            / get("torch", "spawnkit-warm", n),
            "warm_vs_raw_forkserver_torch": get("torch", "spawnkit-warm", n)
            / get("torch", "raw-forkserver", n),
        }
    return out


def _print(results: dict[str, Any]) -> None:
    sizes = results["sizes"]
    print(
        f"\nspawn latency, call -> entry running (median of {results['repeats']}; mean per worker)"
    )
    header = f"{'worker':8s} {'variant':15s}" + "".join(f"{'n=' + str(n):>10s}" for n in sizes)
    print(header)
    print("-" * len(header))
    for worker in ("trivial", "torch"):
        for variant in (
            "raw-fork",
            "raw-forkserver",
            "raw-spawn",
            "spawnkit-warm",
            "spawnkit-cold",
        ):
            cells = [
                r["mean_ms"]
                for n in sizes
                for r in results["rows"]
                if (r["worker"], r["variant"], r["n"]) == (worker, variant, n)
            ]
            print(f"{worker:8s} {variant:15s}" + "".join(f"{c:8.1f}ms" for c in cells))
    print(
        "\nratios (targets: cold/raw-spawn <= 1.10; warm speedup >= 50; warm/raw-forkserver <= 2)"
    )
    for key, vals in results["ratios"].items():
        print(f"  {key:5s} " + "  ".join(f"{k} {v:6.2f}" for k, v in vals.items()))


def report(results: dict[str, Any]) -> None:
    """The side-by-side table and the ratios, as ``benchmarks/spawn_latency.py`` prints them."""
    _print(results)


def checks(results: dict[str, Any]) -> list[Check]:
    """The issue-5 targets for every group size measured."""
    out: list[Check] = []
    for key, vals in results["ratios"].items():
        out += [
            Check(f"{key} cold / raw spawn, trivial", vals["cold_vs_raw_spawn_trivial"], 1.10),
            Check(f"{key} cold / raw spawn, torch", vals["cold_vs_raw_spawn_torch"], 1.10),
            Check(
                f"{key} warm speedup over cold, torch",
                vals["warm_speedup_vs_cold_torch"],
                50.0,
                at_least=True,
            ),
            Check(f"{key} warm / raw forkserver, torch", vals["warm_vs_raw_forkserver_torch"], 2.0),
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="groups of 1 and 2, one repeat")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    _print(results)
    print()
    print_checks(checks(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
