"""``python -m spawnkit.run --spec FILE``: the command torchrun starts per rank.

The code lives in :mod:`spawnkit.scaleout.torchrun`, beside the Ray launcher;
this module keeps the documented command line working.
"""

from __future__ import annotations

import sys

from spawnkit.scaleout.torchrun import RankEnvError, main, rank_from_env, spec_for_rank

__all__ = ["RankEnvError", "main", "rank_from_env", "spec_for_rank"]

if __name__ == "__main__":  # pragma: no cover - exercised through ``python -m`` in tests
    sys.exit(main(restartable=True))
