"""Warm workers do not share numpy's global random state, unless a plugin seeded it on purpose.

CPython reseeds ``random`` in a forked child; numpy does not reseed its legacy global
``RandomState``.  Every worker forked from a server that imported ``numpy.random`` drew the
same numbers, on every rank of every launch, where spawned workers each draw their own.  Real
launchers, a real installed plugin, real spawned and forked workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _plugin_app import printed, run_script, write_app

pytest.importorskip("numpy")

_LAUNCHER = """
import sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def draws(method, seed, at_load=""):
    with spawnkit.spawn_with_plugins(
        "{pkg}.plugin:draw", namespace=NS, nprocs=2, start_method=method,
        preload=("numpy.random",) if method == "forkserver" else (),
        env={{"SEED_AT_LOAD": seed, "AT_LOAD": at_load}}, ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)

if __name__ == "__main__":
    print({{
        "spawn": draws("spawn", ""),
        "warm": draws("forkserver", ""),
        "warm_again": draws("forkserver", ""),
        "spawn_seeded": draws("spawn", "1234"),
        "warm_seeded": draws("forkserver", "1234"),
        "warm_drawn": draws("forkserver", "", "draw"),
        "spawn_state": draws("spawn", "", "state"),
        "warm_state": draws("forkserver", "", "state"),
    }})
"""

_PLUGIN = """
import os

def register():
    if os.environ.get("SEED_AT_LOAD"):  # on purpose: every spawned worker does the same
        import numpy.random
        numpy.random.seed(int(os.environ["SEED_AT_LOAD"]))
    if os.environ.get("AT_LOAD") == "draw":  # a draw from numpy's own state: no seeding
        import numpy.random
        numpy.random.rand()
    if os.environ.get("AT_LOAD") == "state":  # a state given on purpose, from a seed elsewhere
        import numpy.random
        numpy.random.set_state(numpy.random.RandomState(99).get_state())

def draw():
    import numpy.random
    return int(numpy.random.randint(2**62))
"""


def test_each_warm_worker_draws_its_own_numbers_unless_seeded_at_load(tmp_path: Path) -> None:
    app = write_app(tmp_path, "np", _LAUNCHER, {"seed": "plugin:register"}, {"plugin": _PLUGIN})
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    drawn = got["spawn"] + got["warm"] + got["warm_again"]
    assert len(set(drawn)) == len(drawn), got  # each worker its own (2**62: no collision)
    # seeded by the plugin at load: the same numbers on every rank, spawned or warm
    assert len(set(got["spawn_seeded"] + got["warm_seeded"])) == 1, got
    # drawn from at load, not seeded: before, warm ranks kept sharing the server's state
    assert len(set(got["warm_drawn"] + drawn)) == len(drawn) + 2, got
    # a state set at load: the same on every rank, spawned or warm
    assert len(set(got["spawn_state"] + got["warm_state"])) == 1, got


_GEN_LAUNCHER = """
import sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def draws(method):
    with spawnkit.spawn_with_plugins(
        "{pkg}.gens:draw", namespace=NS, nprocs=2, start_method=method,
        preload=("{pkg}.gens",) if method == "forkserver" else (),
        ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)

if __name__ == "__main__":
    print([draws(m) for m in ("spawn", "forkserver", "forkserver")])  # a second warm launch
"""

_GEN_PLUGIN = """
import numpy.random  # a plugin that makes its generator as it loads

PLUGIN_RNG = numpy.random.default_rng()

def register():
    pass
"""

_GENS = """
from numpy.random import default_rng

from {pkg}.plugin import PLUGIN_RNG

PRELOAD_RNG = default_rng()  # a module the server preloads makes one at import
SEEDED = default_rng(7)  # seeded on purpose: the same on every rank, spawned or warm

def draw():
    return [int(g.integers(2**62)) for g in (PLUGIN_RNG, PRELOAD_RNG, SEEDED)]
"""


def test_each_warm_worker_draws_its_own_numbers_from_a_generator_made_at_import(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path, "npgen", _GEN_LAUNCHER, {"gen": "plugin:register"},
        {"plugin": _GEN_PLUGIN, "gens": _GENS},
    )  # fmt: skip
    ranks = [rank for launch in printed(app.script) for rank in launch]
    for i, what in enumerate(("plugin's", "preload's")):
        drawn = [r[i] for r in ranks]
        # Before: both warm ranks drew the same number from each.
        assert len(set(drawn)) == len(drawn), (what, ranks)
    assert len({r[2] for r in ranks}) == 1, ranks
