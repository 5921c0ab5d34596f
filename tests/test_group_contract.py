"""One group contract, checked the same way against the local group and the Ray group.

``GroupContract`` (``spawnkit.launch.group``) gives each part one meaning:
the first failure is kept, tears the group down and is raised again by every
later wait; ``join`` is False while ranks run and False at once for stopped
work; ``results(timeout)`` raising leaves the group running; leaving the
``with`` block terminates, and terminating again is harmless.  The Ray case
starts a real local cluster (one at a time, under the Ray tests' lock).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import spawnkit
from _ray_support import local_ray_cluster
from spawnkit.errors import ChildError, ChildExitedError, ChildRaisedError, EntryTimeoutError
from spawnkit.launch.group import GroupContract
from spawnkit.spec import NamespaceConfig
from spawnkit.testing import write_distribution

READY_S = 90.0
WAIT_S = 120.0

APP_SRC = """
import time
from spawnkit.bootstrap import current_spec

def ok(payload=None):
    return current_spec().rank * 10

def boom(payload=None):
    if current_spec().rank == 1:
        raise ValueError("rank 1 fails on purpose")
    time.sleep(60)

def sleepy(payload=None):
    time.sleep(60)
"""

Start = Callable[[str], GroupContract]
# The actors import the spawnkit this test imported (a runtime env's PYTHONPATH replaces theirs).
_SPAWNKIT_ROOT = str(Path(spawnkit.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("contract-site")
    write_distribution(root, "contract-app", "1.0", modules={"contract_app": APP_SRC})
    return root


def _local(site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    from spawnkit import spawn_with_plugins

    monkeypatch.syspath_prepend(str(site))  # spawn children start with the parent's sys.path
    ns = NamespaceConfig.build("skcontract", "SKCONTRACT")

    def start(entry: str) -> GroupContract:
        return spawn_with_plugins(
            f"contract_app:{entry}", nprocs=2, namespace=ns, ready_timeout=READY_S
        )

    yield start


def _ray(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Start]:
    pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')
    import spawnkit.scaleout.ray as skray

    with local_ray_cluster(tmp_path_factory, "skct-", 600.0):
        ns = NamespaceConfig.build("skcontract", "SKCONTRACT")

        def start(entry: str) -> GroupContract:
            return skray.spawn_on_ray(
                f"contract_app:{entry}",
                nprocs=2,
                namespace=ns,
                env={"PYTHONPATH": os.pathsep.join([str(site), _SPAWNKIT_ROOT])},
                ready_timeout=READY_S,
            )

        yield start


@pytest.fixture(
    params=["local", pytest.param("ray", marks=pytest.mark.xdist_group("spawnkit-ray"))]
)
def start(
    request: pytest.FixtureRequest,
    site: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Start]:
    if request.param == "local":
        yield from _local(site, monkeypatch)
    else:
        yield from _ray(site, tmp_path_factory)


def test_a_group_that_succeeds(start: Start) -> None:
    with start("ok") as group:
        assert isinstance(group, GroupContract)
        assert group.ranks == [0, 1] and group.world_size == 2
        assert len(group.wait_ready(timeout=READY_S)) == 2
        assert group.results(timeout=WAIT_S) == [0, 10]
        assert group.join(timeout=WAIT_S) is True
        assert group.failure is None
    assert group.join(timeout=0) is True  # after the with block: the work was done


def test_the_first_failure_is_kept_and_raised_by_every_later_wait(start: Start) -> None:
    with start("boom") as group:
        with pytest.raises(ChildRaisedError, match="rank 1 fails on purpose") as first:
            group.results(timeout=WAIT_S)
        assert first.value.rank == 1
        assert group.failure is first.value
        waits: list[Callable[[], object]] = [
            group.wait_ready,
            group.join,
            group.results,
            lambda: group.join(timeout=0),
        ]
        for wait in waits:
            with pytest.raises(ChildError) as again:
                wait()
            assert again.value is first.value  # the same object, not a new error


def test_waits_are_bounded_and_stopped_work_is_not_done(start: Start) -> None:
    with start("sleepy") as group:
        group.wait_ready(timeout=READY_S)
        assert group.join(timeout=0.5) is False
        with pytest.raises(EntryTimeoutError):
            group.results(timeout=0.5)
        assert group.failure is None  # a call's own timeout leaves the group running
        assert group.join(timeout=0.1) is False
    # Leaving the block terminated it; terminating again is harmless.
    group.terminate()
    group.close()
    began = time.monotonic()
    assert group.join() is False  # at once: stopped work is not done work
    assert time.monotonic() - began < 10.0
    with pytest.raises(ChildExitedError, match="terminate"):
        group.results()


class _Toy(GroupContract):
    """The smallest group: enough to pin what ``_fail`` means for every implementation."""

    def __init__(self) -> None:
        self.run_id = "toy"
        self.stopped: list[ChildError] = []
        self.terminated = 0

    def _stop_for(self, err: ChildError) -> None:
        self.stopped.append(err)
        self.terminate()

    def wait_ready(self, timeout: float | None = None) -> list[Any]:
        self._raise_first()
        return []

    def join(self, timeout: float | None = None) -> bool:
        self._raise_first()
        return True

    def results(self, timeout: float | None = None) -> list[Any]:
        self._raise_first()
        return []

    def terminate(self) -> None:
        self.terminated += 1

    @property
    def world_size(self) -> int:
        return 0


def test_fail_returns_the_first_failure_and_never_replaces_it() -> None:
    toy = _Toy()
    first, second = ChildError("first", rank=0), ChildError("second", rank=1)
    assert toy._fail(first) is first  # returned, for ``raise self._fail(...)``
    assert toy._fail(second) is first  # the first failure wins
    assert toy.stopped == [first] and toy.terminated == 2 and toy.failure is first
    with toy, pytest.raises(ChildError) as info:
        toy.results()
    assert info.value is first and toy.terminated == 3  # leaving the block terminated it
