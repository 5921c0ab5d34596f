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

import pytest

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


_SEEDING_LAUNCHER = LAUNCH + """
if __name__ == "__main__":
    print([launch("rngs:draw", m, nprocs=2) for m in ("spawn", "forkserver", "forkserver")])
"""

_DRAW = "import random\ndef draw():\n    return random.getrandbits(62)\n"

_SEEDER = """
import os
import random

def register():
    how = os.environ["HOW"]
    if how in ("seed", "reseeded"):
        random.seed(42)
    if how == "setstate":
        random.setstate(random.Random(7).getstate())
    random.random()  # a draw after: a spawned worker's state moves on the same way
    if how == "reseeded":
        random.seed()  # back to entropy
"""


@pytest.mark.parametrize("how", ["seed", "setstate", "reseeded", "none"])
def test_a_plugins_random_seed_holds_in_warm_workers_as_in_spawned_ones(
    tmp_path: Path, how: str
) -> None:
    """CPython reseeds ``random`` in a forked child: a plugin's ``random.seed(42)`` was undone
    in every warm worker (each drew its own numbers) while every spawned worker repeated it."""
    app = write_app(
        tmp_path,
        "rseed",
        _SEEDING_LAUNCHER,
        {"seeder": "plugin:register"},
        {"plugin": _SEEDER, "rngs": _DRAW},
    )
    proc = run_script(app.script, env={"HOW": how})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spawned, warm, again = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    drawn = spawned + warm + again
    if how in ("seed", "setstate"):
        assert len(set(drawn)) == 1, drawn  # before: the four warm workers' numbers differed
    else:  # from entropy: every worker its own (2**62: no collision by chance)
        assert len(set(drawn)) == len(drawn), drawn
