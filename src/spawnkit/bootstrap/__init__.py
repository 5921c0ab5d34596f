"""The worker side of spawnkit: the staged bootstrap, its report, the import guard, lazy proxies.

The launcher's names (``spawn_with_plugins``, ``WorkerGroup``, ``cleanup``,
``build_spec``, ``write_launch_spec``) live in :mod:`spawnkit.launch`, the
parent side; they are still reachable here because they were public here
first, and loading them lazily keeps the worker from importing them.

Exports load on first use (PEP 562): the child's command line imports
``spawnkit.bootstrap.guard`` before anything else, and that must not pull in
the hook engine, the platforms or the launcher with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spawnkit._exports import load_export

# Bound eagerly: the submodule ``lazy`` and the function ``lazy`` share a name, and importing
# the submodule would otherwise leave the *module* as ``spawnkit.bootstrap.lazy``.
from spawnkit.bootstrap.lazy import LazyObject, lazy

_EXPORTS: dict[str, str] = {
    "Bootstrapper": "spawnkit.bootstrap.process",
    "bootstrap_process": "spawnkit.bootstrap.process",
    "current_report": "spawnkit.bootstrap.process",
    "current_spec": "spawnkit.bootstrap.process",
    "BootstrapReport": "spawnkit.bootstrap.report",
    "Stage": "spawnkit.bootstrap.stages",
    "StageListener": "spawnkit.bootstrap.stages",
    # the parent side, re-exported for compatibility
    "spawn_with_plugins": "spawnkit.launch.launcher",
    "WorkerGroup": "spawnkit.launch.group",
    "cleanup": "spawnkit.launch._cleanup",  # not .cleanup: a submodule would shadow it
    "build_spec": "spawnkit.launch.launcher",
    "write_launch_spec": "spawnkit.launch.specs",
}

__all__ = [
    "BootstrapReport",
    "Bootstrapper",
    "LazyObject",
    "Stage",
    "StageListener",
    "WorkerGroup",
    "bootstrap_process",
    "build_spec",
    "cleanup",
    "current_report",
    "current_spec",
    "lazy",
    "spawn_with_plugins",
    "write_launch_spec",
]

if TYPE_CHECKING:
    from spawnkit.bootstrap.process import (
        Bootstrapper,
        bootstrap_process,
        current_report,
        current_spec,
    )
    from spawnkit.bootstrap.report import BootstrapReport
    from spawnkit.bootstrap.stages import Stage, StageListener
    from spawnkit.launch._cleanup import cleanup
    from spawnkit.launch.launcher import (
        WorkerGroup,
        spawn_with_plugins,
    )
    from spawnkit.launch.specs import build_spec, write_launch_spec


def __getattr__(name: str) -> Any:
    return load_export(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__
