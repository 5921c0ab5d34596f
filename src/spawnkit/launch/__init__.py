"""The parent side: launching worker groups, the warm-start server, clean-up.

Exports load on first use (PEP 562) so that importing one of them does not
import the others' dependencies.  The worker side is :mod:`spawnkit.bootstrap`;
the wire between the two is :mod:`spawnkit.protocol`.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit._exports import load_export

_EXPORTS: dict[str, str] = {
    "spawn_with_plugins": "spawnkit.launch.launcher",
    "WorkerGroup": "spawnkit.launch.group",
    "cleanup": "spawnkit.launch._cleanup",
    "build_spec": "spawnkit.launch.launcher",
    "write_launch_spec": "spawnkit.launch.specs",
}

__all__ = ["WorkerGroup", "build_spec", "cleanup", "spawn_with_plugins", "write_launch_spec"]

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.launch._cleanup import cleanup
    from spawnkit.launch.group import WorkerGroup
    from spawnkit.launch.launcher import spawn_with_plugins
    from spawnkit.launch.specs import build_spec, write_launch_spec


def __getattr__(name: str) -> Any:
    return load_export(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__
