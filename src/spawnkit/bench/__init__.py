"""spawnkit's benchmarks, shipped in the package so ``spawnkit bench`` runs from an installed wheel.

Each benchmark module measures its baselines in the same run (these
machines are noisy) and offers the same four functions:

* ``run(quick) -> dict``: the figures, JSON-serialisable;
* ``report(results)``: the side-by-side table, printed to stdout;
* ``checks(results) -> list[Check]``: the targets with their verdicts;
* ``main(argv) -> int``: the command line of ``benchmarks/<name>.py``.

Optional comparisons (``wrapt``) are skipped with a note in
``results["skipped"]`` when their package is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from spawnkit.bench._checks import Check, load_average, print_checks

__all__ = ["BENCHMARKS", "Check", "load", "load_average", "print_checks"]

#: What ``spawnkit bench`` runs by default, in this order.
BENCHMARKS = (
    "spawn_latency",
    "hook_overhead",
    "bootstrap_stages",
    "context_pool",
    "warm_split",
)


def load(name: str) -> ModuleType:
    """The benchmark module ``spawnkit.bench.<name>``; ``KeyError`` for an unknown name."""
    if name not in BENCHMARKS:
        raise KeyError(name)
    return importlib.import_module(f"spawnkit.bench.{name}")
