"""spawnkit: spawn-safe process bootstrap for engines whose workers installed plugins change.

Importing ``spawnkit`` is cheap and imports neither torch nor any plugin: the
public names below are loaded on first use (PEP 562), because this package is
imported by every spawned worker *before* its hooks are applied and must not
drag hook targets in with it.
"""

from __future__ import annotations

import sys as _sys

from spawnkit import errors as _errors
from spawnkit._compat import TYPE_CHECKING

__version__ = "0.1.0"

# ``-W error::spawnkit.HookConflictWarning`` was dropped at start-up (spawnkit could not be
# imported yet); install such entries now, in the launcher and in every worker.  Only when
# one names spawnkit: unpickling a spec imports this package and must stay this cheap.
if any("spawnkit." in _option for _option in _sys.warnoptions):
    from spawnkit._warnopts import reapply as _reapply_warnoptions

    _reapply_warnoptions()

_EXPORTS: dict[str, str] = {
    # namespaces
    "Namespace": "spawnkit.namespace",
    "default_namespace": "spawnkit.namespace",
    "get_namespace": "spawnkit.namespace",
    # spec
    "NamespaceConfig": "spawnkit.spec",
    "Payload": "spawnkit.spec",
    "ProcessSpec": "spawnkit.spec",
    # hooks
    "HookRegistry": "spawnkit.hooks",
    "HookSource": "spawnkit.hooks",
    "HookType": "spawnkit.hooks",
    "plugin_hook": "spawnkit.hooks",
    "load_plugins": "spawnkit.hooks",
    "apply_plugin_hooks": "spawnkit.hooks",
    # platforms
    "initialize_current_platform": "spawnkit.platforms",
    "explain_platform": "spawnkit.platforms",
    # bootstrap and launching
    "BootstrapReport": "spawnkit.bootstrap",
    "bootstrap_process": "spawnkit.bootstrap",
    "lazy": "spawnkit.bootstrap",
    "spawn_with_plugins": "spawnkit.launch",
    "WorkerGroup": "spawnkit.launch",
    "cleanup": "spawnkit.launch",
    "build_spec": "spawnkit.launch",
    "write_launch_spec": "spawnkit.launch",
    # every process of an engine
    "get_context": "spawnkit.launch.context",
    "bootstrap_here": "spawnkit.launch.context",
}

# The error names are declared once, in ``errors.__all__``.  The module is standard
# library only and every worker imports it anyway, so reading its list here costs
# nothing a worker would not pay.
_EXPORTS.update(dict.fromkeys(_errors.__all__, "spawnkit.errors"))

__all__ = sorted([*_EXPORTS, "__version__"])
# Former error classes: importable, with a DeprecationWarning, but not in ``__all__``.
_EXPORTS.update(dict.fromkeys(_errors._DEPRECATED, "spawnkit.errors"))

if TYPE_CHECKING:
    from typing import Any

    # ``X as X``: the explicit re-export form, so that ``from spawnkit import X`` type-checks
    # under ``mypy --strict`` (which cannot read the computed ``__all__`` above).
    from spawnkit.bootstrap import BootstrapReport as BootstrapReport
    from spawnkit.bootstrap import bootstrap_process as bootstrap_process
    from spawnkit.bootstrap.lazy import lazy as lazy
    from spawnkit.errors import *
    from spawnkit.hooks import HookRegistry as HookRegistry
    from spawnkit.hooks import HookSource as HookSource
    from spawnkit.hooks import HookType as HookType
    from spawnkit.hooks import apply_plugin_hooks as apply_plugin_hooks
    from spawnkit.hooks import load_plugins as load_plugins
    from spawnkit.hooks import plugin_hook as plugin_hook
    from spawnkit.launch import WorkerGroup as WorkerGroup
    from spawnkit.launch import build_spec as build_spec
    from spawnkit.launch import cleanup as cleanup
    from spawnkit.launch import spawn_with_plugins as spawn_with_plugins
    from spawnkit.launch import write_launch_spec as write_launch_spec
    from spawnkit.launch.context import bootstrap_here as bootstrap_here
    from spawnkit.launch.context import get_context as get_context
    from spawnkit.namespace import Namespace as Namespace
    from spawnkit.namespace import default_namespace as default_namespace
    from spawnkit.namespace import get_namespace as get_namespace
    from spawnkit.platforms import explain_platform as explain_platform
    from spawnkit.platforms import initialize_current_platform as initialize_current_platform
    from spawnkit.spec import NamespaceConfig as NamespaceConfig
    from spawnkit.spec import Payload as Payload
    from spawnkit.spec import ProcessSpec as ProcessSpec


def __getattr__(name: str) -> Any:
    # Imported here, not at the top: unpickling a spec imports this package, and that
    # must stay standard library plus spawnkit.spec and spawnkit.errors.
    from spawnkit._exports import load_export

    return load_export(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__
