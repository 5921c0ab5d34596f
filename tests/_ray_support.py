"""What the Ray test modules share: one lock, so xdist workers never start two clusters at once,
and the one way a test module starts its local cluster under it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def local_ray_cluster(
    tmp_path_factory: pytest.TempPathFactory, prefix: str, lock_wait: float
) -> Iterator[Any]:
    """A 2-CPU local Ray cluster for one test module, under the shared lock; skips the module
    when Ray cannot start here.  ``RAY_ADDRESS`` is set aside meanwhile, and restored."""
    import ray

    lock = tmp_path_factory.getbasetemp().parent / "spawnkit-ray-cluster.lock"
    with file_lock(lock, lock_wait):
        # Short: Ray puts unix sockets under it, and their paths are length-limited.
        temp_dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None)
        saved = os.environ.pop("RAY_ADDRESS", None)
        try:
            ray.init(
                address="local",
                num_cpus=2,
                include_dashboard=False,
                configure_logging=False,
                log_to_driver=False,
                object_store_memory=80 * 1024 * 1024,
                _temp_dir=temp_dir,
            )
        except Exception as exc:  # pragma: no cover - environment-dependent
            shutil.rmtree(temp_dir, ignore_errors=True)
            if saved is not None:
                os.environ["RAY_ADDRESS"] = saved
            pytest.skip(f"cannot start a local Ray cluster here: {type(exc).__name__}: {exc}")
        try:
            yield ray
        finally:
            ray.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
            if saved is not None:
                os.environ["RAY_ADDRESS"] = saved
