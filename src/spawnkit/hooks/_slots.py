"""Process-wide slots the interpreter calls a function from: signal handlers and the hooks
of ``sys`` and ``threading``.

An engine module that runs ``signal.signal(SIGTERM, shutdown)`` or
``sys.excepthook = report`` as it is imported (a target module, imported by
``apply_hooks()`` to be patched) hands the original to the interpreter: a plugin's
hook on ``shutdown`` is "applied" and never runs when the signal arrives.  These
slots live outside any module's globals (``sys`` is never swept: it holds
builtins), so the sweep asks them here, by identity, like every other holder.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Collection, Iterator
from typing import Any

__all__: list[str] = []

#: (module, attribute) of each hook the interpreter or ``threading`` calls by itself
_HOOKS = (
    ("sys", "excepthook"),
    ("sys", "unraisablehook"),
    ("sys", "breakpointhook"),
    ("sys", "displayhook"),
    ("threading", "excepthook"),
)


class SignalTable:
    """The process's signal handlers as a container a holder and the journal can write.

    ``signal.signal`` works in the main thread only: an apply from another thread gets a
    ``ValueError`` here, and the caller reports the handler instead of rebinding it.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "SignalTable()"

    def get(self, signum: int, default: Any = None) -> Any:
        try:
            return signal.getsignal(signum)
        except (ValueError, OSError):
            return default

    def __setitem__(self, signum: int, handler: Any) -> None:
        signal.signal(signum, handler)


SIGNALS = SignalTable()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name of its own
        return f"signal {signum}"


def slots_holding(wanted: Collection[int]) -> Iterator[tuple[str, Any, Any, str, Any]]:
    """(module, container, key, label, value) of each slot whose value's id is ``wanted``."""
    for modname, attr in _HOOKS:
        namespace = getattr(sys.modules.get(modname), "__dict__", None)
        value = namespace.get(attr) if type(namespace) is dict else None
        if value is not None and id(value) in wanted:
            yield modname, namespace, attr, attr, value  # labelled as a module global
    for signum in signal.valid_signals():
        handler = SIGNALS.get(signum)
        if callable(handler) and id(handler) in wanted:
            yield "signal", SIGNALS, signum, f"handler of {_signal_name(signum)}", handler
