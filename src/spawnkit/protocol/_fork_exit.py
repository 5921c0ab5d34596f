"""What a warm worker runs as it exits: the ``atexit`` handlers a spawned worker would run.

A spawned worker registers exit handlers as its plugins load, as its hook targets, preloads
and the modules they import are imported, and as its entry runs; the interpreter calls them
when it exits.  A warm worker did the first part in its server, and the fork loop ends every
worker with ``os._exit``: on Python 3.10 to 3.12 it ran none of them, not even one its own
entry registered, and 3.13's forkserver (which runs a child's own) dropped those registered
while the server bootstrapped.  A profiler plugin's dump, a metrics flush, a buffered log:
lost on every warm worker, with nothing said.

So the server notes what is registered while it bootstraps and preloads (``watch`` until
``settle``), each forked worker starts its exit list with those, in their order (``forked``),
and runs it, with what it registered itself, as it exits (``run``): the same calls, in the
same last-in-first-out order, as a spawned worker.  What the server registered before (its
own machinery) stays the server's, as the standard forkserver has it.

A ``weakref.finalize`` is kept apart: it belongs to one object, and an object the server made
(a ``TemporaryDirectory`` a plugin created at load) is shared by every worker, so the server,
not the first worker to exit, finalizes it when it exits itself.  A worker finalizes at exit
what it made, which needs the finalizers' exit hook on its own list: ``weakref`` registers that
once per process, and the server's registration is the one each worker inherited.
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["forked", "run", "settle", "watch"]

_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_noted: list[_Call] = []
_originals: tuple[Any, Any] | None = None  # atexit's register and unregister, while ours stand in
_FINALIZE: Any = weakref.finalize  # its exit hook and registry are private, stable since 3.4
_first_own: int | None = None  # in a worker: the index of the first finalizer it made


def watch() -> None:
    """In the server, before any plugin runs: note every exit handler registered from here on."""
    global _originals
    _originals = atexit.register, atexit.unregister
    atexit.register = _register
    atexit.unregister = _unregister


def _register(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    assert _originals is not None
    _noted.append((func, args, kwargs))
    return _originals[0](func, *args, **kwargs)  # type: ignore[no-any-return]


def _unregister(func: Callable[..., Any], /) -> None:
    assert _originals is not None
    _noted[:] = [call for call in _noted if call[0] != func]  # all of them, as atexit does
    _originals[1](func)


def settle() -> None:
    """In the server, once bootstrapped: atexit's own functions back, unless a plugin wrapped
    ours meanwhile (it keeps its wrapper, which keeps calling ours)."""
    if _originals is None:
        return
    if atexit.register is _register:
        atexit.register = _originals[0]
    if atexit.unregister is _unregister:
        atexit.unregister = _originals[1]


def forked(exit_function: Callable[[], None]) -> None:
    """In each forked worker, first: its exit list, as a spawned worker's would begin.

    ``exit_function`` is the package's ``util._exit_function``, which a spawned worker has
    first (``multiprocessing.util`` registers it as it is imported) and so runs last.
    """
    global _first_own
    atexit._clear()  # the server's own handlers: not the worker's to run
    atexit.register(exit_function)
    noted = [call for call in _noted if call[0] != exit_function]  # on the list already
    finalizers = _FINALIZE._exitfunc
    if _FINALIZE._registered_with_atexit and all(call[0] != finalizers for call in noted):
        # weakref registered its hook before the bootstrap and will not again in this process
        atexit.register(finalizers)
    for func, args, kwargs in noted:
        atexit.register(func, *args, **kwargs)
    _first_own = next(_FINALIZE._index_iter)


def run() -> None:
    """In a forked worker, as it exits: its exit list, with the finalizers it made."""
    if _first_own is not None:
        for info in list(_FINALIZE._registry.values()):
            if info.index < _first_own:
                info.atexit = False  # the server's object: the server finalizes it (see above)
    atexit._run_exitfuncs()
