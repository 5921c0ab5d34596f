"""``spawnkit.cleanup(run_id, timeout=)`` is a number of seconds, or it is refused.

``timeout=nan`` never expired (every comparison with NaN is false): a process of the run that
ignores SIGTERM held ``cleanup()`` forever, and SIGKILL was never sent.  ``-1`` read as 0,
``"5"`` was a bare ``TypeError``.  A real process of the run, ignoring SIGTERM.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import spawnkit
from spawnkit.errors import ConfigError

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(120)"
)


@pytest.fixture
def run() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    run_id = f"ct-{uuid.uuid4().hex[:10]}"
    child = subprocess.Popen(
        [sys.executable, "-c", IGNORES_TERM],
        env=dict(os.environ, SPAWNKIT_RUN_ID=run_id),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    yield run_id, child
    child.kill()
    child.wait(30)


@pytest.mark.parametrize("value", [math.nan, -1, "5", None, math.inf])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_before_any_signal(
    run: tuple[str, subprocess.Popen[str]], value: Any
) -> None:
    run_id, child = run
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["result"] = spawnkit.cleanup(run_id, timeout=value)
        except Exception as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(20)  # before: nan waited for a SIGTERM the process ignores, forever
    assert not worker.is_alive(), f"cleanup(timeout={value!r}) still waiting after 20 s"
    assert isinstance(outcome.get("error"), ConfigError), outcome
    assert f"cleanup(timeout={value!r})" in str(outcome["error"])
    assert outcome["error"].setting == "timeout"
    assert child.poll() is None  # nothing was signalled


def test_a_number_of_seconds_ends_a_process_that_ignores_sigterm(
    run: tuple[str, subprocess.Popen[str]],
) -> None:
    """The control: SIGTERM, the bound, then SIGKILL."""
    run_id, child = run
    result = spawnkit.cleanup(run_id, timeout=1.0)
    assert result.ended == [child.pid] and result.survivors == []
    assert child.wait(30) == -9
