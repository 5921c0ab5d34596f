"""Entry point for ``spawnkit.bench.hook_overhead`` (the code ships in the package; see there).

Run: ``python benchmarks/hook_overhead.py --help``; ``spawnkit bench --only hook_overhead``
runs the same code.
"""

from __future__ import annotations

import sys
from pathlib import Path

# A checkout without an install still finds its own spawnkit.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from spawnkit.bench.hook_overhead import main

if __name__ == "__main__":
    sys.exit(main())
