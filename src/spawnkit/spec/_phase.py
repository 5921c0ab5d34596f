"""This process's phase, readable without importing anything: the one meaning of "phase".

Three phases: not a worker (a parent, a test), a worker whose bootstrap has
not applied hooks yet, and a worker with hooks applied.  (The finer "which
stage or plugin is running now", that the import guard records, is its
*step*: ``guard.current_step()``.)

``Payload.materialize`` and the lazy proxy must refuse to run before hooks are
applied *in a worker*, but work freely in a parent or a test.  The bootstrap
flips these flags; everything else only reads them.  A forked child inherits
the parent's values, which is why the bootstrap resets them when it starts.

Every kind of worker enters the "before hooks" phase with its first
statement, before anything is unpickled: a spawned or warm worker on its
command line, a Ray actor in its constructor, a torchrun rank in
``spawnkit.run``'s ``main``, a child of a bootstrapping context on its command
line (spawn, forkserver) or in its ``run`` (fork).
"""

from __future__ import annotations

from typing import Any

_in_worker = False
_hooks_applied = False
# The Namespace this worker was bootstrapped for: what the module-level API
# (``get_namespace(None)``, ``spawnkit.platforms.current_platform``) answers for.
_worker_namespace: Any = None


def enter_worker(namespace: Any = None) -> None:
    """Mark this process as a bootstrapping worker of ``namespace``, hooks not yet applied."""
    global _in_worker, _hooks_applied, _worker_namespace
    _in_worker = True
    _hooks_applied = False
    _worker_namespace = namespace


def worker_namespace() -> Any:
    """The namespace of this worker's spec; ``None`` outside a bootstrapped worker."""
    return _worker_namespace


def mark_hooks_applied() -> None:
    global _hooks_applied
    _hooks_applied = True


def leave_worker() -> None:
    """Forget worker state (used by in-process test helpers)."""
    global _in_worker, _hooks_applied, _worker_namespace
    _in_worker = False
    _hooks_applied = False
    _worker_namespace = None


def too_early() -> bool:
    """True inside a worker whose bootstrap has not applied hooks yet."""
    return _in_worker and not _hooks_applied
