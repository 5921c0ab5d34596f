"""The raw ``os.fork`` floor: a fresh interpreter holding only the worker module forks children.

#23 measures warm workers against "a raw ``os.fork`` of a process holding the
same modules".  Forking the benchmark process itself is not that: it holds
torch, Ray, spawnkit and the peers' state, so its fork copies a far larger
page table and the floor reads several times too high (a trivial fork of the
bench process took 20 ms where a fork of a bare interpreter takes 0.4 ms, and
the warm/raw-fork rows passed that should not have).  So the forking process
here is a new interpreter that imports the worker module and nothing else of
ours, and each child writes its ``CLOCK_MONOTONIC`` stamp to a pipe where its
entry would run: the same clock the parent reads right before its request.

Given a pickled ``ProcessSpec`` (``spec=``), the forking interpreter also imports
``spawnkit.spec`` and each child unpickles that spec before it writes its stamp: the least
a warm-start protocol that forks on request must do for a worker (fork, hand it its spec),
with nothing of spawnkit's protocol around it.  ``warm_split`` prints it as that floor; a spare
forked ahead of the request does not pay its fork there.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import time

__all__ = ["RawForker"]

#: The forking interpreter: import the module (and, given a spec, ``spawnkit.spec``), say
#: ready, then per request (n, spec bytes) fork n children that each unpickle the spec, if
#: any, and write their stamp; then reap them.  stdin EOF ends it.
_SCRIPT = """
import os, struct, sys, time
__import__(sys.argv[1])
if sys.argv[2:] == ["spec"]:
    import pickle
    __import__("spawnkit.spec")
out = sys.stdout.fileno()
os.write(out, b"R")
while True:
    got = os.read(0, 8)
    if len(got) < 8:
        break
    count, size = struct.unpack("<II", got)
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            raise SystemExit(0)
        data += chunk
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            if data:
                pickle.loads(data)
            os.write(out, struct.pack("<d", time.monotonic()))
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
"""

_STAMP = struct.calcsize("<d")


class RawForker:
    """A forking interpreter that holds ``module``; close it (``contextlib.closing``) when done."""

    def __init__(self, module: str, timeout: float, spec: bytes | None = None) -> None:
        self._timeout = timeout
        self._spec = spec or b""
        self._what = f"raw os.fork of a process holding {module}" + (
            " (children unpickle a spec)" if spec else ""
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, module, *(["spec"] if spec else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._read(1, time.monotonic() + timeout)  # the import is not part of any fork

    def fork(self, n: int) -> list[float]:
        """Seconds from the request until each of ``n`` children ran, in arrival order."""
        assert self._proc.stdin is not None
        t0 = time.monotonic()
        self._proc.stdin.write(struct.pack("<II", n, len(self._spec)) + self._spec)
        self._proc.stdin.flush()
        data = self._read(n * _STAMP, t0 + self._timeout)
        return [s - t0 for (s,) in struct.iter_unpack("<d", data)]

    def _read(self, size: int, deadline: float) -> bytes:
        assert self._proc.stdout is not None
        fd, data = self._proc.stdout.fileno(), b""
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._proc.kill()  # hung: nothing it could still send is wanted
                self.close()
                raise TimeoutError(f"{self._what}: no answer within {self._timeout:g} s")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                assert self._proc.stderr is not None
                err = self._proc.stderr.read().decode(errors="replace")  # ends as it exits
                self.close()
                raise RuntimeError(
                    f"{self._what}: the forking interpreter exited with code "
                    f"{self._proc.returncode}:\n{err.strip()}"
                )
            data += chunk
        return data

    def close(self) -> None:
        """End the interpreter (EOF on its stdin), killing it if it does not end in 5 s."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass  # it died already; wait() below collects it
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
