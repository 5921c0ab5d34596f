"""Warm workers do not share a ``random.Random()`` a module made from entropy at import.

CPython reseeds only ``random``'s own generator in a forked child.  A preload, plugin or hook
target that creates ``_rng = random.Random()`` as it is imported gave every worker forked from
the warm server that one state: the same "random" numbers on every rank of every launch, where
each spawned worker, importing the module itself, draws its own.  One created with a seed is
the same in every spawned worker too, and stays so.  Real launchers, a real installed plugin,
real spawned and forked workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _plugin_app import LAUNCH, run_script, write_app

_LAUNCHER = LAUNCH + """
if __name__ == "__main__":
    got = {{"spawn": launch("rngs:draw", "spawn", nprocs=2)}}
    got["warm"] = launch("rngs:draw", "forkserver", nprocs=2)
    got["again"] = launch("rngs:draw", "forkserver", nprocs=2)
    print(got)
"""

_RNGS = """
import random

FROM_ENTROPY = random.Random()
SEEDED = random.Random(1234)
GIVEN_STATE = random.Random()
GIVEN_STATE.setstate(random.Random(99).getstate())  # a state on purpose: kept as given

def draw():
    return [FROM_ENTROPY.getrandbits(62), SEEDED.getrandbits(62), GIVEN_STATE.getrandbits(62)]
"""

_PLUGIN = """
def register():
    pass
"""


def test_each_warm_worker_draws_its_own_numbers_from_a_module_level_random(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path, "rng", _LAUNCHER, {"noop": "plugin:register"}, {"plugin": _PLUGIN, "rngs": _RNGS}
    )
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    workers = got["spawn"] + got["warm"] + got["again"]
    from_entropy = [w[0] for w in workers]
    # Before: the four warm workers drew one number (2**62: no collision by chance).
    assert len(set(from_entropy)) == len(from_entropy), got
    # Seeded, or given a state, at import: the same on every worker, spawned or warm.
    assert len({w[1] for w in workers}) == 1, got
    assert len({w[2] for w in workers}) == 1, got
