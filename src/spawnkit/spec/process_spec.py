"""``ProcessSpec``: everything a worker needs, in standard-library types only.

Unpickling a spec must import nothing of the engine, so every field is a
builtin, a ``Connection``, or one of the small frozen dataclasses of
``spawnkit.spec``.  The engine's own arguments travel as a :class:`Payload`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from spawnkit.spec._control import NO_CONTROL, LaunchControl
from spawnkit.spec._namespace_config import NamespaceConfig
from spawnkit.spec._validate import check_spec
from spawnkit.spec.payload import Payload

__all__ = ["ProcessSpec"]


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One worker's instructions, decided by the parent.

    ``platform`` and ``plugins`` are the parent's resolved selection: the child
    loads exactly that platform (re-checking its hardware) and exactly those
    plugins, so every rank does what the parent decided.  ``None`` means "not
    decided; resolve in the child from the environment".

    ``entry_points`` holds the parent's discovery for this namespace's two
    groups as ``(name, value, group, dist, version)`` rows; a worker given
    them answers discovery from them instead of scanning metadata (``None``:
    scan in the child, as a worker started by hand does).

    ``entry`` is ``"module:qualname"``; when the entry is not importable by
    reference (a lambda, a closure, a function of ``__main__``) it is ``""`` and
    ``entry_payload`` carries the callable by value.

    ``extra`` is the engine's alone (``rank_extra`` fills it); what a
    spawnkit launcher tells its own worker code travels in ``_control``.
    """

    entry: str
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    namespace: NamespaceConfig | None = None
    platform: str | None = None
    plugins: tuple[str, ...] | None = None
    lenient_plugins: bool = False
    entry_points: tuple[tuple[str, str, str, str, str], ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    payload: Payload | None = None
    entry_payload: Payload | None = None
    report_conn: Connection | None = field(default=None, repr=False, compare=False)
    death_conn: Connection | None = field(default=None, repr=False, compare=False)
    run_id: str = ""
    guard_policy: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    _control: LaunchControl = NO_CONTROL

    def __post_init__(self) -> None:
        # Runs when a spec is built or replaced, never when a worker unpickles one.
        check_spec(self)

    def replace(self, **changes: Any) -> ProcessSpec:
        """A copy with some fields changed (one spec per rank from a template)."""
        return dataclasses.replace(self, **changes)
