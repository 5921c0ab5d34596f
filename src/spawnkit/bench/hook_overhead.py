"""Per-call cost of hooked functions and methods, and the cost of ``apply_hooks()``.

Everything is measured side by side in one run (variants interleaved in every
repeat, minimum kept) so that machine load affects them alike, and printed as
ratios:

* per call: plain call, a ``functools.wraps`` closure wrapper (pass-through, and
  calling the same AROUND hook), ``wrapt.FunctionWrapper`` (pass-through wrapper,
  and calling the same hook), and each spawnkit hook type, for a module function
  and for a method;
* ``apply_hooks()`` for 1000 hooks over 200 targets (real modules on disk,
  imported beforehand), as a ratio to a bare ``python -c pass`` start.  It is
  timed in a fresh interpreter (spawnkit and the target modules loaded, as in
  a worker), because its stale-binding sweep grows with every module loaded:
  timed in this process instead it would depend on what the benchmarks run
  before it imported (torch, ~1,100 modules).  That figure is printed too,
  as information, with the number of modules.

Run: ``python benchmarks/hook_overhead.py`` (``--quick`` for a short run,
``--check`` to exit 1 when a target is missed).  ``wrapt`` is only a
comparison: without it those rows are skipped with a note.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import timeit
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spawnkit.bench._checks import Check, present
from spawnkit.errors import HookConflictWarning
from spawnkit.hooks import HookRegistry, HookType

#: The folder spawnkit is imported from (a checkout's src/ or site-packages), for the fresh one.
SRC = Path(__file__).resolve().parents[2]

#: The one-line note when the optional comparison cannot run.
WRAPT_SKIPPED = "wrapt is not installed: the wrapt comparison is skipped (pip install wrapt)"


def _wrapt() -> Any:
    """``wrapt`` when installed; it is only a comparison, not a dependency."""
    try:
        import wrapt
    except ImportError:
        return None
    return wrapt


TARGETS = """
def f(a, b=2):
    return a

class C:
    def m(self, a, b=2):
        return a
"""


def around_hook(original_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return original_fn(*args, **kwargs)


def before_hook(*args: Any, **kwargs: Any) -> None:
    return None


def after_hook(result: Any, *args: Any, **kwargs: Any) -> None:
    return None


def wrapt_passthrough(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **kwargs)


def wrapt_calling_hook(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return around_hook(wrapped, *args, **kwargs)


def closure(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def closure_calling_hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return around_hook(fn, *args, **kwargs)

    return wrapper


HOOKS = {
    "BEFORE": (HookType.BEFORE, before_hook),
    "AFTER": (HookType.AFTER, after_hook),
    "AROUND": (HookType.AROUND, around_hook),
    "REPLACE": (HookType.REPLACE, None),
}


def _write_module(root: Path, name: str, source: str) -> Any:
    (root / f"{name}.py").write_text(source, encoding="utf-8")
    importlib.invalidate_caches()
    return importlib.import_module(name)


def build_call_variants(root: Path, reg: HookRegistry) -> dict[str, dict[str, Any]]:
    """{"function": {variant: callable}, "method": {variant: instance whose .m is timed}}."""
    wrapt = _wrapt()
    with_wrapt = ["wrapt", "wrapt+hook"] if wrapt is not None else []
    names = ["plain", "closure", "closure+hook", *with_wrapt, *HOOKS]
    mods = {n: _write_module(root, f"_bench_call_{i}", TARGETS) for i, n in enumerate(names)}
    wrappers: dict[str, Callable[[Any], Any]] = {
        "closure": closure,
        "closure+hook": closure_calling_hook,
    }
    if wrapt is not None:
        wrappers["wrapt"] = lambda fn: wrapt.FunctionWrapper(fn, wrapt_passthrough)
        wrappers["wrapt+hook"] = lambda fn: wrapt.FunctionWrapper(fn, wrapt_calling_hook)
    for name, wrap in wrappers.items():
        mod = mods[name]
        mod.f = wrap(mod.f)
        mod.C.m = wrap(vars(mod.C)["m"])
    for name, (hook_type, hook) in HOOKS.items():
        mod = mods[name]
        if hook is None:  # REPLACE with functions doing what the targets do
            exec(REPLACEMENTS, mod.__dict__)
            reg.register(f"{mod.__name__}.f", mod.repl, hook_type)
            reg.register(f"{mod.__name__}.C.m", mod.repl_m, hook_type)
        else:
            reg.register(f"{mod.__name__}.f", hook, hook_type)
            reg.register(f"{mod.__name__}.C.m", hook, hook_type)
    reg.apply_hooks()
    for n in names:
        assert mods[n].f(1) == 1 and mods[n].C().m(1) == 1
    return {
        "function": {n: mods[n].f for n in names},
        "method": {n: mods[n].C() for n in names},
    }


REPLACEMENTS = """
def repl(a, b=2):
    return a

def repl_m(self, a, b=2):
    return a
"""


def time_calls(variants: dict[str, Any], kind: str, number: int, repeat: int) -> dict[str, float]:
    """Nanoseconds per call, minimum over interleaved repeats."""
    stmt = "t(1)" if kind == "function" else "t.m(1)"  # attribute lookup included for methods
    timers = {n: timeit.Timer(stmt, globals={"t": v}) for n, v in variants.items()}
    best = {n: float("inf") for n in variants}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for n, timer in timers.items():
                best[n] = min(best[n], timer.timeit(number) / number * 1e9)
    finally:
        if gc_was:
            gc.enable()
    return best


def build_apply_modules(root: Path, n_modules: int = 20) -> list[str]:
    """20 modules x (5 functions + 5 methods) = 200 targets."""
    targets: list[str] = []
    for i in range(n_modules):
        src = []
        for j in range(5):
            src.append(f"def f{j}(a, b=2):\n    return a\n")
        src.append(
            "class K:\n" + "".join(f"    def m{j}(self, a):\n        return a\n" for j in range(5))
        )
        name = f"_bench_apply_{i}"
        _write_module(root, name, "\n".join(src))
        targets += [f"{name}.f{j}" for j in range(5)] + [f"{name}.K.m{j}" for j in range(5)]
    return targets


#: A module holding a copy of every target (``from m import f``, ``run = K.m``): with it
#: loaded, every original is referenced outside its home and the apply sweeps every module.
COPIES = "_bench_apply_copies"


def build_copies_module(root: Path, targets: list[str]) -> str:
    lines = [f"import {m}" for m in dict.fromkeys(t.split(".")[0] for t in targets)]
    lines += [f"c{i} = {t}" for i, t in enumerate(targets)]
    _write_module(root, COPIES, "\n".join(lines) + "\n")
    return COPIES


def time_apply_fresh(
    root: Path, targets: list[str], repeat: int, also: str = ""
) -> tuple[float, float, float, int]:
    """``time_apply`` in a fresh interpreter that imports spawnkit, the targets' modules and
    the module ``also`` (if any)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from spawnkit.bench.hook_overhead import _apply_here; "
        "print(json.dumps(_apply_here(sys.argv[2].split(','), int(sys.argv[3]), sys.argv[4])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root), ",".join(targets), str(repeat), also],
        capture_output=True,
        encoding="utf-8",
        timeout=300,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(SRC)),
    )
    reg_s, apply_s, unapply_s, modules = json.loads(out.stdout)
    return reg_s, apply_s, unapply_s, modules


def _apply_here(targets: list[str], repeat: int, also: str = "") -> tuple[float, float, float, int]:
    """The fresh interpreter's side of ``time_apply_fresh``."""
    logging.getLogger("spawnkit.hooks").setLevel(logging.ERROR)
    for module in [*dict.fromkeys(t.split(".")[0] for t in targets), *filter(None, [also])]:
        importlib.import_module(module)
    return (*time_apply(targets, repeat), len(sys.modules))


def time_apply(targets: list[str], repeat: int) -> tuple[float, float, float]:
    """(register, apply, unapply) seconds for 5 hooks on each target, best of ``repeat``."""
    kinds = [
        (HookType.BEFORE, before_hook),
        (HookType.AFTER, after_hook),
        (HookType.AROUND, around_hook),
        (HookType.AFTER, lambda r, *a, **k: None),
        (HookType.BEFORE, lambda *a, **k: None),
    ]
    best = [float("inf")] * 3
    for _ in range(repeat):
        with HookRegistry.isolated() as reg:
            t0 = time.perf_counter()
            for target in targets:
                for hook_type, hook in kinds:
                    reg.register(target, hook, hook_type)
            t1 = time.perf_counter()
            patched = reg.apply_hooks()
            t2 = time.perf_counter()
            assert len(patched) == len(targets) and len(reg.registrations()) == 5 * len(targets)
            reg.unapply()
            t3 = time.perf_counter()
        best = [min(b, v) for b, v in zip(best, (t1 - t0, t2 - t1, t3 - t2), strict=True)]
    return best[0], best[1], best[2]


def time_interpreter(args: list[str], repeat: int) -> float:
    """The best of ``repeat`` starts of ``python *args -c pass``, in seconds.

    Captured output on purpose: with a timeout and no pipes, ``subprocess`` polls for the
    child's exit, sleeping 1, 2, 4, 8 ms..., so a 10 ms start read as 15.6 ms; with pipes it
    wakes when the child's end closes them.
    """
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        cmd = [sys.executable, *args, "-c", "pass"]
        subprocess.run(cmd, check=True, timeout=60, capture_output=True)
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool = False) -> dict[str, Any]:
    """Measure every variant; the figures as a dict (also used by ``spawnkit bench``).

    The hooks' log and conflict warnings are quiet while it measures (mixing is expected here)
    and as they were afterwards: set for good, a ``spawnkit bench`` run in-process
    (``spawnkit.cli.main``, a notebook) silenced every later hook warning of that process."""
    logger = logging.getLogger("spawnkit.hooks")
    level = logger.level
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=HookConflictWarning)
        logger.setLevel(logging.ERROR)
        try:
            return _run(quick)
        finally:
            logger.setLevel(level)


def _run(quick: bool) -> dict[str, Any]:
    number, repeat = (100_000, 5) if quick else (300_000, 15)
    wrapt = _wrapt()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sys.path.insert(0, tmp)
        try:
            calls_registry = HookRegistry(name="benchmark")
            variants = build_call_variants(root, calls_registry)
            results = {k: time_calls(variants[k], k, number, repeat) for k in variants}
            calls_registry.unapply()
            targets = build_apply_modules(root)
            reg_s, apply_s, unapply_s, fresh_modules = time_apply_fresh(
                root, targets, 3 if quick else 7
            )
            copies = build_copies_module(root, targets)
            copied_s = time_apply_fresh(root, targets, 3 if quick else 7, copies)[1]
            here_s = time_apply(targets, 3 if quick else 7)[1]
        finally:
            sys.path.remove(tmp)
    start_s = time_interpreter([], 5 if quick else 10)
    start_isolated_s = time_interpreter(["-I", "-S"], 5 if quick else 10)
    return {
        "python": sys.version.split()[0],
        "wrapt": getattr(wrapt, "__version__", "?") if wrapt is not None else None,
        "skipped": [] if wrapt is not None else [WRAPT_SKIPPED],
        "number": number,
        "repeat": repeat,
        "calls_ns": results,
        "targets": len(targets),
        "register_s": reg_s,
        "apply_s": apply_s,
        "unapply_s": unapply_s,
        "apply_modules": fresh_modules,
        "apply_here_s": here_s,
        "apply_copied_s": copied_s,
        "here_modules": len(sys.modules),
        "start_s": start_s,
        "start_isolated_s": start_isolated_s,
    }


def _overheads(r: dict[str, Any]) -> dict[str, dict[str, float]]:
    """ns per call minus the plain call, per kind and variant."""
    calls = r["calls_ns"]
    return {k: {n: t - calls[k]["plain"] for n, t in calls[k].items()} for k in calls}


def report(r: dict[str, Any]) -> None:
    """The per-call table, the ratios and the apply_hooks() figures."""
    results = r["calls_ns"]
    number, repeat = r["number"], r["repeat"]
    has_wrapt = r["wrapt"] is not None
    for note in r["skipped"]:
        print(f"note: {note}")
    print(
        f"Python {r['python']}, wrapt {r['wrapt'] or 'not installed'}; "
        f"{number} calls x {repeat} interleaved repeats, best kept\n"
    )
    header = (
        f"{'variant':14s} | {'function ns':>11s} {'overhead':>9s} | "
        f"{'method ns':>10s} {'overhead':>9s}"
    )
    print(header)
    print("-" * len(header))
    over = _overheads(r)
    for name in results["function"]:
        row = [f"{name:14s}"]
        for kind in ("function", "method"):
            t = results[kind][name]
            row.append(f"{t:10.1f}  {over[kind][name]:8.1f}")
        print(" | ".join(row))

    print("\nAROUND overhead ratios (overhead = ns per call minus the plain call):")
    for kind in ("function", "method"):
        o = over[kind]
        same_closure = o["AROUND"] / o["closure+hook"]
        line = f"  {kind:8s}: vs closure calling the same hook {same_closure:5.2f}x (target <= 1.1)"
        if has_wrapt:
            line += f" | vs wrapt FunctionWrapper {o['AROUND'] / o['wrapt']:5.2f}x (target <= 0.5)"
        print(line)
        line = (
            f"  {'':8s}  vs pass-through closure {o['AROUND'] / o['closure']:5.2f}x (info: the "
            "hook is a second Python frame)"
        )
        if has_wrapt:
            line += f" | vs wrapt calling the same hook {o['AROUND'] / o['wrapt+hook']:5.2f}x"
        print(line)

    _print_apply(r)


def _print_apply(r: dict[str, Any]) -> None:
    """The apply_hooks() figures against a bare start."""
    targets, reg_s, apply_s, unapply_s = r["targets"], r["register_s"], r["apply_s"], r["unapply_s"]
    start_s, start_isolated_s = r["start_s"], r["start_isolated_s"]
    ratio = apply_s / start_s
    print(
        f"\napply_hooks(): {targets} targets, {5 * targets} hooks, in a fresh interpreter "
        f"({r['apply_modules']} modules loaded)"
    )
    print(
        f"  register {reg_s * 1e3:7.2f} ms | apply {apply_s * 1e3:7.2f} ms | "
        f"unapply {unapply_s * 1e3:7.2f} ms"
    )
    print(
        f"  python -c pass {start_s * 1e3:7.2f} ms -> apply / start = {ratio:.3f} (target <= 0.5)"
    )
    print(
        f"  python -I -S -c pass {start_isolated_s * 1e3:7.2f} ms -> apply / start = "
        f"{apply_s / start_isolated_s:.3f}"
    )
    print(
        "  the sweep for copies of the originals runs only for an original referenced outside "
        "its home (its reference count says so); here none is"
    )
    copied = r.get("apply_copied_s")
    if copied is not None:
        print(
            f"  info: apply with a copy of every target in one more module (every original "
            f"swept for): {copied * 1e3:7.2f} ms -> apply / start = {copied / start_s:.3f}"
        )
    print(
        f"  info: apply in this process ({r['here_modules']} modules loaded, none vouched "
        f"clean): {r['apply_here_s'] * 1e3:7.2f} ms"
    )


def checks(r: dict[str, Any]) -> list[Check]:
    """AROUND against a closure calling the same hook and against wrapt; apply against start."""
    over = _overheads(r)
    out: list[Check] = []
    for kind in ("function", "method"):
        o = over[kind]
        out.append(Check(f"{kind} AROUND / closure+hook", o["AROUND"] / o["closure+hook"], 1.1))
        if r["wrapt"] is not None:
            out.append(Check(f"{kind} AROUND / wrapt", o["AROUND"] / o["wrapt"], 0.5))
    out.append(Check("apply_hooks() / python -c pass", r["apply_s"] / r["start_s"], 0.5))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    opts = parser.parse_args(argv)
    results = run(quick=opts.quick)
    found = present(results, report, checks, opts.json)
    return 1 if (opts.check and not all(c.ok for c in found)) else 0


if __name__ == "__main__":
    sys.exit(main())
