"""Each rank sees its own ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``.

A launcher that is itself a rank (one engine process per node under torchrun or SLURM,
which then spawns its GPU workers) has the distributed launcher's numbers in its
environment; its workers inherited them, so both workers of launcher 1 read ``RANK=1``, and
``init_process_group("env://")`` or a GPU picked by ``LOCAL_RANK`` took another process's
numbers, silently.  Each rank now gets the group's own numbers, as torchrun's and Ray's
ranks do, spawned (from the interpreter's start) or forked from a warm server; a name
``env=`` sets explicitly stays as set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins

_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _launch(site: Site, method: str, env: dict[str, str] | None = None) -> list[object]:
    (site.root / f"{site.tag}_ranks.py").write_text(
        "import os\n\n"
        f"def numbers():\n    return tuple(os.environ.get(n) for n in {_NAMES!r})\n"
    )
    with spawn_with_plugins(
        f"{site.tag}_ranks:numbers",
        nprocs=2,
        namespace=site.ns,
        start_method=method,
        ready_timeout=60,
        env=env,
    ) as group:
        return group.results(timeout=60)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_each_rank_has_its_own_numbers_not_its_launchers(
    site: Site, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    for name, value in zip(_NAMES, ("5", "1", "16", "8"), strict=True):  # launcher: rank 5
        monkeypatch.setenv(name, value)
    assert _launch(site, method) == [("0", "0", "2", "2"), ("1", "1", "2", "2")]


def test_a_number_env_sets_stays_as_set(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "5")
    assert _launch(site, "spawn", env={"WORLD_SIZE": "32"}) == [
        ("0", "0", "32", "2"),
        ("1", "1", "32", "2"),
    ]
