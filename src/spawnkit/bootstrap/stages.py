"""The bootstrap's stages, in the only order a worker may run them, and the listener protocol.

:data:`STAGES` is the one place that writes the order; everything else compares against
:class:`Stage`, never a bare string.  Cheap to import: launchers and failure paths need the names.
"""

from __future__ import annotations

import enum

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit.spec.payload import PAYLOAD_STAGE

if TYPE_CHECKING:
    from typing import Protocol

    from spawnkit.bootstrap.report import BootstrapReport
else:
    from spawnkit._compat import Protocol

__all__ = ["SHARED_STAGES", "STAGES", "STAGE_ORDER", "Stage", "StageListener", "StageRow"]


class Stage(str, enum.Enum):
    """One step of a worker's bootstrap; the value is what reports show; :data:`STAGES` orders."""

    ARM_PARENT_DEATH = "arm_parent_death"
    PLATFORM = "initialize_platform"
    PLUGINS = "load_plugins"
    HOOKS = "apply_hooks"
    PAYLOAD = PAYLOAD_STAGE
    RESOLVE_ENTRY = "resolve_entry"
    ENTRY = "entry"

    def __str__(self) -> str:
        return self.value


class StageRow(NamedTuple):
    """One row of :data:`STAGES`."""

    stage: Stage
    #: The ``Bootstrapper`` method that runs the stage (engines may call it themselves).
    method: str
    #: The same for every rank: a warm-start server runs it once and forks the result.
    shared: bool = False


#: Every stage, in the order a worker runs them; each comment is the rule that places its row.
STAGES: tuple[StageRow, ...] = (
    # First: a worker must never outlive its parent, whatever a later stage hangs on.
    # Per worker: a fork server's parent is watched through the server's own alive pipe.
    StageRow(Stage.ARM_PARENT_DEATH, "arm_parent_death"),
    # Before plugins: a plugin may ask which platform runs, and must get the parent's choice.
    StageRow(Stage.PLATFORM, "initialize_platform", shared=True),
    # Register hooks only, importing no target; then the guard checks none was imported early.
    StageRow(Stage.PLUGINS, "load_plugins", shared=True),
    # Only now is every hook registered: import the targets and patch them, once.
    StageRow(Stage.HOOKS, "apply_hooks", shared=True),
    # After patching: unpickling imports the engine's modules, which must load patched.
    StageRow(Stage.PAYLOAD, "materialize_payload"),
    # After patching, read from its module: a binding taken earlier would be the original.
    # The report is complete here, so READY goes to the parent when this stage finishes.
    StageRow(Stage.RESOLVE_ENTRY, "resolve_entry"),
    # Last, and the only stage whose exceptions pass unchanged: they are the user's own.
    StageRow(Stage.ENTRY, "call_entry"),
)

#: Every stage in the order ``bootstrap_process`` runs them.
STAGE_ORDER: tuple[Stage, ...] = tuple(row.stage for row in STAGES)

#: The stages a warm-start server runs once for every worker it forks.
SHARED_STAGES: tuple[Stage, ...] = tuple(row.stage for row in STAGES if row.shared)


class StageListener(Protocol):
    """Hears a worker's progress: ``stage_*`` bracket each stage, ``ready`` precedes the entry."""

    def stage_started(self, stage: str) -> None: ...

    def stage_finished(self, stage: str, seconds: float) -> None: ...

    def ready(self, report: BootstrapReport) -> None: ...
