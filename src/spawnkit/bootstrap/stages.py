"""The bootstrap's stages, in the only order a worker may run them, and the listener protocol.

The order is the point of spawnkit: a worker must pick its platform before
plugins look at it, register every hook before any target is patched, patch
before the payload is unpickled (unpickling imports the engine's modules),
and read the entry from its module only after patching.  Keeping the order in
one tuple lets the bootstrapper enforce it and error messages name it.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from spawnkit.bootstrap.report import BootstrapReport

__all__ = ["STAGE_ORDER", "Stage", "StageListener"]


class Stage(str, enum.Enum):
    """One step of a worker's bootstrap; the value is what reports and errors show."""

    ARM_PARENT_DEATH = "arm_parent_death"
    PLATFORM = "initialize_platform"
    PLUGINS = "load_plugins"
    HOOKS = "apply_hooks"
    PAYLOAD = "materialize_payload"
    RESOLVE_ENTRY = "resolve_entry"
    ENTRY = "entry"

    def __str__(self) -> str:
        return self.value


#: Every stage in the order ``bootstrap_process`` runs them.
STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)


class StageListener(Protocol):
    """What the launcher plugs in to hear about a worker's progress (e.g. to report to its parent).

    ``stage_started``/``stage_finished`` bracket every stage, so a parent that
    loses the child knows which stage it died in; ``ready`` comes once, right
    before the entry is called, with the complete report.
    """

    def stage_started(self, stage: str) -> None: ...

    def stage_finished(self, stage: str, seconds: float) -> None: ...

    def ready(self, report: BootstrapReport) -> None: ...
