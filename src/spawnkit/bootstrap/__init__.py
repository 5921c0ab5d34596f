"""The worker side of spawnkit: the staged bootstrap, its report, the import guard, lazy proxies.

The launcher's names (``spawn_with_plugins``, ``WorkerGroup``, ``cleanup``,
``build_spec``, ``write_launch_spec``) live in :mod:`spawnkit.launch`, the
parent side above this package, and are public from ``spawnkit`` itself.

Exports load on first use (PEP 562): the child's command line imports
``spawnkit.bootstrap.guard`` before anything else, and that must not pull in
the hook engine, the platforms or the launcher with it.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit._exports import load_export

# Bound eagerly: the submodule ``lazy`` and the function ``lazy`` share a name, and importing
# the submodule would otherwise leave the *module* as ``spawnkit.bootstrap.lazy``.
from spawnkit.bootstrap.lazy import LazyObject, lazy

if TYPE_CHECKING:
    from typing import Any

_EXPORTS: dict[str, str] = {
    "Bootstrapper": "spawnkit.bootstrap.process",
    "bootstrap_process": "spawnkit.bootstrap.process",
    "current_report": "spawnkit.bootstrap.process",
    "current_spec": "spawnkit.bootstrap.process",
    "BootstrapReport": "spawnkit.bootstrap.report",
    "Stage": "spawnkit.bootstrap.stages",
    "StageListener": "spawnkit.bootstrap.stages",
}

__all__ = [
    "BootstrapReport",
    "Bootstrapper",
    "LazyObject",
    "Stage",
    "StageListener",
    "bootstrap_process",
    "current_report",
    "current_spec",
    "lazy",
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


def __getattr__(name: str) -> Any:
    return load_export(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__
