"""Each rank's stdout and stderr reach the launcher's own streams whole lines at a time.

Shared descriptors interleave inside a line (``gpu_id=0Scheduler initialized! gpu_id=1``), so
each rank gets a pipe per stream and one thread per group copies whole lines (optionally
``[rank0]: ``).  Lines over :data:`MAX_LINE` are cut, and the launcher's stderr says so once
per stream; a partial last line is ended at close; the group waits for the pipes to close as
long as output still moves (up to :data:`DRAIN_S` without progress, :data:`DRAIN_MAX_S` in all),
and says so if some was left.  See docs/architecture.md.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import selectors
import signal
import sys
import threading
import time
from typing import Any

__all__ = ["DRAIN_MAX_S", "DRAIN_S", "MAX_LINE", "LineStream", "OutputRelay", "emit_lines"]

MAX_LINE = 4 * 1024 * 1024
"""Bytes of one line held while waiting for its newline; a longer line is written in pieces
(a JSON record of metrics is one line: 64 KiB, as it was, cut an 83 KB one in two)."""
DRAIN_S = 2.0
"""How long a finished group waits for its ranks' output pipes with no output moving."""
DRAIN_MAX_S = 60.0
"""How long it waits in all while output still moves (a slow ``| tee``, a paused terminal)."""

_write_lock = threading.Lock()  # one line at a time, across every group of this process


class LineStream:
    """One pipe of one rank: its fd, the launcher stream it goes to and the unfinished line."""

    def __init__(self, fd: int, target: str, prefix: bytes) -> None:
        self.fd = fd
        self.target = target
        self.prefix = prefix
        self.pending = b""
        self.cut = False  # a line over MAX_LINE was written in pieces (said once)

    def lines(self, data: bytes) -> bytes:
        """The complete lines in ``pending + data`` (prefixed); keeps the unfinished rest.

        A line ends at ``\n`` or at ``\r``: a progress bar (tqdm's, as a model's shards load)
        redraws its line with ``\r`` and ends it only when done, so it showed nothing until
        then.  Each state now shows once the next one begins (tqdm writes ``\r`` first), kept
        as a redraw: ``\r``, not a new line.  A ``\r`` that ends the data waits for the next
        byte, which may make it ``\r\n``.
        """
        text = self.pending + data
        end = len(text) - 1 if text.endswith(b"\r") else len(text)
        cut = max(text.rfind(b"\n", 0, end), text.rfind(b"\r", 0, end)) + 1
        whole, self.pending = text[:cut], text[cut:]
        out = []
        for line in whole.splitlines(keepends=True):
            body = line.rstrip(b"\r\n")
            if line.endswith(b"\n"):
                out.append(self.prefix + body + b"\n")
            elif body:  # a redraw: the terminal's cursor is back at the line's start after it
                out.append(self.prefix + body + b"\r")
        while len(self.pending) >= MAX_LINE:
            out.append(self.prefix + self.pending[:MAX_LINE] + b"\n")
            self.pending = self.pending[MAX_LINE:]
            if not self.cut:
                self.cut = True
                _say(
                    f"a line of {self.prefix.decode() or 'a rank'}{self.target} is over "
                    f"{MAX_LINE // (1024 * 1024)} MiB: it reaches the launcher's {self.target} "
                    "cut into lines of that size"
                )
        return b"".join(out)

    def rest(self) -> bytes:
        """The unfinished last line, ended, once the pipe closed."""
        rest, self.pending = self.pending, b""
        return self.prefix + rest + b"\n" if rest else b""


class OutputRelay:
    """The relay of one worker group (see the module docstring)."""

    def __init__(self, *, prefix: bool = False) -> None:
        self._prefix = prefix
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._open: dict[int, LineStream] = {}
        self._all_closed = threading.Condition(self._lock)
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._running = False  # the relay thread was started and has not ended
        self._ended = threading.Event()  # set when it ends
        self._finishing = False  # set by finish(): the thread ends once every pipe closed
        self._moved = 0  # reads relayed so far: finish() waits on while this grows
        self._busy = False  # writing to the launcher's stream now (a slow one blocks there)

    def add(self, rank: int, stdout_fd: int, stderr_fd: int) -> None:
        """Relay a rank's two pipes (read ends; the relay owns and closes them)."""
        prefix = f"[rank{rank}]: ".encode() if self._prefix else b""
        with self._lock:
            for fd, target in ((stdout_fd, "stdout"), (stderr_fd, "stderr")):
                os.set_blocking(fd, False)
                stream = LineStream(fd, target, prefix)
                self._open[fd] = stream
                self._selector.register(fd, selectors.EVENT_READ, stream)
            if not self._running:
                # A bare thread, as the parent-death watcher's: Thread.start() waits until the
                # new thread runs, which the launcher paid between its first and second rank's
                # start (0.1-0.3 ms here), every later rank behind it.  Started at the first
                # rank all the same: a rank whose output filled its pipe would otherwise stall
                # until the last rank started (and for good, were a later rank's set-up
                # waiting on it).  Like a daemon thread it never delays exit.
                self._running = True
                self._ended.clear()
                _thread.start_new_thread(self._run, ())
        os.write(self._wake_w, b"x")

    def finish(self, timeout: float = DRAIN_S, most: float = DRAIN_MAX_S) -> bool:
        """Wait for every pipe to close while output still moves (up to ``timeout`` with none
        moving, ``most`` in all); True when all did (all relayed).  A launcher whose stdout
        drains slowly (``| tee`` to a slow disk, a paused terminal) lost a rank's last lines
        after a flat 2 s, and said nothing."""
        deadline = time.monotonic() + most
        with self._lock:
            self._finishing = True
            if not self._running:  # never started (no rank), or already ended
                self._close_wake()
                return not self._open
            os.write(self._wake_w, b"x")
            moved = -1
            while self._open and time.monotonic() < deadline:
                if moved == self._moved and not self._busy:
                    break  # nothing read nor being written for a whole wait
                moved = self._moved
                wait = min(timeout, max(deadline - time.monotonic(), 0.0))
                self._all_closed.wait_for(lambda: not self._open, wait)
            done = not self._open
            if not done:
                _say(
                    "the output of a worker group may be cut: a rank's output pipe stayed "
                    f"open with nothing read for {timeout:g} s (a process it started still "
                    f"holds it), or its output took over {most:g} s to reach this launcher's "
                    "stdout"
                )
        if done:
            # The pipes may have closed before finish() was called: the thread then wakes
            # only now, and closes the wake-up pipe and selector on its way out.  Wait for
            # it (bounded: nothing is left to read), so a finished group holds no descriptor.
            self._ended.wait(max(deadline - time.monotonic(), 0.0) + 0.5)
        return done

    # ------------------------------------------------------------- the thread
    def _run(self) -> None:
        # A signal sent to the process (docker stop's SIGTERM, a terminal's Ctrl-C) goes to
        # any thread that does not block it, and Python runs its handler only in the main
        # thread: delivered here, it waited until the main thread's wait in join() or
        # results() ended by itself (a SIGTERM unheard for the whole join timeout).
        with contextlib.suppress(AttributeError, ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._relay()
        finally:
            with self._lock:
                self._running = False
            self._ended.set()

    def _relay(self) -> None:
        while True:
            for key, _ in self._selector.select():
                stream = key.data
                if stream is None:
                    os.read(self._wake_r, 4096)  # a new rank was added: select again
                    continue
                self._read(stream)
            with self._lock:
                if not self._open:
                    self._all_closed.notify_all()
                if not self._open and self._finishing:
                    self._close_wake()
                    return

    def _close_wake(self) -> None:
        """Release the wake-up pipe and the selector (under the lock); once."""
        if self._wake_r < 0:
            return
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1

    def _read(self, stream: LineStream) -> None:
        try:
            data = os.read(stream.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._busy = True  # plain attributes: finish() reads them under the lock, late is fine
            emit_lines(stream.target, stream.lines(data))
            self._moved += 1
            self._busy = False
            return
        emit_lines(stream.target, stream.rest())
        with self._lock:
            self._selector.unregister(stream.fd)
            os.close(stream.fd)
            del self._open[stream.fd]


def emit_lines(target: str, data: bytes) -> None:
    """Write whole lines to the launcher's current ``sys.stdout``/``sys.stderr``, then flush."""
    if not data:
        return
    stream: Any = getattr(sys, target, None)
    if stream is None:
        return
    with _write_lock:
        try:
            stream.flush()  # what the launcher itself printed comes first
            buffer = getattr(stream, "buffer", None)
            if buffer is not None:
                buffer.write(data)
                buffer.flush()
            else:
                stream.write(data.decode("utf-8", "replace"))
                stream.flush()
        except (OSError, ValueError):
            pass  # the launcher's own stream is closed: nowhere left to write


def _say(what: str) -> None:
    """One line on the launcher's stderr about the relay itself."""
    emit_lines("stderr", f"spawnkit: {what}\n".encode())
