"""Process-wide slots the interpreter calls a function from: signal handlers, the hooks
of ``sys`` and ``threading``, and ``atexit`` callbacks.

An engine module that runs ``signal.signal(SIGTERM, shutdown)``,
``sys.excepthook = report`` or ``@atexit.register`` as it is imported (a target module,
imported by ``apply_hooks()`` to be patched) hands the original to the interpreter: a
plugin's hook on ``shutdown`` is "applied" and never runs when the signal arrives, or at
exit.  These slots live outside any module's globals (``sys`` is never swept: it holds
builtins), so the sweep asks them here, by identity, like every other holder.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import types
from collections.abc import Callable, Collection, Iterator

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
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


class _AtexitCallback:
    """What ``atexit`` holds for a function registered while an apply imports modules: a
    callable that calls it, and whose function can be rebound in place.  CPython keeps its
    callbacks where no Python code can list or change them; unregistering and registering
    again would move the callback in the exit order (last registered, first run)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __eq__(self, other: object) -> bool:  # atexit.unregister(func) compares with ==
        return other is self or other is self.func

    __hash__ = object.__hash__

    def __repr__(self) -> str:  # what "Exception ignored in atexit callback" names
        return repr(self.func)


#: Every callback registered through the stand-in, in registration order (for the process)
_CALLBACKS: list[_AtexitCallback] = []


class AtexitTable:
    """The callbacks registered through the stand-in, as a container the journal can write."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "AtexitTable()"

    def get(self, index: int, default: Any = None) -> Any:
        return _CALLBACKS[index].func if 0 <= index < len(_CALLBACKS) else default

    def __setitem__(self, index: int, func: Any) -> None:
        _CALLBACKS[index].func = func


ATEXIT = AtexitTable()


class _AtexitKept:
    """``with atexit_kept:`` while the block runs (plugins loading, an apply importing target
    modules), ``atexit.register`` hands ``atexit`` a rebindable callback: one registered as
    a target's module runs holds the original, which the sweep then rebinds like a signal
    handler.  Reentrant, one stand-in for nested blocks (an apply's imports pass through the
    on-import loader's block too), and cheap to enter: every target module's import does."""

    __slots__ = ("_depth", "_lock", "_mine", "_real")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._real: Any = None
        self._mine: Any = None

    def __enter__(self) -> None:
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._stand_in()

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                if atexit.register is self._mine:  # else someone stood in since: theirs stays
                    atexit.register = self._real
                self._real = self._mine = None

    def _stand_in(self) -> None:
        real = self._real = atexit.register

        def register(func: Any, /, *args: Any, **kwargs: Any) -> Any:
            if not callable(func):
                return real(func, *args, **kwargs)  # its own TypeError
            callback = _AtexitCallback(func)
            real(callback, *args, **kwargs)
            _CALLBACKS.append(callback)
            return func  # as atexit.register does: it is used as a decorator

        self._mine = atexit.register = register


atexit_kept = _AtexitKept()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name of its own
        return f"signal {signum}"


def slots_holding(wanted: Collection[int]) -> Iterator[tuple[str, Any, Any, str, Any]]:
    """(module, container, key, label, value) of each slot whose value's id is ``wanted``, or
    whose value is a bound method of a ``wanted`` function (``signal.signal(SIGUSR1,
    SERVER.on_term)``, ``atexit.register(SERVER.shutdown)``: a slot has no identity to keep,
    so a new bound method of the hooked function may take its place)."""
    for modname, attr in _HOOKS:
        namespace = getattr(sys.modules.get(modname), "__dict__", None)
        value = namespace.get(attr) if type(namespace) is dict else None
        if value is not None and _holds(value, wanted):
            yield modname, namespace, attr, attr, value  # labelled as a module global
    for signum in signal.valid_signals():
        handler = SIGNALS.get(signum)
        if callable(handler) and _holds(handler, wanted):
            yield "signal", SIGNALS, signum, f"handler of {_signal_name(signum)}", handler
    for index, callback in enumerate(list(_CALLBACKS)):
        if _holds(callback.func, wanted):
            yield "atexit", ATEXIT, index, f"callback {index + 1}", callback.func


def _holds(value: Any, wanted: Collection[int]) -> bool:
    return id(value) in wanted or (
        type(value) is types.MethodType and id(value.__func__) in wanted
    )
