"""Ctrl-C and a worker group: the launcher owns it, and a second one cuts teardown short.

Workers start with SIGINT blocked (a signal mask survives ``exec``; the worker ignores SIGINT
once it runs, unblocks it, and hears it again right before its entry): a worker still starting
would die of a Ctrl-C with a raw traceback.  The launcher catches SIGINT meanwhile, never
ignores it: an ignored SIGINT the kernel hands to another thread (a progress display's) is
dropped, and the group would run on.  During teardown a second Ctrl-C SIGKILLs what is left.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from spawnkit.launch import _sigterm

__all__ = [
    "EscalateTeardown",
    "children_start_deaf",
    "held",
    "second_interrupt_escalates",
    "tracker_first",
    "will_start_deaf",
]


class EscalateTeardown(BaseException):
    """Ctrl-C during teardown; a ``BaseException`` so no ``except Exception`` absorbs it."""


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def will_start_deaf() -> bool:
    """Whether ``children_start_deaf`` acts: main thread, SIGINT raising KeyboardInterrupt."""
    return (
        hasattr(signal, "pthread_sigmask")
        and _on_main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


@contextlib.contextmanager
def children_start_deaf(enabled: bool) -> Iterator[None]:
    """While starting spawned children: they inherit SIGINT blocked; ours is raised after."""
    if not enabled:
        yield
        return
    caught: list[Any] = []
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        # Caught, not ignored: a Ctrl-C another thread takes meanwhile trips this handler
        # (run on this thread, between two statements) instead of vanishing; one that stays
        # pending is raised by the restored handler when the mask is.
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    if caught and callable(previous):
        previous(signal.SIGINT, caught[0])  # default_int_handler raises KeyboardInterrupt


def tracker_first(package: str) -> None:
    """Start the package's resource tracker now, before the first rank's start blocks SIGINT.

    Each spawned rank needs it, and starting it unblocks SIGINT (the package blocks SIGINT
    and SIGTERM around the tracker's spawn, then unblocks them, whatever the mask was): inside
    the first rank's window, that rank would start with SIGINT deliverable, and die of a
    Ctrl-C while its interpreter starts.
    """
    importlib.import_module(f"{package}.resource_tracker").ensure_running()


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A Ctrl-C during the block reaches SIGINT's handler once the block is over.

    Around reading one report message: a ``KeyboardInterrupt`` raised half-way through a
    message would leave the pipe mid-frame, every later message of that rank unreadable,
    and the rank's stage frozen wherever the interrupt struck (the group would then say
    "rank 1 in materialize_payload" of a rank already in its entry).
    """
    if not _on_main_thread():  # SIGINT's Python handler only ever runs on the main thread
        yield
        return
    caught: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    # the launcher's SIGTERM raises as Ctrl-C does (launch._sigterm): held the same way
    terms: list[Any] = []
    term = None
    if _sigterm.watching():
        term = signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if term is not None:
            signal.signal(signal.SIGTERM, term)
            if terms and callable(term):
                term(signal.SIGTERM, terms[0])  # raises Terminated
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])  # default_int_handler raises KeyboardInterrupt
        elif caught and previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)  # what the signal would have done


@contextlib.contextmanager
def second_interrupt_escalates() -> Iterator[None]:
    """During teardown the first Ctrl-C raises :class:`EscalateTeardown`, later ones are ignored."""
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
