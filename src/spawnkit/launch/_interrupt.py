"""Ctrl-C and a worker group: the launcher owns it, and a second one cuts teardown short.

Why workers start deaf to SIGINT: a Ctrl-C on a terminal reaches every
process of the foreground group at once, and a spawned worker still starting
its interpreter (importing ``site``, ``spawnkit``, the launching script) dies
of it with a raw ``KeyboardInterrupt`` traceback on the shared terminal.  A
disposition set to ``SIG_IGN`` is the only handler that survives ``exec``, so
the launcher ignores SIGINT (blocked meanwhile, so a Ctrl-C is kept pending,
not lost) just while it starts a spawned child; the worker hears SIGINT again
right before its entry function (``LaunchControl.sigint_restore``), where a program's own
``except KeyboardInterrupt`` belongs.  During the bootstrap the launcher stops
workers itself (SIGTERM, then SIGKILL), so it knows the stage of each.

Why a second Ctrl-C escalates: teardown waits up to ``grace_period`` after
SIGTERM; a user pressing Ctrl-C again wants it over now, so during teardown
SIGINT kills the remaining workers with SIGKILL at once instead of raising
``KeyboardInterrupt`` half-way through the bounded reap.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "EscalateTeardown",
    "children_start_deaf",
    "second_interrupt_escalates",
    "will_start_deaf",
]


class EscalateTeardown(BaseException):
    """Ctrl-C pressed while a group was being torn down: kill what is left now.

    A ``BaseException`` so that no ``except Exception`` on the teardown path
    can absorb it; only the launcher's teardown catches it.
    """


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def will_start_deaf() -> bool:
    """Whether ``children_start_deaf`` will act: main thread, SIGINT raising KeyboardInterrupt.

    A parent that already ignores SIGINT (a background job) passes that on
    unchanged, and a program's own SIGINT handler is left alone.
    """
    return (
        hasattr(signal, "pthread_sigmask")
        and _on_main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


@contextlib.contextmanager
def children_start_deaf(enabled: bool) -> Iterator[None]:
    """While starting spawned children: they inherit SIGINT ignored; ours is delivered after."""
    if not enabled:
        yield
        return
    sigint = {signal.SIGINT}
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigint)
    try:
        # Blocked first: Linux keeps a blocked signal pending even while it is ignored,
        # so a Ctrl-C pressed now raises KeyboardInterrupt here once the mask is restored.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


@contextlib.contextmanager
def second_interrupt_escalates() -> Iterator[None]:
    """During teardown, the first Ctrl-C raises :class:`EscalateTeardown`; later ones are ignored.

    Only on the main thread and only over Python's default handler: a program
    with its own SIGINT handler keeps it.
    """
    if not _on_main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    pressed = False

    def _handler(signum: int, frame: Any) -> None:
        nonlocal pressed
        if not pressed:
            pressed = True
            raise EscalateTeardown

    previous = signal.signal(signal.SIGINT, _handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
