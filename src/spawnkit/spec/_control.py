"""``LaunchControl``: what a launcher tells its own worker code, kept apart from ``spec.extra``.

In ``spec.extra`` a ``rank_extra`` key such as ``context`` was silently replaced by the
launcher's value; a field of its own leaves ``extra`` to the engine. Standard library only.
"""

from __future__ import annotations

from multiprocessing.connection import Connection

from spawnkit._compat import TYPE_CHECKING
from spawnkit.spec._record import field, record, replace

if TYPE_CHECKING:
    from typing import Any

__all__ = ["CONTEXTS", "NO_CONTROL", "LaunchControl"]

CONTEXTS = ("multiprocessing", "multiprocess")
"""Pickling families a worker can answer with (``multiprocess`` pickles with dill)."""


@record(frozen=True, slots=True)
class LaunchControl:
    """The launcher's instructions to spawnkit's worker code; never read by an engine.

    ``fault_conn``: faulthandler's output. ``pdeathsig``: the launcher is the parent, so
    ``getppid()`` is compared with ``parent_pid``. ``sigint_restore``: SIGINT was ignored until
    the entry. ``stdout_conn``/``stderr_conn``: fds 1 and 2, relayed in whole lines.
    ``entry_args``: the entry's positional arguments by name. ``plugin_rows``/``plugin_digest``:
    what a rank on another node compares with its own (``scaleout._plugin_set``).
    ``extra_hooked``: as ``Payload.hooked``, for the ``rank_extra`` values (built in the
    launcher, which had applied these constructors and class REPLACEs then).
    ``detected_platform``: ``build_spec``'s platform where its own detection chose it (no
    ``<PREFIX>_PLATFORM``): this machine's hardware, which a Ray or torchrun rank's node may
    not have (``scaleout._node_selection.node_decides_platform`` leaves it to that node).
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
    extra_hooked: tuple[tuple[str, str], ...] = ()
    detected_platform: str | None = None

    def replace(self, **changes: Any) -> LaunchControl:
        return replace(self, **changes)


NO_CONTROL = LaunchControl()
"""A spec not started by a spawnkit launcher (torchrun, a worker started by hand)."""
