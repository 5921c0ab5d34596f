"""A network connection or socket pair the warm-start server opened while it bootstrapped:
refused, as a thread left running is, since every forked worker would share that one socket.

A plugin, platform or preload that connects as it loads (a telemetry or licence client, a
database) leaves one connected stream socket in the server; each forked worker inherits the
same socket, so their requests interleave on one stream and each may read the replies meant
for another, where every spawned worker opens its own.  A socket pair likewise: an asyncio
event loop made at load holds one for its wake-ups (beside its selector), and a
``multiprocessing.Pipe()`` is one; forked workers would wake and read each other.  Which step
made each is noted by standing in for ``socket.socket.connect``/``connect_ex`` and
``socket.socketpair`` while the server bootstraps; which are still open is read from the
process's descriptors afterwards.  A datagram socket (syslog, statsd) or a listening one is
left alone: workers may share those.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from spawnkit import _steps
from spawnkit.protocol import failure

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
        self.pairs: dict[int, tuple[int, bool]] = {}  # fd -> (the other end, made by asyncio)
        self._made_pairs = socket.socketpair
        self._socketpair = self._noting_pairs(socket.socketpair)
        socket.socketpair = self._socketpair  # asyncio and multiprocessing look it up per call
        return self

    def _noting_pairs(self, make: Any) -> Any:
        origins, pairs = self.origins, self.pairs

        def noted_socketpair(*args: Any, **kwargs: Any) -> Any:
            ends = make(*args, **kwargs)
            step = _steps.current_step()
            by_asyncio = str(sys._getframe(1).f_globals.get("__name__")).startswith("asyncio.")
            one, two = (end.fileno() for end in ends)
            origins[one] = origins[two] = step
            pairs[one], pairs[two] = (two, by_asyncio), (one, by_asyncio)
            return ends

        return noted_socketpair

    def __exit__(self, *exc: object) -> None:
        cls, names = self._cls, ("connect", "connect_ex")
        for name, ours, saved in zip(names, self._ours, self._saved, strict=True):
            if vars(cls).get(name) is not ours:
                continue  # a plugin that wrapped ours keeps its wrapper
            if self._own[name]:
                setattr(cls, name, saved)
            else:
                delattr(cls, name)  # inherited from _socket.socket, as it was
        if socket.socketpair is self._socketpair:  # a plugin's wrapper of ours is kept
            socket.socketpair = self._made_pairs

    def check(self) -> None:
        for fd in sorted(_fds() - self.before):
            peer = _peer(fd)
            if peer is None:
                continue
            what, effect, fix = (
                _pair_text(fd, *self.pairs[fd])
                if fd in self.pairs
                else (
                    f"a network connection to {peer} (descriptor {fd})",
                    "Every forked worker would share that one connection (their messages "
                    "interleave on it, and each may read another's replies)",
                    "Connect at hook call time or in the entry (plugin callbacks run once per "
                    "server)",
                )
            )
            who, stage = _steps.blame(self.origins.get(fd, ""))
            raise failure.fork_refusal(what, who, stage, "made", "open", effect, fix)


def _pair_text(fd: int, other: int, by_asyncio: bool) -> tuple[str, str, str]:
    ends = f"descriptors {min(fd, other)} and {max(fd, other)}"
    if by_asyncio:
        return (
            f"an asyncio event loop (its wake-up socket pair, {ends})",
            "Every forked worker would share that loop's wake-up pair and its selector: one "
            "worker's wake-ups and events could reach another",
            "Make the loop in the entry or at hook call time (asyncio.run() there), or close "
            "it before the plugin returns",
        )
    return (
        f"a socket pair ({ends})",
        "Every forked worker would share both ends (what one worker writes, another may read)",
        "Make it at hook call time or in the entry, or close both ends before the plugin "
        "returns",
    )
