"""Spares that own, before their request, the pages a warm worker writes.

A warm worker is a fork of its server, and its first write to each page it still shares with
the server is a copy-on-write fault: about 4 us each on the 2-core machine.  The worker
path (unpickling the spec, the stages, the report) takes about 600 of them after its request
(a trivial worker here), 2.5 ms of a 5 ms warm start, where the raw ``os.fork`` it is
measured against takes 0.6 ms in all.  A spare is forked while its server is idle,
ahead of its request (``_fork_loop``), so it can pay for those pages then:
``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14) makes them the spare's own without changing a
byte of them, and the worker it becomes runs its path without those faults::

    server ──request + learn pipe──▶ first worker: at its entry, reads /proc/self/pagemap,
       ◀──────── the ranges it writes ─┘          writes a length, (start, length) pairs
    server keeps the ranges inside its own writable mappings
    server ──fork──▶ spare: populates them, then waits for its request as before

Learned once per server, from the first worker that reaches its entry (one that fails
before has its pipe closed empty, and the next request learns instead); the spares forked
before that are let go and forked again.  The price, paid only where the kernel supports
it: the learning worker's entry starts 1 to 7 ms later, once (reading its page map, trivial
and torch servers here), and each idle spare holds those pages (5 to 7 MB here) until it is
handed a request.  Populating costs the CPU the faults would have (3 to 4 ms a spare here:
the copies, not the traps), so it helps a launch that finds its spares done, after idle,
and not one that follows a burst at once.  Nothing here may fail a worker, a spare or the
server: any error (no ``/proc``, an older kernel, a range since unmapped) leaves them as
they were, slower, never wrong.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import struct
import sys
import time
from typing import Any

__all__ = ["Learner", "OwnPages", "arm", "populate", "receive", "report", "written"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MADV_POPULATE_WRITE = 23  # <linux/mman.h>; not in the mmap module of Python 3.10 to 3.13
_RANGE = struct.Struct("<QQ")  # start address, length in bytes
_SIZE = struct.Struct("<I")  # a report's length first: a forked copy of the pipe may stay open
_MOST_RANGES = 4000  # 64,004 bytes with the length: one write an empty pipe takes whole
_MOST_BYTES = 16 << 20  # a spare never holds more than this of its own (8 spares: 128 MiB)
# /proc/self/pagemap: one little-endian 64-bit entry per page; its last byte holds bit 63
# (present) and bit 56 (exclusively mapped: copied, or written fresh, by this process).
_MINE = bytes(1 if b & 0x81 == 0x81 else 0 for b in range(256))
_RUNS = re.compile(b"\x01+")

_armed: int | None = None  # in a learning worker: the write end of its server's learn pipe
_madvise: Any = None  # the server's ctypes madvise, inherited by its spares; False: unusable


class Learner:
    """The server's side: one learn pipe at a time, until a worker's report is kept.

    The server watches ``fd`` (the read end) while a worker holds the write end; ``pages``
    is ``None`` until something was learned, ``[]`` where nothing can be."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.data = b""
        self.pages: list[tuple[int, int]] | None = None

    def start(self) -> tuple[int, int] | None:
        """A learn pipe (read, write) for the next worker, unless learned or a worker is
        learning now."""
        if self.pages is not None or self.fd is not None:
            return None
        if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/pagemap"):
            self.pages = []
            return None
        try:
            pipe = os.pipe()
        except OSError:  # out of descriptors: the request is served, a later one learns
            return None
        os.set_blocking(pipe[0], False)
        self.fd = pipe[0]
        return pipe

    def read(self, fd: int) -> bool:
        """Take what arrived on ``fd``; True once the report is whole, or at EOF (then
        :meth:`finish`).  Not only EOF: a process the worker forked keeps the pipe open."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        self.data += chunk
        return not chunk or self._whole()

    def _whole(self) -> bool:
        have = len(self.data) - _SIZE.size
        return have >= 0 and have >= _SIZE.unpack_from(self.data)[0]

    def finish(self) -> bool:
        """Close ``fd``; whether pages were learned (an empty report: the worker ended before
        its entry, and the next request's worker learns instead)."""
        assert self.fd is not None
        os.close(self.fd)
        self.fd = None
        if self._whole():
            (size,) = _SIZE.unpack_from(self.data)
            try:
                self.pages = receive(self.data[_SIZE.size : _SIZE.size + size])
            except Exception:  # an unreadable /proc: nothing to populate, the server serves on
                self.pages = []
        self.data = b""
        return bool(self.pages)


class OwnPages:
    """The server's own copy-on-write faults, taken back while it idles.

    Each fork (of a spare) leaves every page the server holds shared with the child, so the
    server's own next writes fault: about 90 faults between a request's ``accept`` and the
    spare's hand-off, on the path of the start the caller waits for (a trivial server on the
    2-core machine, ~0.1 ms).  The pages it writes between two forks are the same each time.
    Learned once: with its spares ready it forks a *witness* that holds every page as it was
    and only waits (``settle``); at its first idle moment after the next request the pages it
    holds alone are those it wrote since (``idle``, its own ``written``), and the witness is
    let go (reaped as any child: ``reaped``).  From then on, each time it has forked and is
    about to wait with its spares ready, it makes those pages its own again (``settle``,
    ``populate``); the originals stay the spares', whose writes to them do not fault either.
    Any error leaves it as it was: slower, never wrong (``populate`` never changes a byte)."""

    def __init__(self) -> None:
        self.pages: list[tuple[int, int]] | None = None  # None: not learned yet
        self.witness: int | None = None  # its pid, until reaped
        self.pipe: int | None = None  # our end of its pipe, until it is let go
        self.served = self.forked = False  # since the witness's fork; since the last settle

    def settle(self, quiet: bool) -> None:
        """About to wait with the spares ready: fork the witness (once the server's one-off
        work is done: ``quiet``, the workers' pages learned), or take the pages back."""
        if self.pages is None and self.witness is None:
            if not quiet:
                return
            self.pages = [] if not os.path.exists("/proc/self/pagemap") or not _usable() else None
            if self.pages is None:
                self._fork_witness()
        elif self.forked and self.pages:  # inside its private writable mappings as they are now
            populate(receive(b"".join(_RANGE.pack(*page) for page in self.pages)))
        self.forked = False

    def _fork_witness(self) -> None:
        try:
            r, w = os.pipe()
        except OSError:
            self.pages = []
            return
        try:
            pid = os.fork()
        except OSError:
            self.pages = []
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # holds the pages as they are, and every descriptor of ours but one: none
            try:
                signal.set_wakeup_fd(-1)
                os.closerange(0, r)
                os.closerange(r + 1, os.sysconf("SC_OPEN_MAX"))  # the limit now
                os.read(r, 1)  # EOF: let go, or the server is gone
            finally:
                os._exit(0)
        os.close(r)
        self.witness, self.pipe, self.served = pid, w, False

    def idle(self) -> None:
        """Learn, once a request was served since the witness's fork; then let it go."""
        if self.pipe is None or not self.served:
            return
        try:
            pages = receive(written()[: _MOST_RANGES * _RANGE.size])
        except Exception:  # an unreadable /proc: nothing to take back
            pages = []
        self.pages = pages if sum(size for _start, size in pages) <= _OWN_MOST else []
        self._let_go()
        self.forked = True  # the witness's fork: taken back before the next wait

    def reaped(self, pid: int) -> bool:
        """Whether ``pid``, reaped by the server, was its witness."""
        if self.witness is None or self.witness != pid:
            return False
        if self.pages is None:  # killed before it was let go: learn nothing
            self.pages = []
        self._let_go()
        self.witness = None
        return True

    def _let_go(self) -> None:
        if self.pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self.pipe)
            self.pipe = None

    def stop(self) -> None:
        """As the server exits: the witness, if still there, is let go and reaped."""
        self._let_go()
        pid, self.witness = self.witness, None
        if pid is None:
            return
        with contextlib.suppress(ChildProcessError):  # it exits at the EOF; bounded all the same
            for _ in range(200):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
                time.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


#: The most the server takes back after its forks (4 MiB: 2.4 MiB learned on a trivial server).
_OWN_MOST = 4 << 20


def arm(fd: int) -> None:
    """In the worker handed the learn pipe: report at the entry (:func:`report`)."""
    global _armed
    os.set_inheritable(fd, False)  # received with the request: not for the entry's children
    _armed = fd


def report() -> None:
    """At the entry's start (after READY went out): the pages written so far, to the server."""
    global _armed
    fd, _armed = _armed, None
    if fd is None:
        return
    try:
        body = written()[: _MOST_RANGES * _RANGE.size]
        os.write(fd, _SIZE.pack(len(body)) + body)
    except Exception:
        pass  # the server learns from a later worker; this one must reach its entry
    finally:
        os.close(fd)


def written() -> bytes:
    """(start, length) pairs of this process's private writable pages that it holds alone."""
    with open("/proc/self/maps", "rb") as f:
        ranges = _writable(f.read())
    out = []
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for lo, hi in ranges:
            entries = os.pread(fd, (hi - lo) // _PAGE * 8, lo // _PAGE * 8)
            for run in _RUNS.finditer(entries[7::8].translate(_MINE)):
                out.append(_RANGE.pack(lo + run.start() * _PAGE, (run.end() - run.start()) * _PAGE))
    finally:
        os.close(fd)
    return b"".join(out)


def receive(data: bytes) -> list[tuple[int, int]]:
    """The server's side, at the learn pipe's EOF: the reported ranges that lie inside its own
    private writable mappings (what a spare forked from it shares), capped; ``[]`` where
    nothing can be populated."""
    if not data or not _usable():
        return []
    with open("/proc/self/maps", "rb") as f:
        mine = _writable(f.read())
    reported = sorted(_RANGE.iter_unpack(data[: len(data) - len(data) % _RANGE.size]))
    kept, total, i = [], 0, 0
    for start, size in reported:
        end = start + size
        while i < len(mine) and mine[i][1] <= start:
            i += 1
        j = i
        while j < len(mine) and mine[j][0] < end and total < _MOST_BYTES:
            lo, hi = max(start, mine[j][0]), min(end, mine[j][1])
            hi = min(hi, lo + _MOST_BYTES - total)
            kept.append((lo, hi - lo))
            total += hi - lo
            j += 1
    return kept


def populate(ranges: list[tuple[int, int]]) -> None:
    """In a spare, before it waits for its request: make ``ranges`` its own pages."""
    if not ranges or not _madvise:
        return
    for start, size in ranges:
        _madvise(start, size, _MADV_POPULATE_WRITE)  # an error leaves that range shared


def _writable(maps: bytes) -> list[tuple[int, int]]:
    """The private writable mappings of a ``/proc/<pid>/maps`` text, by address."""
    found = []
    for line in maps.splitlines():
        fields = line.split(None, 2)
        if len(fields) > 1 and fields[1] == b"rw-p":
            lo, _, hi = fields[0].partition(b"-")
            found.append((int(lo, 16), int(hi, 16)))
    return found


def _usable() -> bool:
    """Whether this kernel populates on request: tried once on a page of our own."""
    global _madvise
    if _madvise is None:
        _madvise = False
        try:
            import ctypes
            import mmap

            madvise = ctypes.CDLL(None, use_errno=True).madvise
            madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            madvise.restype = ctypes.c_int
            with mmap.mmap(-1, _PAGE) as page:
                anchor = ctypes.c_char.from_buffer(page)
                ok = madvise(ctypes.addressof(anchor), _PAGE, _MADV_POPULATE_WRITE) == 0
                del anchor  # the mapping cannot close while a ctypes object exports it
            if ok:
                _madvise = madvise
        except Exception:
            pass
    return bool(_madvise)
