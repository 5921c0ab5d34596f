"""A warm worker reaches its entry after one write to its report pipe, not one per stage.

Each write wakes the launcher, whose reading takes a CPU from the starting worker on a busy
machine (~0.1 ms each, a twentieth of a trivial warm start).  What may block still goes out
at once (a stage that imports, unpickles or runs code of others: ``test_cli_live`` sees a
rank stuck in ``resolve_entry`` named there); what cannot is held for the next message.
Counted as the kernel counts them (``/proc/self/io``: a forked process starts at zero).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins
from spawnkit.launch.specs import build_spec
from spawnkit.protocol import messages as proto

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/io"), reason="counts writes in /proc/self/io (Linux)"
)

_PROBE = """
def writes():
    with open("/proc/self/io") as f:  # at the entry's start: what the start wrote
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscw"])
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for site in make_site(tmp_path, monkeypatch):
        (site.root / f"{site.tag}_writes.py").write_text(_PROBE)
        yield site


def test_a_warm_worker_writes_its_report_once_before_its_entry(site: Site) -> None:
    """A spare's worker writes its process name twice (``_fork_loop._rename``) and its report
    once (HELLO, each stage's pair, READY and the entry's STARTED); the server's first worker
    to reach its entry also sends the pages it wrote (``_prefault``).  Before, every STARTED
    was written at once: four report writes before the entry."""
    module = f"{site.tag}_writes"
    seen = []
    for _ in range(4):  # the first learns the pages; later ones are spares' (or forked)
        with spawn_with_plugins(
            f"{module}:writes",
            nprocs=2,
            namespace=site.ns,
            start_method="forkserver",
            preload=(module,),
        ) as group:
            seen += group.results(timeout=60)
    assert all(writes <= 4 for writes in seen), seen
    assert min(seen) <= 3, seen  # one that neither learned nor was forked on request


def test_only_stages_that_cannot_block_are_held() -> None:
    """``arm_parent_death`` of a forked worker, an empty ``materialize_payload`` and a
    ``resolve_entry`` that only reads an imported module are held; a payload to unpickle, an
    entry module to import, a spawned worker's parent-death arming go out at once."""
    from spawnkit.protocol.child import _quiet_stages

    named = _quiet_stages(build_spec("os.path:join", None), forked=True)
    assert named("arm_parent_death") and named("materialize_payload")
    assert named("resolve_entry")  # os.path is imported and holds join
    assert not named("entry") and not named("load_plugins")
    spawned = _quiet_stages(build_spec("os.path:join", None), forked=False)
    assert not spawned("arm_parent_death")
    with_payload = _quiet_stages(build_spec("os.path:join", [1, 2]), forked=True)
    assert not with_payload("materialize_payload")
    missing = "spawnkit_test_never_imported_module"
    assert missing not in sys.modules
    unimported = build_spec("os.path:join", None).replace(entry=f"{missing}:main")
    assert not _quiet_stages(unimported, forked=True)("resolve_entry")
    assert not _quiet_stages(build_spec("os.path:no_such_name", None), forked=True)(
        "resolve_entry"
    )  # a module __getattr__ may run: at once


def test_a_held_started_goes_out_with_the_next_loud_message() -> None:
    import multiprocessing

    from spawnkit.protocol.child import _Reporter

    reader, writer = multiprocessing.Pipe(duplex=False)
    reporter = _Reporter(writer)
    reporter.quiet = lambda stage: stage == "materialize_payload"
    try:
        reporter.stage_started("materialize_payload")
        reporter.stage_finished("materialize_payload", 0.0)
        assert not reader.poll(0.05), "a quiet stage's STARTED was written at once"
        reporter.stage_started("resolve_entry")
        assert [reader.recv() for _ in range(3)] == [
            proto.StageStarted("materialize_payload"),
            proto.StageFinished("materialize_payload", 0.0),
            proto.StageStarted("resolve_entry"),
        ]
    finally:
        reporter.close()
        reader.close()
