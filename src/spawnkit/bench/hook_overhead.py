"""Per-call cost of hooked functions and methods, and the cost of ``apply_hooks()``.

Everything is measured side by side in one run (variants interleaved in every
repeat, minimum kept) so that machine load affects them alike, and printed as
ratios:

* per call: plain call, a ``functools.wraps`` closure wrapper (pass-through, and
  calling the same AROUND hook), ``wrapt.FunctionWrapper`` (pass-through wrapper,
  and calling the same hook), and each spawnkit hook type, for a module function
  and for a method;
* ``apply_hooks()`` for 1000 hooks over 200 targets (real modules on disk,
  imported beforehand), as a ratio to a bare ``python -c pass`` start.

Run: ``python benchmarks/hook_overhead.py`` (``--quick`` for a short run,
``--check`` to exit 1 when a target is missed).
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import logging
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wrapt

from spawnkit.hooks import HookRegistry, HookType

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
    (root / f"{name}.py").write_text(source)
    importlib.invalidate_caches()
    return importlib.import_module(name)


def build_call_variants(root: Path, reg: HookRegistry) -> dict[str, dict[str, Any]]:
    """{"function": {variant: callable}, "method": {variant: instance whose .m is timed}}."""
    names = ["plain", "closure", "closure+hook", "wrapt", "wrapt+hook", *HOOKS]
    mods = {n: _write_module(root, f"_bench_call_{i}", TARGETS) for i, n in enumerate(names)}
    wrappers: dict[str, Callable[[Any], Any]] = {
        "closure": closure,
        "closure+hook": closure_calling_hook,
        "wrapt": lambda fn: wrapt.FunctionWrapper(fn, wrapt_passthrough),
        "wrapt+hook": lambda fn: wrapt.FunctionWrapper(fn, wrapt_calling_hook),
    }
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
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args, "-c", "pass"], check=True, timeout=60)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    opts = parser.parse_args()
    number, repeat = (100_000, 5) if opts.quick else (300_000, 15)
    logging.getLogger("spawnkit.hooks").setLevel(logging.ERROR)  # mixing warnings are expected

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sys.path.insert(0, tmp)
        try:
            calls_registry = HookRegistry(name="benchmark")
            variants = build_call_variants(root, calls_registry)
            results = {k: time_calls(variants[k], k, number, repeat) for k in variants}
            calls_registry.unapply()
            targets = build_apply_modules(root)
            reg_s, apply_s, unapply_s = time_apply(targets, 3 if opts.quick else 7)
        finally:
            sys.path.remove(tmp)
    start_s = time_interpreter([], 5 if opts.quick else 10)
    start_isolated_s = time_interpreter(["-I", "-S"], 5 if opts.quick else 10)

    print(
        f"Python {sys.version.split()[0]}, wrapt {wrapt.__version__}; "
        f"{number} calls x {repeat} interleaved repeats, best kept\n"
    )
    header = (
        f"{'variant':14s} | {'function ns':>11s} {'overhead':>9s} | "
        f"{'method ns':>10s} {'overhead':>9s}"
    )
    print(header)
    print("-" * len(header))
    over: dict[str, dict[str, float]] = {"function": {}, "method": {}}
    for name in results["function"]:
        row = [f"{name:14s}"]
        for kind in ("function", "method"):
            t = results[kind][name]
            o = t - results[kind]["plain"]
            over[kind][name] = o
            row.append(f"{t:10.1f}  {o:8.1f}")
        print(" | ".join(row))

    checks: list[tuple[str, float, float]] = []
    print("\nAROUND overhead ratios (overhead = ns per call minus the plain call):")
    for kind in ("function", "method"):
        o = over[kind]
        same_closure = o["AROUND"] / o["closure+hook"]
        same_wrapt = o["AROUND"] / o["wrapt"]
        print(
            f"  {kind:8s}: vs closure calling the same hook {same_closure:5.2f}x (target <= 1.1)"
            f" | vs wrapt FunctionWrapper {same_wrapt:5.2f}x (target <= 0.5)"
        )
        print(
            f"  {'':8s}  vs pass-through closure {o['AROUND'] / o['closure']:5.2f}x (info: the "
            f"hook is a second Python frame) | vs wrapt calling the same hook "
            f"{o['AROUND'] / o['wrapt+hook']:5.2f}x"
        )
        checks += [
            (f"{kind} AROUND / closure", same_closure, 1.1),
            (f"{kind} AROUND / wrapt", same_wrapt, 0.5),
        ]

    ratio = apply_s / start_s
    print(f"\napply_hooks(): {len(targets)} targets, {5 * len(targets)} hooks")
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
    checks.append(("apply / python -c pass", ratio, 0.5))

    missed = [c for c in checks if c[1] > c[2]]
    print(
        "\n"
        + (
            "all targets met"
            if not missed
            else "MISSED: " + ", ".join(f"{n} {v:.2f} > {t}" for n, v, t in missed)
        )
    )
    return 1 if (missed and opts.check) else 0


if __name__ == "__main__":
    sys.exit(main())
