"""Warm workers do not share torch's default CPU generator, unless a plugin seeded it on purpose.

torch seeds that generator from entropy as it is imported, and a fork keeps it: every worker
forked from a server holding torch drew the server's numbers (``torch.rand``, the initial
weights of a module built without a seed), where spawned workers each draw their own.  Real
launchers, a real installed plugin, real spawned and forked workers, real torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _plugin_app import run_script, write_app

pytest.importorskip("torch")

_LAUNCHER = """
import sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def draws(method, at_load=""):
    with spawnkit.spawn_with_plugins(
        "{pkg}.plugin:draw", namespace=NS, nprocs=2, start_method=method,
        preload=("torch",) if method == "forkserver" else (),
        env={{"AT_LOAD": at_load}}, ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)

if __name__ == "__main__":
    print({{
        "spawn": draws("spawn"),
        "warm": draws("forkserver"),
        "warm_again": draws("forkserver"),
        "warm_drawn": draws("forkserver", "draw"),
        "spawn_seeded": draws("spawn", "seed"),
        "warm_seeded": draws("forkserver", "seed"),
    }})
"""

_PLUGIN = """
import os

def register():
    import torch
    if os.environ.get("AT_LOAD") == "draw":  # drawn from torch's own seed: nothing set
        torch.nn.Linear(4, 4)
    if os.environ.get("AT_LOAD") == "seed":  # on purpose: every spawned worker does the same
        torch.manual_seed(1234)

def draw():
    import torch
    return int(torch.randint(2**62, (1,)).item())
"""


def test_each_warm_worker_draws_its_own_torch_numbers_unless_seeded_at_load(
    tmp_path: Path,
) -> None:
    app = write_app(tmp_path, "tseed", _LAUNCHER, {"seed": "plugin:register"}, {"plugin": _PLUGIN})
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    drawn = got["spawn"] + got["warm"] + got["warm_again"] + got["warm_drawn"]
    # Before: both ranks of each warm launch drew the server's one number.
    assert len(set(drawn)) == len(drawn), got  # each worker its own (2**62: no collision)
    # seeded by the plugin at load: the same number on every rank, spawned or warm
    assert len(set(got["spawn_seeded"] + got["warm_seeded"])) == 1, got
