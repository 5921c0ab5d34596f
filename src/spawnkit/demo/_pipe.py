"""The seed's ``pipe_writer``: one connection per scheduler back to the launching process.

``spawn_with_plugins`` gives every rank the same template spec and has no
per-rank extras, so the pipe cannot ride in the spec itself; instead the
parent listens on a Unix socket whose address travels in ``spec.env``, and
each worker connects to it once, after its bootstrap, getting exactly the
``Connection`` the seed's ``run_scheduler_process`` writes to.  The
handshake uses the multiprocessing authkey that spawned children inherit,
so no secret travels in the environment.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from multiprocessing.connection import wait as mp_wait
from typing import Any

__all__ = ["PIPE_ADDRESS_VAR", "PipeServer", "connect"]

PIPE_ADDRESS_VAR = "SPAWNKIT_DEMO_PIPE"


def connect() -> Connection | None:
    """In a worker: the pipe to the launcher, or None when launched without one."""
    address = os.environ.get(PIPE_ADDRESS_VAR)
    if not address:
        return None
    return Client(address, family="AF_UNIX")


class PipeServer:
    """Accepts one connection per rank and collects every message each one sends."""

    def __init__(self, nprocs: int) -> None:
        self._dir = tempfile.mkdtemp(prefix="spawnkit-demo-")
        self.address = os.path.join(self._dir, "pipe")
        self._listener = Listener(self.address, family="AF_UNIX", backlog=max(8, nprocs + 1))
        self._expected = nprocs
        self._conns: list[Connection] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="spawnkit-demo-pipe", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while len(self._conns) < self._expected and not self._stopping:
            try:
                conn = self._listener.accept()
            except Exception:  # a worker that died mid-handshake, or close()
                if self._stopping:
                    return
                continue
            with self._lock:
                self._conns.append(conn)

    def messages(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every message received, in arrival order per connection; waits at most ``timeout``.

        Called after the group has finished: each worker's connection is then
        closed, so reading to EOF ends promptly; the timeout bounds the case
        of a connection left open by a stuck process.
        """
        deadline = time.monotonic() + timeout
        self._thread.join(max(0.0, min(timeout, 1.0)))
        with self._lock:
            pending = list(self._conns)
        out: list[dict[str, Any]] = []
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for conn in mp_wait(pending, left):
                assert isinstance(conn, Connection)
                try:
                    out.append(conn.recv())
                except (EOFError, OSError):
                    pending.remove(conn)
        return out

    def close(self) -> None:
        self._stopping = True
        if self._thread.is_alive():
            # Unblock accept() with a connection of our own; it is discarded.
            with contextlib.suppress(Exception):
                Client(self.address, family="AF_UNIX").close()
            self._thread.join(2.0)
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.close()
        with contextlib.suppress(OSError):
            self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PipeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
