"""A network connection the warm-start server opened while it bootstrapped: refused, as a
thread left running is, since every forked worker would share that one connection.

A plugin, platform or preload that connects as it loads (a telemetry or licence client, a
database) leaves one connected stream socket in the server; each forked worker inherits the
same socket, so their requests interleave on one stream and each may read the replies meant
for another, where every spawned worker opens its own.  Which step connected is noted by
standing in for ``socket.socket.connect``/``connect_ex`` while the server bootstraps; which
connections are still open is read from the process's descriptors afterwards.  A datagram
socket (syslog, statsd) or a listening one is left alone: workers may share those.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from spawnkit import _steps
from spawnkit.errors import ForkSafetyError

__all__ = ["Connections"]


def _fds() -> set[int]:
    """This process's open descriptors; empty where the system does not list them."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            listed = {int(name) for name in os.listdir(where)}
        except (OSError, ValueError):
            continue
        return {fd for fd in listed if _is_open(fd)}  # not the listing's own, closed by now
    return set()


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _peer(fd: int) -> str | None:
    """The peer of ``fd`` if it is a connected stream socket, else None."""
    try:
        sock = socket.socket(fileno=fd)  # reads family and type from the descriptor
    except OSError:
        return None  # not a socket
    try:
        if sock.type != socket.SOCK_STREAM:
            return None
        return str(sock.getpeername())  # OSError: not connected (or listening)
    except OSError:
        return None
    finally:
        sock.detach()  # the descriptor stays open: it is not ours to close


class Connections:
    """The connections opened during the block, and the step that opened each."""

    def __enter__(self) -> Connections:
        self.before = _fds()
        self.origins: dict[int, str] = {}
        # The class itself: a plugin may rebind socket.socket meanwhile (gevent's monkey).
        self._cls = cls = socket.socket
        self._saved = connect, connect_ex = cls.connect, cls.connect_ex
        self._own = {name: name in vars(cls) for name in ("connect", "connect_ex")}  # or inherited
        origins = self.origins

        def noted_connect(sock: socket.socket, address: Any) -> None:
            origins[sock.fileno()] = _steps.current_step()
            connect(sock, address)

        def noted_connect_ex(sock: socket.socket, address: Any) -> int:
            origins[sock.fileno()] = _steps.current_step()
            return connect_ex(sock, address)

        self._ours = noted_connect, noted_connect_ex
        cls.connect = noted_connect  # type: ignore[method-assign,assignment]
        cls.connect_ex = noted_connect_ex  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        cls, names = self._cls, ("connect", "connect_ex")
        for name, ours, saved in zip(names, self._ours, self._saved, strict=True):
            if vars(cls).get(name) is not ours:
                continue  # a plugin that wrapped ours keeps its wrapper
            if self._own[name]:
                setattr(cls, name, saved)
            else:
                delattr(cls, name)  # inherited from _socket.socket, as it was

    def check(self) -> None:
        for fd in sorted(_fds() - self.before):
            peer = _peer(fd)
            if peer is None:
                continue
            who, stage = _steps.blame(self.origins.get(fd, ""))
            by = f", opened by {who}," if who else " (its opener is unknown)"
            raise ForkSafetyError(
                f"a network connection to {peer} (descriptor {fd}){by} is still open in the "
                "warm-start fork server after its bootstrap. Every forked worker would share "
                "that one connection (their messages interleave on it, and each may read "
                "another's replies), so the server refuses to serve. Connect at hook call "
                "time or in the entry (plugin callbacks run once per server), or use "
                "start_method='spawn'.",
                stage=stage,
                culprit=who,
            )
