"""A Python child of a bootstrapped process started through ``subprocess`` runs without its plugins.

An engine's worker (or its own process after ``bootstrap_here()``) that relaunches a server
or a router as ``[sys.executable, "-m", "eng.server"]`` (or a script of the engine's) gives
that child a fresh interpreter that loads no plugin: the engine's code runs there unhooked,
and nothing said so.  Once a process applied its hooks, ``subprocess.Popen.__init__`` (so
``run``, ``call``, ``check_output`` and asyncio's subprocesses) is stood in for; what the
child runs is looked at in ``_python_child_check`` only as a ``Popen`` is made, so a worker
pays one module of a few lines here and nothing until it starts a process.

The warm-start server stands in for ``Popen.__init__`` too while it bootstraps
(``protocol/_fork_children``), and its hooks apply inside that block: this stand-in calls
through its ``__wrapped__``, which that block's end points past its own stand-in.
"""

from __future__ import annotations

import sys
from typing import Any

from spawnkit.errors import PlainChildWarning
from spawnkit.spec import _phase

__all__: list[str] = []

_namespaces: dict[str, Any] = {}  # name -> Namespace whose hooks this process applied
_watch: int | None = None  # waiting for ``subprocess`` to be imported (see ``arm``)


def arm(namespace: Any) -> None:
    """After this process applied ``namespace``'s hooks: a Python child of the engine's warns."""
    report = namespace.plugins.report
    if not (report.applied or report.loaded):
        return  # nothing a child would go without
    _namespaces[namespace.name] = namespace
    if "subprocess" in sys.modules:  # a bootstrap has imported it by now: the common case
        _stand_in()
        return
    global _watch
    if _watch is None:  # importing it here would cost a worker that never starts one
        from spawnkit.hooks import _on_import

        _watch = _on_import.watch(("subprocess",), _imported, hook=False)


def _imported(_name: str) -> None:
    global _watch
    from spawnkit.hooks import _on_import

    token, _watch = _watch, None
    if token is not None:
        _on_import.unwatch(token)
    _stand_in()


def _stand_in() -> None:
    import subprocess

    if getattr(subprocess.Popen.__init__, "_spawnkit_python_children", False):
        return

    def __init__(popen: Any, *args: Any, **kwargs: Any) -> None:
        if _phase.hooks_applied():  # not once a test left its worker phase
            try:
                from spawnkit.bootstrap import _python_child_check

                _python_child_check.check(args, kwargs, tuple(_namespaces.values()))
            except PlainChildWarning:
                raise  # -W error::spawnkit.PlainChildWarning: the start raises, as asked
            except Exception:  # a check that fails says nothing: the child starts
                pass
        __init__.__wrapped__(popen, *args, **kwargs)  # type: ignore[attr-defined]

    __init__.__wrapped__ = subprocess.Popen.__init__  # type: ignore[attr-defined]
    __init__._spawnkit_python_children = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = __init__  # type: ignore[method-assign,assignment]
