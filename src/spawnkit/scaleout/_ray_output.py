"""A Ray rank's stdout and stderr, captured in its actor and handed to the driver.

Ray forwards output asynchronously from log files, and a short entry's lines were lost when the
driver killed the actor.  Here fds 1 and 2 go to pipes drained into a bounded buffer the driver
collects, so every line prints before the group reports done.  Standard library only.
"""

from __future__ import annotations

import os
import select
import sys
import threading

__all__ = ["MAX_BUFFERED", "Capture"]

MAX_BUFFERED = 4 * 1024 * 1024
"""Bytes per stream kept between two takes by the driver; older output is dropped (and said)."""


class Capture:
    """Redirects fds 1 and 2 of this process to pipes and keeps what arrives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, str] = {}
        self._data: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._dropped: dict[str, int] = {"stdout": 0, "stderr": 0}

    def start(self) -> None:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            stream = getattr(sys, name, None)
            try:
                if stream is not None:
                    stream.flush()
                r, w = os.pipe()
                os.dup2(w, fd)
                os.close(w)
                os.set_blocking(r, False)
                self._fds[r] = name
                if stream is not None and stream.fileno() == fd:
                    stream.reconfigure(line_buffering=True)
            except (OSError, ValueError, AttributeError):
                continue  # that stream stays with Ray's log files
        threading.Thread(target=self._drain, name="spawnkit-output", daemon=True).start()

    def take(self, *, final: bool = False) -> dict[str, bytes]:
        """What arrived since the last take; ``final``: flush Python's streams and read all."""
        if final:
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name, None)
                try:
                    if stream is not None:
                        stream.flush()
                except (OSError, ValueError):
                    pass
        with self._lock:
            if final:
                for fd in list(self._fds):
                    while self._read(fd):
                        pass
            out: dict[str, bytes] = {}
            for name, data in self._data.items():
                dropped, self._dropped[name] = self._dropped[name], 0
                note = f"[spawnkit: {dropped} bytes of {name} dropped]\n" if dropped else ""
                if data or note:
                    out[name] = note.encode() + bytes(data)
                data.clear()
            return out

    def _drain(self) -> None:
        while self._fds:
            try:
                ready, _, _ = select.select(list(self._fds), [], [], 1.0)
            except (OSError, ValueError):
                return
            with self._lock:
                for fd in ready:
                    self._read(fd)

    def _read(self, fd: int) -> bool:
        """One read of ``fd`` into its buffer (lock held); False when nothing was there."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            return False
        buf = self._data[self._fds[fd]]
        buf += chunk
        excess = len(buf) - MAX_BUFFERED
        if excess > 0:
            del buf[:excess]
            self._dropped[self._fds[fd]] += excess
        return True
