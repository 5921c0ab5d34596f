"""Fault injection: every bootstrap stage and the entry, times every way a worker can fail.

Faults come from real distributions (platform ``init_backend``, plugin
callback, hook-target import, payload ``__reduce__`` reconstructor, entry
module import, entry function) and are switched on in rank 1 only, through
the child's environment.  For each case the parent must raise the right
typed error naming rank 1 and the stage, within the configured timeouts,
and leave no process of the group behind.

The full matrix runs under spawn/multiprocessing; the other three launch
modes run a diagonal of it (every kind once, each at a different stage),
which keeps the whole file affordable on two cores.

Under forkserver the platform, plugin and hook stages run once, in the
pre-bootstrapped server, for every rank: a fault there cannot hit a worker.
It fails the launch itself with a ``ForkServerError`` naming the stage and
the server, never a hang; the full set of kinds runs at those stages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _launcher_support import KINDS, STAGES, Site, assert_group_gone, fault_env, gone, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import (
    BootstrapTimeoutError,
    ChildError,
    ChildExitedError,
    ChildRaisedError,
    EntryTimeoutError,
    ForkServerError,
)

READY_TIMEOUT = 4.0
JOIN_TIMEOUT = 10.0
GRACE = 0.5
# Teardown after the failure: grace, SIGTERM + grace, then SIGKILL; plus a stack dump on hangs.
SLACK = 3 * GRACE + 4.0

_FULL = [
    pytest.param(stage, kind, "spawn", "multiprocessing", id=f"spawn-mp-{stage}-{kind}")
    for stage in STAGES
    for kind in KINDS
]
_DIAGONAL = [
    pytest.param(
        STAGES[(i + shift) % len(STAGES)],
        kind,
        method,
        context,
        id=f"{method}-{context}-{STAGES[(i + shift) % len(STAGES)]}-{kind}",
    )
    for shift, (method, context) in enumerate(
        [
            ("forkserver", "multiprocessing"),
            ("spawn", "multiprocess"),
            ("forkserver", "multiprocess"),
        ]
    )
    for i, kind in enumerate(KINDS)
]

_INHERITED = ("initialize_platform", "load_plugins", "apply_hooks")
_SERVER = [
    pytest.param(stage, kind, id=f"forkserver-server-{stage}-{kind}")
    for stage in _INHERITED
    for kind in KINDS
]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _check(err: ChildError, stage: str, kind: str) -> None:
    assert err.rank == 1, str(err)
    assert err.stage == stage, str(err)
    text = str(err)
    assert text.startswith("rank 1 (pid "), text
    if kind == "raise":
        assert isinstance(err, ChildRaisedError)
        assert f"injected fault in {stage}" in err.traceback_text
        assert err.child_exception is not None
    elif kind == "exit":
        assert isinstance(err, ChildExitedError) and err.exit_code == 3
        assert "sys.exit(3)" in text
    elif kind == "oexit":
        assert isinstance(err, ChildExitedError) and err.exit_code == 9
        assert "os._exit(9)" in text
    elif kind == "sigkill":
        assert isinstance(err, ChildExitedError) and err.signal_name == "SIGKILL"
        assert "out-of-memory" in text
    elif kind == "segv":
        assert isinstance(err, ChildExitedError) and err.signal_name == "SIGSEGV"
        assert "Segmentation fault" in text and "ctypes" in text
    elif kind == "hang":
        # The join_timeout that expires in the entry is the entry's, not the bootstrap's.
        expected = EntryTimeoutError if stage == "entry" else BootstrapTimeoutError
        assert type(err) is expected, text
        assert "time.sleep" in text or "in fault" in text  # the stack dump of the stuck worker


def _check_server(err: ForkServerError, stage: str, kind: str) -> None:
    text = str(err)
    assert err.stage == stage, text
    assert f"warm-start fork server (pid {err.server_pid})" in text, text
    if kind == "raise":
        assert f"injected fault in {stage}" in err.traceback_text, text
    elif kind == "exit":
        assert "sys.exit(3)" in text, text
    elif kind == "oexit":
        assert "exited with code 9" in text, text
    elif kind == "sigkill":
        assert "killed by SIGKILL" in text, text
    elif kind == "segv":
        assert "killed by SIGSEGV" in text and "Segmentation fault" in text, text
    elif kind == "hang":
        assert ("did not finish starting" in text and "time.sleep" in text) or "in fault" in text


@pytest.mark.parametrize(("stage", "kind"), _SERVER)
def test_fault_in_the_server(site: Site, stage: str, kind: str) -> None:
    started = time.monotonic()
    with pytest.raises(ForkServerError) as info:
        spawn_with_plugins(
            site.entry(),
            site.box(7),
            nprocs=2,
            namespace=site.ns,
            start_method="forkserver",
            env=fault_env(stage, kind, rank=1),
            ready_timeout=READY_TIMEOUT,
            grace_period=GRACE,
        )
    elapsed = time.monotonic() - started
    _check_server(info.value, stage, kind)
    assert elapsed < READY_TIMEOUT + SLACK, f"took {elapsed:.1f} s"
    assert gone(info.value.server_pid or 0), "the failed server is still running"


@pytest.mark.parametrize(
    ("stage", "kind", "method", "context"),
    _FULL
    + [p for p in _DIAGONAL if not (p.values[2] == "forkserver" and p.values[0] in _INHERITED)],
)
def test_fault(site: Site, stage: str, kind: str, method: str, context: str) -> None:
    hang_in_entry = kind == "hang" and stage == "entry"
    join_timeout = READY_TIMEOUT + 2.0 if hang_in_entry else JOIN_TIMEOUT
    started = time.monotonic()
    with (
        pytest.raises(ChildError) as info,
        spawn_with_plugins(
            site.entry(),
            site.box(7),
            nprocs=2,
            namespace=site.ns,
            start_method=method,
            context=context,
            env=fault_env(stage, kind, rank=1),
            ready_timeout=READY_TIMEOUT,
            join_timeout=join_timeout,
            grace_period=GRACE,
        ) as group,
    ):
        group.join()
    elapsed = time.monotonic() - started
    _check(info.value, stage, kind)
    limit = (join_timeout if hang_in_entry else READY_TIMEOUT) + SLACK
    assert elapsed < limit, f"took {elapsed:.1f} s (limit {limit:.1f} s)"
    assert_group_gone(group)
    # The failure is sticky: asking again raises the same error, without waiting.
    with pytest.raises(type(info.value)):
        group.join(timeout=0)
