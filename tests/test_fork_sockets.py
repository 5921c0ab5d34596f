"""The warm server's connection check leaves ``socket.socket`` as it found it.

In process, with real sockets: the server-level refusal is in
``tests/test_launcher_prebootstrap.py``.
"""

from __future__ import annotations

import socket

import pytest

from spawnkit import _steps
from spawnkit.errors import ForkSafetyError
from spawnkit.protocol import _fork_sockets


def test_the_stand_ins_leave_and_connect_stays_inherited() -> None:
    with _fork_sockets.Connections():
        assert "connect" in vars(socket.socket)
    assert "connect" not in vars(socket.socket) and "connect_ex" not in vars(socket.socket)


def test_a_wrapper_installed_meanwhile_is_kept() -> None:
    with _fork_sockets.Connections():
        ours = socket.socket.connect

        def wrapped(sock: socket.socket, address: object) -> None:  # gevent-like
            ours(sock, address)

        socket.socket.connect = wrapped  # type: ignore[method-assign,assignment]
    try:
        assert socket.socket.connect is wrapped
    finally:
        del socket.socket.connect  # type: ignore[attr-defined]


def test_only_a_stream_connection_opened_in_the_block_is_refused() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        early = socket.create_connection(server.getsockname())  # before: not the block's
        with _fork_sockets.Connections() as block:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.connect(("127.0.0.1", 9))
            listening = socket.create_server(("127.0.0.1", 0))
            block.check()  # datagram and listening sockets: nothing to refuse
            late = socket.create_connection(server.getsockname())
            with pytest.raises(ForkSafetyError) as info:
                block.check()
        assert f"descriptor {late.fileno()}" in str(info.value)
        assert info.value.culprit == _steps.who(_steps.current_step())  # the step connecting
        for sock in (early, udp, listening, late):
            sock.close()


def test_an_event_loop_or_socket_pair_made_in_the_block_is_refused_and_named() -> None:
    import asyncio

    made = socket.socketpair
    with _fork_sockets.Connections() as block:
        assert socket.socketpair is not made
        asyncio.run(asyncio.sleep(0))  # a loop made and closed: nothing left to share
        block.check()
        loop = asyncio.new_event_loop()
        with pytest.raises(ForkSafetyError, match=r"an asyncio event loop \(its wake-up socket"):
            block.check()
        loop.close()
        block.check()
        ends = socket.socketpair()
        with pytest.raises(ForkSafetyError) as info:
            block.check()
    assert socket.socketpair is made
    low, high = sorted(end.fileno() for end in ends)
    assert f"a socket pair (descriptors {low} and {high})" in str(info.value)
    assert info.value.culprit == _steps.who(_steps.current_step())
    for end in ends:
        end.close()
