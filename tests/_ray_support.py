"""What the Ray test modules share: one lock, so xdist workers never start two clusters at once."""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``; the test fails after ``timeout`` s of waiting."""
    fh = open(path, "a+")  # noqa: SIM115 - held for the whole block
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test worker held {path} for over {timeout:.0f}s")
                time.sleep(0.2)
        yield
    finally:
        fh.close()
