"""The stale-binding sweep's cost per ``apply_hooks()``: globals only vs. into containers.

The sweep runs once per apply that has an original referenced outside its
home (an apply whose originals nothing else references skips it: their
reference counts say so, ``hooks._propagate.held_nowhere_else``), over every
module in ``sys.modules``; its cost grows with what is imported, so it is
measured with and without torch loaded, for 100 replaced originals that
nothing holds (the C-level checks find nothing and no module is walked in
Python), in the two situations a worker's bootstrap is in:

* ``no clean modules``: the import guard is off or found a violation, so
  every module is searched;
* ``clean modules``: the guard passed and vouches for the modules imported
  before plugins loaded (all but the last 20 here); only the dicts and lists
  of those in a target's own top-level package are searched.

Each figure is the minimum over ``--repeat`` runs of CPU time (process time,
so that other load on the machine counts less), in a fresh interpreter.

Run: ``python benchmarks/stale_sweep.py [--repeat N] [--no-torch]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
if {torch!r}:
    import torch  # noqa: F401
import spawnkit.hooks.registry, spawnkit.hooks.plugins, importlib.metadata  # noqa: F401
from spawnkit.hooks._propagate import Rebind, find_holders


def originals():
    return [lambda: None for _ in range(100)]


def best(call, repeat):
    times = []
    for _ in range(repeat):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return min(times) * 1e3


rebinds = {{id(o): Rebind(o, None, frozenset(), "eng.mod.f") for o in originals()}}
out = {{"modules": len(sys.modules)}}
for label, clean in (
    ("no clean modules", frozenset()),
    ("clean modules", frozenset(list(sys.modules)[:-20])),
):
    out[label] = [
        best(lambda: find_holders(rebinds, frozenset(), clean), {repeat}),
        best(lambda: find_holders(rebinds, frozenset(), clean, containers=True), {repeat}),
    ]
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--no-torch", action="store_true", help="skip the run with torch loaded")
    args = parser.parse_args()
    print(f"{'':<30}{'globals ms':>12}{'+containers ms':>16}")
    for torch in (False,) if args.no_torch else (False, True):
        code = CHILD.format(torch=torch, repeat=args.repeat)
        proc = subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
        out = json.loads(proc.stdout)
        print(f"{'with torch' if torch else 'without torch'} ({out['modules']} modules)")
        for label in ("no clean modules", "clean modules"):
            plain, nested = out[label]
            print(f"  {label:<28}{plain:>12.3f}{nested:>16.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
