"""The warm-start split of ``spawnkit bench``: real warm workers, phases on one clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spawnkit.bench import warm_split
from spawnkit.launch.specs import build_spec
from spawnkit.protocol import warm
from spawnkit.protocol.popen import get_launch_context


def test_the_split_adds_up_to_the_warm_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm_split._site(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    inherited = os.environ.get("PYTHONPATH", "")  # CI runs with none set
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), inherited) if p))
    template = build_spec("warm_split_trivial:main", None)
    lctx = get_launch_context(
        "multiprocessing", "forkserver", ("warm_split_trivial",), template, 120
    )
    try:
        took, phases = warm_split._warm(lctx, template, 2)
    finally:
        warm.shutdown_forkservers()
    assert len(phases) == 2
    for ph in phases:
        assert set(ph) == set(warm_split.PHASES) and min(ph.values()) >= 0
    # rank 0's phases cover its start from call to entry; the group took at least that
    assert sum(phases[0].values()) <= took + 1e-6


def test_each_size_and_worker_is_a_target_row() -> None:
    rows = [
        {"worker": w, "n": n, "ratio": r} for w, n, r in (("trivial", 1, 1.5), ("torch", 8, 3.0))
    ]
    found = warm_split.checks({"rows": rows})
    assert [c.ok for c in found] == [True, False]
    assert found[1].label == "warm torch n=8 / raw os.fork"


def test_the_call_column_covers_the_launchers_own_work_before_each_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm_split._site(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    inherited = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), inherited) if p))
    try:
        warm_split._call("warm_split_trivial", 1)  # the server starts: not this test's
        took, launcher = warm_split._call("warm_split_trivial", 3)
    finally:
        warm.shutdown_forkservers()
    assert len(launcher) == 3 and min(launcher) > 0
    # rank 0's share runs from the call, the others' from their predecessor's start: all of
    # them end before the last entry ran
    assert sum(launcher) < took
