"""``LaunchControl``: what a launcher tells its own worker code, kept apart from ``spec.extra``.

The fault pipe, the launcher's pid, whether the launcher is the worker's
parent, the pickling family and the Ctrl-C hand-over are read by spawnkit's
worker side only (``protocol.child``, ``bootstrap._parent_death``, the Ray actor).  They used to
ride in ``spec.extra`` under plain names, where a ``rank_extra`` key called
``context`` or ``parent_pid`` was silently replaced by the launcher's value.
A field of their own leaves ``spec.extra`` to the engine, whatever it names
its keys.  Standard-library types only: a worker unpickles this with its spec.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["CONTEXTS", "NO_CONTROL", "LaunchControl"]

CONTEXTS = ("multiprocessing", "multiprocess")
"""Pickling families a worker can answer with (``multiprocess`` pickles with dill)."""


@dataclass(frozen=True, slots=True)
class LaunchControl:
    """The launcher's instructions to spawnkit's worker code; never read by an engine.

    ``fault_conn``: where faulthandler writes fatal-signal tracebacks and
    stack dumps.  ``parent_pid``: the launcher's pid, watched for its death.
    ``pdeathsig``: the launcher is the worker's parent (spawn from the main
    thread), so ``getppid()`` is compared with ``parent_pid``.  ``context``:
    the pickling family.  ``sigint_restore``: the worker started with SIGINT
    ignored and hears it again at its entry.  ``local_world_size``: ranks on
    this node, where only the launcher knows it (Ray).  ``stdout_conn`` /
    ``stderr_conn``: pipes the worker's fds 1 and 2 are redirected to, so
    that the launcher relays its output in whole lines (``launch._output``).
    ``entry_args``: the entry's positional arguments by name (``rank``,
    ``local_rank``, ``world_size``, ``payload`` or a key of ``spec.extra``),
    for engines whose worker function is not ``entry(payload)``.
    ``plugin_rows`` / ``plugin_digest``: the launcher's entry-point rows of
    the selected plugins and platforms, and their digest, for a rank on
    another node to compare with its own (``scaleout._plugin_set``).
    """

    fault_conn: Connection | None = field(default=None, repr=False, compare=False)
    parent_pid: int | None = None
    pdeathsig: bool = False
    context: str = "multiprocessing"
    sigint_restore: bool = False
    local_world_size: int | None = None
    stdout_conn: Connection | None = field(default=None, repr=False, compare=False)
    stderr_conn: Connection | None = field(default=None, repr=False, compare=False)
    entry_args: tuple[str, ...] | None = None
    plugin_rows: tuple[tuple[str, str, str, str, str], ...] | None = None
    plugin_digest: str = ""

    def replace(self, **changes: Any) -> LaunchControl:
        """A copy with some fields changed (one record per rank from a template)."""
        return dataclasses.replace(self, **changes)


NO_CONTROL = LaunchControl()
"""A spec not started by a spawnkit launcher (torchrun, a worker started by hand)."""
