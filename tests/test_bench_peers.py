"""The benchmark's peers: torch.multiprocessing.spawn, loky's reusable executor and a Ray actor.

Speed is not asserted: these check that each installed peer really starts
the benchmark's worker and reports when its entry ran, that a missing
optional package becomes one printed note (not a crash, not silent rows of
nothing), and that the table shows each peer over the same raw-spawn baseline.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from spawnkit.bench import _peers, spawn_latency

TIMEOUT_S = 240.0


@pytest.fixture
def worker_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "bench_peer_worker.py").write_text(spawn_latency._WORKER.format(imports=""))
    monkeypatch.syspath_prepend(str(tmp_path))
    # loky's and Ray's workers find the module through the environment, as in the benchmark
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{spawn_latency.SRC}")
    return "bench_peer_worker"


@pytest.mark.parametrize(
    "peer",
    [
        pytest.param("torch-mp-spawn", marks=pytest.mark.needs_torch),
        "loky-first",
        "loky-reused",
        pytest.param("ray-actor", marks=pytest.mark.slow),
    ],
)
def test_each_peer_starts_the_worker_and_leaves_nothing_running(
    peer: str, worker_site: str
) -> None:
    package = _peers._NEEDS[peer][0]
    pytest.importorskip(package)
    path, environ = list(sys.path), dict(os.environ)
    try:
        seconds = _peers.measure(peer, worker_site, 2, TIMEOUT_S)
    finally:
        _peers.close()
    assert len(seconds) == 2
    assert all(0.0 < s < TIMEOUT_S for s in seconds), seconds
    assert multiprocessing.active_children() == []
    assert _peers._loky_workers == 0
    # Ray adds to both when it starts; what runs after the peers must not inherit that
    assert sys.path == path and dict(os.environ) == environ


def test_a_missing_peer_package_is_one_note_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # sys.modules[name] = None is how Python spells "this module cannot be imported".
    # torch too, so the count does not depend on which CI job (with or without torch) runs it
    for package in ("torch", "loky", "ray"):
        monkeypatch.setitem(sys.modules, package, None)
    peers, notes = _peers.available()
    assert peers == ()
    assert len(notes) == 3
    assert "torch is not installed" in notes[0] and "spawnkit[torch]" in notes[0]
    assert "loky is not installed" in notes[1] and "spawnkit[bench]" in notes[1]
    assert "ray is not installed" in notes[2] and "spawnkit[ray]" in notes[2]


def test_the_table_shows_each_peer_over_the_same_raw_spawn_baseline() -> None:
    peers = ("torch-mp-spawn", "loky-first")
    variants = (
        "raw-spawn", "hand-written", "spawnkit-cold", "spawnkit-warm", "raw-forkserver", "raw-fork"
    )  # fmt: skip
    times = (10.0, 11.0, 12.0, 2.0, 3.0, 0.8, 40.0, 25.0)
    rows = [
        {"worker": w, "variant": v, "n": n, "mean_ms": ms * n, "group_ms": ms * n}
        for w in ("trivial", "torch", "torchtarget")
        for v, ms in zip((*variants, *peers), times, strict=True)
        for n in (1, 2)
    ]
    results = {
        "sizes": [1, 2],
        "repeats": 1,
        "rows": rows,
        "peers": list(peers),
        "skipped": ["ray is not installed: its peer rows are skipped"],
    }
    results["ratios"] = spawn_latency._ratios(rows, (1, 2), peers)
    out = io.StringIO()
    with redirect_stdout(out):
        spawn_latency.report(results)
    text = out.getvalue()
    assert "note: ray is not installed" in text
    lines = text.splitlines()
    assert any(
        line.split()[:2] == ["trivial", "torch-mp-spawn"] and "40.0ms" in line for line in lines
    )
    over = [line.split() for line in text.split("over raw spawn", 1)[1].splitlines()]
    assert ["torch", "loky-first", "n=1", "2.50x", "n=2", "2.50x"] in over
    assert ["trivial", "spawnkit-cold", "n=1", "1.20x", "n=2", "1.20x"] in over
    # #23's warm target has its own row per size: spawnkit-warm over raw-fork, 2.0 / 0.8
    rows_23 = {c.label: c for c in spawn_latency.checks(results) if "raw os.fork" in c.label}
    assert set(rows_23) == {
        f"n={n} warm {w} / raw os.fork (#23)" for n in (1, 2) for w in ("trivial", "torch")
    }
    assert all(abs(c.value - 2.5) < 1e-9 and not c.ok for c in rows_23.values())


def _rows(floor: bool) -> list[dict[str, object]]:
    """Every worker and variant ``_ratios`` needs at n=1 and 2; trivial's ``import-floor`` too."""
    means = {
        "raw-spawn": 30.0, "hand-written": 40.0, "spawnkit-cold": 80.0, "spawnkit-warm": 2.0,
        "raw-forkserver": 3.0, "raw-fork": 0.8,
    }  # fmt: skip
    rows = [
        {"worker": w, "variant": v, "n": n, "mean_ms": ms, "group_ms": ms}
        for w in ("trivial", "torch", "torchtarget")
        for v, ms in means.items()
        for n in (1, 2)
    ]
    if floor:
        rows += [
            {"worker": "trivial", "variant": "import-floor", "n": n, "mean_ms": 64.0}
            for n in (1, 2)
        ]
    return rows


def test_the_cold_gap_over_hand_written_splits_into_imports_and_the_rest() -> None:
    results = {"sizes": [1, 2], "rows": _rows(floor=True)}
    gap = spawn_latency._cold_gap(results)
    assert len(gap) == 2  # one line per group size
    assert " ".join(gap[0].split()) == (
        "n=1: 40.0 ms over hand-written = 24.0 importing spawnkit's worker modules + 16.0 "
        "the rest (stages, reports, guardian); the imports alone make 1.60x"
    )
    # the floor's ratio is reported, with no target: it bounds the cold trivial row from below
    ratios = spawn_latency._ratios(_rows(floor=True), (1, 2))
    assert [r["import_floor_vs_hand_written_trivial"] for r in ratios.values()] == [1.6, 1.6]
    assert not [c for c in spawn_latency.checks({"ratios": ratios}) if "floor" in c.label]


def test_without_floor_rows_there_is_no_gap_line_and_no_floor_ratio() -> None:
    results = {"sizes": [1, 2], "rows": _rows(floor=False)}
    assert spawn_latency._cold_gap(results) == []
    ratios = spawn_latency._ratios(_rows(floor=False), (1, 2))
    assert all("import_floor_vs_hand_written_trivial" not in r for r in ratios.values())


def test_a_negative_part_of_the_cold_gap_is_called_noise() -> None:
    rows = _rows(floor=True)
    for row in rows:
        if row["variant"] == "import-floor":
            row["mean_ms"] = 90.0  # above the cold worker's 80: one of the two rows is off
    gap = spawn_latency._cold_gap({"sizes": [1, 2], "rows": rows})
    assert "-10.0 the rest" in " ".join(gap[0].split()) and "noise" in gap[0]
    assert "noise" not in spawn_latency._cold_gap({"sizes": [1], "rows": _rows(floor=True)})[0]
