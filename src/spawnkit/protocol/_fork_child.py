"""A warm worker's own start, after its request: multiprocessing's child path, less what a
spare already did while it waited.

The package's forkserver child runs ``_serve_one`` (signals, inherited descriptors), then
``spawn._main`` (preparation data, ``prepare()``, the ``Process``), then
``Process._bootstrap`` (start method, ``current_process()``/``parent_process()``, stdin to
``os.devnull``, the main thread's native id, after-fork hooks and finalizers, ``run()``,
``sys.exit`` codes, a traceback under "Process <name>:", flushing).  Part of that depends on
nothing the request brings, and a spare (``_fork_loop``) takes it while idle (``ahead``):

* stdin to ``os.devnull``: the same fresh ``/dev/null`` reader it would get after the request;
  done again after the request only where the launcher's ``__main__``, run again by
  ``prepare()``, replaced ``sys.stdin`` meanwhile (as ``_bootstrap`` would have closed that);
* the main thread's native id (the spare's pid is the worker's);
* the first writes to the signal handlers it restores after its request: each handler set
  again to what it is now, which changes nothing and leaves the copy-on-write faults of the
  real restore paid (on the 2-core machine 0.17 ms, against 0.01 ms once paid).

Everything else runs after the request in the stdlib's order (``serve``), with the
package's own functions, so a worker sees what a forkserver child of its Python sees:
``multiprocessing.current_process().name``, ``parent_process()``, ``_children``, the
after-fork hooks, the exit code of ``sys.exit``.  Only ``multiprocessing`` on the Pythons
whose three functions this was checked against (3.10 to 3.13) takes this path; any other
package or Python runs the package's own ``_serve_one``, as before.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading

from spawnkit._compat import TYPE_CHECKING
from spawnkit.protocol import _known

if TYPE_CHECKING:
    from typing import Any

__all__ = ["ahead", "serve"]

_NOT_AHEAD = object()
_stdin: Any = _NOT_AHEAD  # in a spare: the sys.stdin it set ahead (None: there was none)
_held: tuple[Any, ...] = ()


def _direct(package: str) -> bool:
    return package == "multiprocessing" and sys.version_info[:2] <= (3, 13)


def ahead(package: str, handlers: dict[Any, Any]) -> None:
    """In a spare, before its request: stdin, the native id and the signal handlers' pages
    (see the module's docstring).  Whatever raises here is done again after the request."""
    global _stdin
    if not _direct(package):
        return
    global _held
    for sig in handlers:  # the same handler again: nothing changes but page ownership
        with contextlib.suppress(TypeError, ValueError, OSError):
            signal.signal(sig, signal.getsignal(sig))
    _held = tuple(handlers.values())  # and the handlers it restores: their counts' pages
    if threading._HAVE_THREAD_NATIVE_ID:  # type: ignore[attr-defined]
        threading.main_thread()._set_native_id()  # type: ignore[attr-defined]
    sys.modules[f"{package}.util"]._close_stdin()
    _stdin = sys.stdin


def serve(
    forkserver: Any, child_r: int, fds: list[int], handlers: dict[Any, Any], known_r: int
) -> int:
    """The request's worker, from ``child_r`` (its start data) and ``fds`` (the server's
    alive pipe, the resource tracker, the launcher's descriptors): its exit code.
    ``known_r``: read just before its target (``_known``)."""
    _known.expect(known_r)
    package = forkserver.__name__.rpartition(".")[0]
    if not _direct(package):
        code: int = forkserver._serve_one(child_r, fds, [], handlers)
        return code
    from spawnkit.protocol import child

    child.set_early_fd(fds[2] if len(fds) > 2 else None)  # as warm_main._early_reporting
    try:
        proc, sentinel = _receive(package, child_r, fds, handlers)
        return _bootstrap(package, proc, sentinel)
    except SystemExit:
        raise
    except BaseException as exc:
        child.report_early(exc, package)
        raise


def _receive(
    package: str, child_r: int, fds: list[int], handlers: dict[Any, Any]
) -> tuple[Any, int]:
    """``forkserver._serve_one`` and ``spawn._main`` up to ``_bootstrap``: the Process."""
    mods = sys.modules
    server = mods[f"{package}.forkserver"]._forkserver
    process, spawn = mods[f"{package}.process"], mods[f"{package}.spawn"]
    signal.set_wakeup_fd(-1)
    for sig, val in handlers.items():
        signal.signal(sig, val)
    tracker = mods[f"{package}.resource_tracker"]._resource_tracker
    server._forkserver_alive_fd, tracker._fd, *server._inherited_fds = fds
    sentinel = os.dup(child_r)
    load = mods[f"{package}.reduction"].pickle.load
    with os.fdopen(child_r, "rb", closefd=True) as from_parent:
        process.current_process()._inheriting = True
        try:
            spawn.prepare(load(from_parent))
            proc = load(from_parent)
        finally:
            del process.current_process()._inheriting
    return proc, sentinel


def _bootstrap(package: str, proc: Any, sentinel: int) -> int:
    """``Process._bootstrap`` of this Python, less what ``ahead`` did."""
    mods: dict[str, Any] = sys.modules
    process, util = mods[f"{package}.process"], mods[f"{package}.util"]
    try:
        if proc._start_method is not None:
            mods[f"{package}.context"]._force_start_method(proc._start_method)
        process._process_counter = itertools.count(1)
        process._children = set()
        if _stdin is _NOT_AHEAD or sys.stdin is not _stdin:
            util._close_stdin()
        old_process = process._current_process
        process._current_process = proc
        process._parent_process = process._ParentProcess(
            proc._parent_name, proc._parent_pid, sentinel
        )
        if _stdin is _NOT_AHEAD and threading._HAVE_THREAD_NATIVE_ID:  # type: ignore[attr-defined]
            threading.main_thread()._set_native_id()  # type: ignore[attr-defined]
        try:
            proc._after_fork()
        finally:
            del old_process  # finalized after the after-fork hooks, as there
        util.info("child process calling self.run()")
        try:
            proc.run()
            exitcode = 0
        finally:
            if _EXIT_IN_BOOTSTRAP:
                util._exit_function()
    except SystemExit as e:
        exitcode = _exit_code(e)
    except BaseException:
        exitcode = 1
        import traceback

        sys.stderr.write(f"Process {proc.name}:\n")
        traceback.print_exc()
    finally:
        threading._shutdown()  # type: ignore[attr-defined]
        util.info("process exiting with exitcode %d", exitcode)
        util._flush_std_streams()
    return exitcode


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    sys.stderr.write(str(e.code) + "\n")
    return 1


#: 3.10 to 3.12 call ``util._exit_function()`` as ``run()`` ends; 3.13's forkserver child
#: leaves it to the exit handlers (``_fork_exit`` runs them).
_EXIT_IN_BOOTSTRAP = sys.version_info < (3, 13)
