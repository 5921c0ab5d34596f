"""A warm worker's ``arm_parent_death`` finds the ABC answer it needs already cached.

``os.environ.update(rank_env(spec))`` asks ``isinstance(a_dict, Mapping)``; ``abc`` caches
each answer in the process that asked, and no warm server had asked this one, so every
forked worker walked ``Mapping``'s registry for it again (``ABCMeta.__subclasscheck__``,
twice).  The server answers it before it forks (``_fork_loop._answer_ahead``).  Counted in
real workers, by a profile function a preload installs in the server (the forked workers
inherit it): the calls of ``__subclasscheck__`` each worker made for ``dict``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins

_PRELOAD = """
import abc
import os
import sys

SEEN = []
_CODE = abc.ABCMeta.__subclasscheck__.__code__


def _profile(frame, event, _arg):
    if event == "call" and frame.f_code is _CODE:
        SEEN.append((os.getpid(), frame.f_locals.get("subclass")))


sys.setprofile(_profile)
"""

_PROBE = """
import os


def probe():
    from {preload} import SEEN
    return [pid for pid, subclass in SEEN if pid == os.getpid() and subclass is dict]
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for site in make_site(tmp_path, monkeypatch):
        (site.root / f"{site.tag}_pre.py").write_text(_PRELOAD)
        (site.root / f"{site.tag}_probe.py").write_text(_PROBE.format(preload=f"{site.tag}_pre"))
        yield site


def _launch(site: Site, nprocs: int) -> list[list[int]]:
    with spawn_with_plugins(
        f"{site.tag}_probe:probe",
        nprocs=nprocs,
        namespace=site.ns,
        start_method="forkserver",
        preload=(f"{site.tag}_pre",),
    ) as group:
        return list(group.results(timeout=60))


@pytest.mark.skipif(sys.platform != "linux", reason="a warm server's fork loop is Linux's")
def test_no_warm_worker_walks_the_mapping_registry_for_a_dict(site: Site) -> None:
    """Forked on request (the first launch) and a spare's worker (the second) alike."""
    first = _launch(site, 2)
    time.sleep(0.5)  # its spares are forked while it idles
    second = _launch(site, 2)
    assert first + second == [[]] * 4, "a warm worker asked abc whether a dict is a Mapping"
