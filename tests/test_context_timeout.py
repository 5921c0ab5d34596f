"""``get_context(timeout=)`` bounds the fork server's start, and says so when it cannot.

With ``"spawn"`` or ``"fork"`` (no server) it was accepted and dropped: a caller meaning a bound
on each child's bootstrap got none, unsaid.  With ``"forkserver"``, ``timeout=-1`` killed the
server as "stuck starting up ... raise ready_timeout" and ``timeout="5"`` was a bare
``TypeError``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

import spawnkit
from spawnkit.errors import ConfigError
from spawnkit.namespace import Namespace
from spawnkit.protocol import warm


@pytest.fixture
def ns() -> Iterator[Namespace]:
    tag = f"ctt{uuid.uuid4().hex[:8]}"
    yield Namespace(tag, tag.upper())
    warm.shutdown_forkservers()


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_timeout_for_a_context_without_a_server_is_refused(ns: Namespace, method: str) -> None:
    with pytest.raises(ConfigError, match=rf"get_context\('{method}', timeout=30\): .* no server"):
        spawnkit.get_context(method, namespace=ns, timeout=30)


@pytest.mark.parametrize("value", [-1, 0, "5", math.nan, math.inf, True])
def test_a_forkserver_timeout_that_is_no_bound_is_refused_before_the_server(
    ns: Namespace, value: Any
) -> None:
    before = _children()
    with pytest.raises(ConfigError, match=r"get_context\(timeout=") as info:
        spawnkit.get_context("forkserver", namespace=ns, timeout=value)
    assert info.value.setting == "timeout"
    assert _children() - before == set(), "a fork server was started before the refusal"


def test_a_forkserver_timeout_still_bounds_its_start(ns: Namespace) -> None:
    """The control: a number of seconds (or None) is the server's start bound, as before."""
    ctx = spawnkit.get_context("forkserver", namespace=ns, timeout=60)
    assert psutil.pid_exists(ctx.Process._spawnkit_server.pid)
