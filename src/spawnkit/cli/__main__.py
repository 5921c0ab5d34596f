"""``python -m spawnkit.cli``: the ``spawnkit`` command without its console script."""

from __future__ import annotations

import sys

from spawnkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
