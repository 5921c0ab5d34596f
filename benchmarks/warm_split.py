"""Entry point for ``spawnkit.bench.warm_split`` (the code ships in the package; see there).

Run: ``python benchmarks/warm_split.py --help``; ``spawnkit bench --only warm_split``
runs the same code.
"""

from __future__ import annotations

import sys
from pathlib import Path

# A checkout without an install still finds its own spawnkit.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from spawnkit.bench.warm_split import main

if __name__ == "__main__":
    sys.exit(main())
