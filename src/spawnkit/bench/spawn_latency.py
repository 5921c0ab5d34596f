"""Time from the start call to the entry function running: raw multiprocessing vs. spawnkit.

Side by side in one run, for groups of 1, 2, 4 and 8 workers, each with a
trivial worker and with one whose module imports torch:

* ``raw-spawn``        ``multiprocessing`` spawn ``Process`` objects
* ``hand-written``     raw spawn whose child imports 10 plain plugin modules that apply the
                       same 100 patches with ``setattr``: what a project without spawnkit
                       would write (trivial worker only)
* ``import-floor``     the hand-written worker that also imports every module a cold
                       spawnkit worker adds (the census below) and runs none of it: the least
                       a cold worker costs while spawnkit's worker path is the code it is
                       today (trivial worker only)
* ``raw-forkserver``   the stdlib forkserver, preloading the worker module (and torch)
* ``raw-fork``         plain ``os.fork`` of a fresh interpreter holding only the worker
                       module: the floor (:mod:`spawnkit.bench._raw_fork`)
* ``spawnkit-cold``    ``spawn_with_plugins(start_method="spawn")`` with 10 plugins
                       registering 100 hooks installed (real distributions)
* ``spawnkit-warm``    ``spawn_with_plugins(start_method="forkserver", preload=...)``, the
                       same preload: the server bootstraps once, workers inherit platform,
                       plugins and hooks; the server forks spares while idle, so a repeated
                       group of the same size is mostly served by workers forked before
                       their launch
* the peers a user would pick instead (:mod:`spawnkit.bench._peers`):
  ``torch-mp-spawn``, ``loky-first``/``loky-reused`` and ``ray-actor``; the
  optional ones are skipped with a printed note when their package is missing

The third worker, ``torchtarget``, is itself the module the 100 hooks patch
and imports torch; spawnkit's server preloads it after applying the hooks, the
stdlib forkserver preloads the same module (only these two are measured).

After the table: the per-stage split of a cold spawnkit worker (from its
report, ``apply_hooks`` split into importing targets and patching), an
import census: the modules a cold spawnkit worker has at its entry that a raw
spawn worker of the same entry does not (taken first: ``import-floor`` imports
them), and where a cold worker's time over the hand-written one goes: importing
those modules, and the rest (stages, reports, the parent-death guardian).

Latency is ``CLOCK_MONOTONIC`` at the entry's first line minus the same clock
right before the start call (system-wide on Linux, so comparable across
processes).  Per group we report the mean over workers and the slowest
worker (the time until the whole group runs), as medians over repeats.
Within a repeat every variant of a worker kind but the peers runs once, in turn, so
that a target ratio is the median of the ratios within each repeat
(``_interleaved``); the peers are measured on their own, after the others.

Targets, one row per group size in ``checks()``: see ``TARGETS``.

Run: ``python benchmarks/spawn_latency.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import multiprocessing as mp
import multiprocessing.forkserver
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spawnkit.bench import _peers
from spawnkit.bench._checks import Check, bytecode_note, present
from spawnkit.bench._peers import PEERS
from spawnkit.bench._raw_fork import RawForker
from spawnkit.bench._site import plain_baseline, worker_site
from spawnkit.bootstrap.stages import Stage

#: The folder spawnkit is imported from (a checkout's src/ or site-packages), for the servers.
SRC = Path(__file__).resolve().parents[2]

N_PLUGINS = 10
HOOKS_PER_PLUGIN = 10
NS_NAME = "bench_spawn_ns"
#: Bound on every raw baseline's group (a worker that never reports is killed, not waited on).
RAW_TIMEOUT_S = 120.0
#: Bound on a spawnkit group's results (a cold torch group of 8 on a loaded machine is slow).
SPAWNKIT_TIMEOUT_S = 300.0

_WORKER = """
import time
{imports}

def entry(conn=None):
    t = time.monotonic()
    if conn is not None:
        conn.send(t)
        conn.close()
    return t

def rank_entry(rank, queue):  # torch.multiprocessing.spawn's signature
    queue.put(time.monotonic())

def modules(conn=None):
    import sys
    names = sorted(sys.modules)
    if conn is not None:
        conn.send(names)
        conn.close()
    return names

def census(conn=None):
    import sys
    names = list(sys.modules)  # in import order; before the report import below adds to them
    from spawnkit.bootstrap import current_report
    report = current_report()
    stages = dict(report.stage_seconds) if report else {{}}
    detail = dict(report.stage_detail) if report else {{}}
    return names, stages, detail
"""

_TARGETS = "\n".join(f"def f{i}(x):\n    return x\n" for i in range(N_PLUGINS * HOOKS_PER_PLUGIN))

# The hand-written equivalent: plain modules, the same 100 wrappers, installed with setattr.
_HAND_PLUGIN = """
import functools
import bench_spawn_targets as targets

def _around(original):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return original(*args, **kwargs)
    return wrapper

for i in range({first}, {last}):
    setattr(targets, f"f{{i}}", _around(getattr(targets, f"f{{i}}")))
"""
_HAND_WORKER = "".join(
    f"import bench_hand_plugin_{p}  # noqa\n" for p in range(N_PLUGINS)
) + _WORKER.format(imports="")

# The hand-written worker plus the modules the census found in a cold spawnkit worker, in its
# order: what importing spawnkit's worker path costs, with none of it run.
_FLOOR_WORKER = """
import importlib
for _name in {modules!r}:
    importlib.import_module(_name)
"""
FLOOR_MODULE = "bench_spawn_floor"

# The hooked module is chosen by the worker's environment, so the same 10 plugins hook
# either the plain targets or the torch-importing worker module (``torchtarget``).
_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def around(original, *args, **kwargs):
    return original(*args, **kwargs)

def register():
    import os
    hooks = get_namespace({ns!r}).hooks
    module = os.environ.get("BENCH_SPAWN_TARGETS", "bench_spawn_targets")
    for i in range({first}, {last}):
        hooks.register(f"{{module}}.f{{i}}", around, HookType.AROUND)
"""

WORKERS = ("trivial", "torch", "torchtarget")
VARIANTS = (
    "raw-fork",
    "raw-forkserver",
    "raw-spawn",
    "hand-written",
    "import-floor",
    "spawnkit-warm",
    "spawnkit-cold",
    *PEERS,
)


def _write_site(root: Path) -> None:
    from spawnkit.testing import write_distribution

    (root / "bench_spawn_trivial.py").write_text(_WORKER.format(imports=""), encoding="utf-8")
    (root / "bench_spawn_torch.py").write_text(
        _WORKER.format(imports="import torch  # noqa"), encoding="utf-8"
    )
    (root / "bench_spawn_targets.py").write_text(_TARGETS, encoding="utf-8")
    (root / "bench_spawn_hand.py").write_text(_HAND_WORKER, encoding="utf-8")
    torchtarget = _WORKER.format(imports="import torch  # noqa") + "\n" + _TARGETS
    (root / "bench_spawn_torchtarget.py").write_text(torchtarget, encoding="utf-8")
    for p in range(N_PLUGINS):
        first, last = p * HOOKS_PER_PLUGIN, (p + 1) * HOOKS_PER_PLUGIN
        (root / f"bench_hand_plugin_{p}.py").write_text(
            _HAND_PLUGIN.format(first=first, last=last), encoding="utf-8"
        )
        write_distribution(
            root,
            f"bench-spawn-plugin-{p}",
            "1.0",
            entry_points={f"{NS_NAME}.plugins": {f"plug{p}": f"bench_spawn_plugin_{p}:register"}},
            modules={f"bench_spawn_plugin_{p}": _PLUGIN.format(ns=NS_NAME, first=first, last=last)},
        )


def _raw_call(method: str, module: str, func: str, n: int) -> tuple[float, list[Any]]:
    """Start ``n`` raw workers running ``module.func(conn)``; the start time and what each sent.

    A dead worker reads as EOF (the parent closed its write ends); a hung one is killed.
    """
    ctx = mp.get_context(method)
    target = getattr(importlib.import_module(module), func)
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
    procs = [ctx.Process(target=target, args=(w,)) for _r, w in pipes]  # type: ignore[attr-defined]
    deadline = time.monotonic() + RAW_TIMEOUT_S
    try:
        with plain_baseline():  # started so on purpose: spawnkit says nothing about it
            t0 = time.monotonic()
            for proc in procs:
                proc.start()
        for _r, w in pipes:
            w.close()  # each child holds its own copy now; a dead child reads as EOF
        what = f"{method} {module}:{func}"
        values = [_recv(r, p, deadline, what) for (r, _w), p in zip(pipes, procs, strict=True)]
    finally:
        for proc in procs:
            if proc.pid is None:  # a start above failed; nothing to wait for
                continue
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for r, w in pipes:
            r.close()
            w.close()
    return t0, values


def _recv(conn: Any, proc: Any, deadline: float, what: str) -> Any:
    if not conn.poll(max(0.0, deadline - time.monotonic())):
        raise TimeoutError(
            f"raw {what}: worker pid {proc.pid} sent nothing within {RAW_TIMEOUT_S:g} s "
            f"(exit code {proc.exitcode}); it is killed"
        )
    try:
        return conn.recv()
    except EOFError:
        proc.join(5)
        raise RuntimeError(
            f"raw {what}: worker pid {proc.pid} exited with code {proc.exitcode} before "
            "reporting; run the worker module by hand to see its error"
        ) from None


def _raw(method: str, module: str, n: int) -> list[float]:
    t0, stamps = _raw_call(method, module, "entry", n)
    return [t - t0 for t in stamps]


def _raw_fork(
    stack: contextlib.ExitStack, made: dict[str, RawForker], module: str, n: int
) -> list[float]:
    """``n`` raw forks; the forking interpreter is made on the first (untimed) call per module."""
    if module not in made:
        made[module] = stack.enter_context(contextlib.closing(RawForker(module, RAW_TIMEOUT_S)))
    return made[module].fork(n)


def _spawnkit(
    method: str, module: str, n: int, preload: tuple[str, ...], env: dict[str, str] | None = None
) -> list[float]:
    from spawnkit.launch import spawn_with_plugins

    t0 = time.monotonic()
    with spawn_with_plugins(
        f"{module}:entry",
        nprocs=n,
        namespace=NS_NAME,
        start_method=method,
        preload=preload,
        env=env,
    ) as group:
        stamps = group.results(timeout=SPAWNKIT_TIMEOUT_S)
    return [t - t0 for t in stamps]


def _census(repeats: int) -> dict[str, Any]:
    """A cold trivial worker's stage split (median) and the modules it has beyond raw spawn."""
    from spawnkit.launch import spawn_with_plugins

    _t0, (raw_modules,) = _raw_call("spawn", "bench_spawn_trivial", "modules", 1)
    stages: list[dict[str, float]] = []
    details: list[dict[str, dict[str, float]]] = []
    modules: list[str] = []
    for _ in range(repeats):
        with spawn_with_plugins("bench_spawn_trivial:census", namespace=NS_NAME) as group:
            ((modules, stage, detail),) = group.results(timeout=SPAWNKIT_TIMEOUT_S)
        stages.append(stage)
        details.append(detail)
    split = {k: statistics.median(s[k] for s in stages) * 1e3 for k in stages[0]}
    hooks = {
        k: statistics.median(d[Stage.HOOKS.value][k] for d in details) * 1e3
        for k in details[0].get(Stage.HOOKS.value, {})
    }
    raw = set(raw_modules)
    extra = [m for m in modules if m not in raw]  # in the cold worker's import order
    floor = [m for m in extra if "bench" not in m]
    return {
        "stages_ms": split,
        "apply_hooks_ms": hooks,
        "extra_modules": len(extra),
        "extra_spawnkit": sorted(m for m in floor if m.startswith("spawnkit")),
        "extra_other": sorted(m for m in floor if not m.startswith("spawnkit")),
        "floor_modules": floor,
    }


def _write_floor(site: Path, modules: list[str]) -> None:
    """``import-floor``'s worker: the hand-written one, importing ``modules`` first."""
    (site / f"{FLOOR_MODULE}.py").write_text(
        _FLOOR_WORKER.format(modules=modules) + _HAND_WORKER, encoding="utf-8"
    )


#: Started once before their rows (outside the timed region), as a warm start finds them.
_SERVED = frozenset({"raw-fork", "raw-forkserver", "spawnkit-warm", "ray-actor"})
#: After a warm group its server forks spares again while idle (up to 8; ~5 ms each when it
#: holds torch): the variant timed next must not run under that work.
_REFILL_S = 0.25


def _row(worker: str, variant: str, n: int, groups: list[list[float]]) -> dict[str, Any]:
    """A row from each repeat's stamps: medians of the group means and of the slowest."""
    means = [statistics.fmean(stamps) * 1e3 for stamps in groups]
    return {
        "worker": worker,
        "variant": variant,
        "n": n,
        "mean_ms": statistics.median(means),
        "group_ms": statistics.median(max(stamps) for stamps in groups) * 1e3,
        "means_ms": means,
    }


def _interleaved(
    worker: str, variants: dict[str, Callable[[int], list[float]]], n: int, repeats: int
) -> list[dict[str, Any]]:
    """One row per variant for groups of ``n``, each repeat running every variant once in
    turn (in reverse on every other repeat).

    Measured a variant at a time, a row stood minutes from the row it is divided by, and the
    machine's drift in between went into the ratio: the same code's cold torch / raw spawn
    read 0.85 to 1.29 across runs.  In turn, a drift falls on every variant of a repeat
    alike, and a target is the median of the ratios within each repeat (``_ratio``).
    """
    groups: dict[str, list[list[float]]] = {name: [] for name in variants}
    for repeat in range(repeats):
        order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for name in order:
            groups[name].append(variants[name](n))
            if name == "spawnkit-warm":
                time.sleep(_REFILL_S)
    rows = [_row(worker, name, n, groups[name]) for name in variants]
    for row in rows:
        row["interleaved"] = True
    return rows


def _variants(
    worker: str,
    module: str,
    preload: tuple[str, ...],
    peers: tuple[str, ...],
    raw_fork: Callable[[str, int], list[float]],
) -> dict[str, Callable[[int], list[float]]]:
    """What is measured for one worker kind, in order."""
    env = {"BENCH_SPAWN_TARGETS": module} if worker == "torchtarget" else None
    variants: dict[str, Callable[[int], list[float]]] = {
        "raw-spawn": lambda n: _raw("spawn", module, n),
        "hand-written": lambda n: _raw("spawn", "bench_spawn_hand", n),
        "import-floor": lambda n: _raw("spawn", FLOOR_MODULE, n),
        "raw-forkserver": lambda n: _raw("forkserver", module, n),
        "raw-fork": functools.partial(raw_fork, module),
        "spawnkit-cold": lambda n: _spawnkit("spawn", module, n, ()),
        "spawnkit-warm": lambda n: _spawnkit("forkserver", module, n, preload, env),
    }
    for peer in peers:
        variants[peer] = functools.partial(_peers.measure, peer, module, timeout=RAW_TIMEOUT_S)
    if worker != "trivial":
        del variants["hand-written"], variants["import-floor"]
    if worker == "torchtarget":  # only the warm comparison is asked for
        variants = {k: variants[k] for k in ("raw-forkserver", "spawnkit-warm")}
    return variants


def _worker_rows(
    worker: str,
    variants: dict[str, Callable[[int], list[float]]],
    sizes: tuple[int, ...],
    repeats: int,
) -> list[dict[str, Any]]:
    """Every row of one worker kind: its own variants in turn, then each peer on its own."""
    rows: list[dict[str, Any]] = []
    own = {name: fn for name, fn in variants.items() if name not in PEERS}
    for name, fn in own.items():
        if name in _SERVED:
            fn(1)  # start the server outside the timed region, as a warm start does
    for n in sizes:
        for row in _interleaved(worker, own, n, repeats):
            rows.append(row)
            _progress_line(row)
    for name in (k for k in variants if k in PEERS):
        # In turn with the others, Ray's daemons and loky's workers would load the machine
        # under their rows: a peer is measured on its own, after them, then closed.
        if name in _SERVED:
            variants[name](1)
        for n in sizes:
            row = _row(worker, name, n, [variants[name](n) for _ in range(repeats)])
            rows.append(row)
            _progress_line(row)
        _peers.close()
    return rows


def _progress_line(row: dict[str, Any]) -> None:
    print(
        f"  {row['worker']:11s} {row['variant']:15s} n={row['n']}  mean {row['mean_ms']:8.1f} ms  "
        f"group {row['group_ms']:8.1f} ms",
        file=sys.stderr,
        flush=True,
    )


def run(quick: bool = False) -> dict[str, Any]:
    """Measure every variant; returns the table as a dict (also used by the CLI)."""
    from spawnkit.namespace import Namespace
    from spawnkit.protocol import warm

    sizes = (1, 2) if quick else (1, 2, 4, 8)
    repeats = 1 if quick else 3
    Namespace(NS_NAME, env_prefix="BENCH_SPAWN_NS")
    peers, skipped = _peers.available()
    uncompiled = bytecode_note()
    skipped += [uncompiled] if uncompiled else []
    results: dict[str, Any] = {
        "sizes": list(sizes),
        "repeats": repeats,
        "rows": [],
        "peers": list(peers),
        "skipped": skipped,
    }
    forkers = contextlib.ExitStack()
    raw_fork = functools.partial(_raw_fork, forkers, {})
    with worker_site("spawnkit-bench-", _write_site, SRC) as site, forkers:
        try:
            # First: import-floor's worker imports the modules it finds
            results["census"] = census = _census(1 if quick else 3)
            _write_floor(site, census["floor_modules"])
            for worker in WORKERS:
                module = f"bench_spawn_{worker}"
                # Every forking variant holds what raw-fork's process holds: the worker module
                # (and so torch for the torch worker), as #23 defines the comparison.
                preload = ("torch", module) if worker == "torch" else (module,)
                # The stdlib forkserver is a per-process singleton: restart it per preload list.
                mp.forkserver._forkserver._stop()  # type: ignore[attr-defined]
                mp.set_forkserver_preload(list(preload))
                variants = _variants(worker, module, preload, peers, raw_fork)
                results["rows"] += _worker_rows(worker, variants, sizes, repeats)
        finally:
            _peers.close()
            warm.shutdown_forkservers()
            mp.forkserver._forkserver._stop()  # type: ignore[attr-defined]
    results["ratios"] = _ratios(results["rows"], sizes, peers)
    return results


#: (label, ratio key, bound, at_least): the issue-14 targets, checked at every group size.
TARGETS = (
    ("warm torch: speedup over cold spawnkit", "warm_speedup_vs_cold_torch", 60.0, True),
    ("warm torch / raw forkserver (torch preloaded)", "warm_vs_raw_forkserver_torch", 1.25, False),
    (
        "warm hook-target torch worker / raw forkserver (same preload)",
        "warm_vs_raw_forkserver_torchtarget",
        1.25,
        False,
    ),
    ("warm trivial / raw os.fork (#23)", "warm_vs_raw_fork_trivial", 2.0, False),
    ("warm torch / raw os.fork (#23)", "warm_vs_raw_fork_torch", 2.0, False),
    ("cold trivial / hand-written equivalent", "cold_vs_hand_written_trivial", 1.15, False),
    ("cold torch / raw spawn", "cold_vs_raw_spawn_torch", 1.05, False),
)


#: Each ratio the results report: (name, worker, variant divided, variant divided by).
_RATIOS = (
    ("cold_vs_raw_spawn_trivial", "trivial", "spawnkit-cold", "raw-spawn"),
    ("cold_vs_hand_written_trivial", "trivial", "spawnkit-cold", "hand-written"),
    ("cold_vs_raw_spawn_torch", "torch", "spawnkit-cold", "raw-spawn"),
    ("warm_speedup_vs_cold_torch", "torch", "spawnkit-cold", "spawnkit-warm"),
    ("warm_vs_raw_forkserver_torch", "torch", "spawnkit-warm", "raw-forkserver"),
    ("warm_vs_raw_fork_trivial", "trivial", "spawnkit-warm", "raw-fork"),
    ("warm_vs_raw_fork_torch", "torch", "spawnkit-warm", "raw-fork"),
    ("warm_vs_raw_forkserver_torchtarget", "torchtarget", "spawnkit-warm", "raw-forkserver"),
)


def _ratios(
    rows: list[dict[str, Any]], sizes: tuple[int, ...], peers: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The target ratios, and each peer's (and cold spawnkit's) time over raw spawn's."""

    def get(worker: str, variant: str, n: int) -> dict[str, Any]:
        for row in rows:
            if (row["worker"], row["variant"], row["n"]) == (worker, variant, n):
                return row
        raise KeyError((worker, variant, n))

    vs_raw = [
        (f"{variant}_vs_raw_spawn_{worker}", worker, variant, "raw-spawn")
        for worker in ("trivial", "torch")
        for variant in ("spawnkit-cold", *peers)
    ]
    measured = {(r["worker"], r["variant"]) for r in rows}
    floor = [_FLOOR_RATIO] if ("trivial", "import-floor") in measured else []
    return {
        f"n={n}": {
            name: _ratio(get(w, a, n), get(w, b, n))
            for name, w, a, b in (*_RATIOS, *vs_raw, *floor)
        }
        for n in sizes
    }


def _ratio(row: dict[str, Any], base: dict[str, Any]) -> float:
    """``row`` over ``base``: the median of the per-repeat ratios when both were measured in
    turn (see ``_interleaved``); else (a peer, measured on its own) the ratio of the medians."""
    if row.get("interleaved") and base.get("interleaved"):
        pairs = zip(row["means_ms"], base["means_ms"], strict=True)
        return float(statistics.median(a / b for a, b in pairs))
    return float(row["mean_ms"]) / float(base["mean_ms"])


#: No target of its own: the least ``cold_vs_hand_written_trivial`` can be with today's modules.
_FLOOR_RATIO = ("import_floor_vs_hand_written_trivial", "trivial", "import-floor", "hand-written")


def _mean(rows: list[dict[str, Any]], worker: str, variant: str, n: int) -> float | None:
    """One row's mean per worker (ms), ``None`` when it was not measured."""
    for row in rows:
        if (row["worker"], row["variant"], row["n"]) == (worker, variant, n):
            return float(row["mean_ms"])
    return None


def _cold_gap(results: dict[str, Any]) -> list[str]:
    """Where a cold trivial worker's time over the hand-written one goes, per group size."""
    lines = []
    for n in results["sizes"]:
        hand, floor, cold = (
            _mean(results["rows"], "trivial", v, n)
            for v in ("hand-written", "import-floor", "spawnkit-cold")
        )
        if hand is None or floor is None or cold is None:
            continue
        noisy = (
            " (a negative part: the rows' noise exceeds it)"
            if min(cold, floor) < hand or cold < floor
            else ""
        )
        lines.append(
            f"  n={n}: {cold - hand:6.1f} ms over hand-written = {floor - hand:5.1f} importing "
            f"spawnkit's worker modules + {cold - floor:5.1f} the rest (stages, reports, "
            f"guardian); the imports alone make {floor / hand:.2f}x{noisy}"
        )
    return lines


def _print(results: dict[str, Any]) -> None:
    sizes = results["sizes"]
    print(
        f"\nspawn latency, call -> entry running (median of {results['repeats']}; mean per worker)"
    )
    print(
        "(the variants but the peers run in turn within each repeat; a ratio between two of "
        "them is the median of the ratios within each repeat)"
    )
    header = f"{'worker':11s} {'variant':15s}" + "".join(f"{'n=' + str(n):>10s}" for n in sizes)
    print(header)
    print("-" * len(header))
    for worker in WORKERS:
        for variant in VARIANTS:
            cells = [
                r["mean_ms"]
                for n in sizes
                for r in results["rows"]
                if (r["worker"], r["variant"], r["n"]) == (worker, variant, n)
            ]
            if cells:
                print(f"{worker:11s} {variant:15s}" + "".join(f"{c:8.1f}ms" for c in cells))
    for note in results.get("skipped", []):
        print(f"note: {note}")
    plain = results["ratios"].items()
    _print_peers(results)
    print(
        "cold trivial / raw spawn (no target; the fair baseline is hand-written): "
        + "  ".join(f"{k} {v['cold_vs_raw_spawn_trivial']:.2f}" for k, v in plain)
    )
    gap = _cold_gap(results)
    if gap:
        print(
            "cold trivial over hand-written, where it goes (import-floor: the hand-written worker "
            "also importing what the census lists, running none of it):"
        )
        print("\n".join(gap))
    census = results.get("census")
    if census:
        split = ", ".join(f"{k} {v:.2f}" for k, v in census["stages_ms"].items())
        hooks = ", ".join(f"{k} {v:.2f}" for k, v in census["apply_hooks_ms"].items())
        print(f"\ncold trivial worker, per stage (ms, median): {split}")
        print(f"  apply_hooks split (ms): {hooks}")
        print(
            f"import census: {census['extra_modules']} modules beyond a raw spawn worker; "
            f"spawnkit ({len(census['extra_spawnkit'])}): {', '.join(census['extra_spawnkit'])}"
        )
        print(f"  other ({len(census['extra_other'])}): {', '.join(census['extra_other'])}")


def _print_peers(results: dict[str, Any]) -> None:
    """Cold spawnkit and each peer over raw spawn, same worker and group size, same run."""
    peers = results.get("peers", [])
    if not peers:
        return
    print("\nover raw spawn (same worker, same n, same run):")
    for worker in ("trivial", "torch"):
        for variant in ("spawnkit-cold", *peers):
            key = f"{variant}_vs_raw_spawn_{worker}"
            cells = "".join(f"{k} {v[key]:6.2f}x  " for k, v in results["ratios"].items())
            print(f"  {worker:8s} {variant:15s} {cells}")


def report(results: dict[str, Any]) -> None:
    """The side-by-side table, the cold stage split and the import census."""
    _print(results)


def checks(results: dict[str, Any]) -> list[Check]:
    """The issue-14 targets, one row per target and group size measured."""
    return [
        Check(f"{key} {label}", vals[ratio], bound, at_least=at_least)
        for label, ratio, bound, at_least in TARGETS
        for key, vals in results["ratios"].items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="groups of 1 and 2, one repeat")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    present(results, report, checks, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
