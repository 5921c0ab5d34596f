"""spawnkit: spawn-safe process bootstrap for engines whose workers installed plugins change.

Importing ``spawnkit`` is cheap and imports neither torch nor any plugin: the
public names below are loaded on first use (PEP 562), because this package is
imported by every spawned worker *before* its hooks are applied and must not
drag hook targets in with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

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
    "spawn_with_plugins": "spawnkit.bootstrap",
    "WorkerGroup": "spawnkit.bootstrap",
    "cleanup": "spawnkit.bootstrap",
    "build_spec": "spawnkit.bootstrap",
    "write_launch_spec": "spawnkit.bootstrap",
}

_ERROR_NAMES = (
    "BootstrapError",
    "BootstrapOrderError",
    "BootstrapTimeoutError",
    "ChildError",
    "ChildExitedError",
    "ChildRaisedError",
    "ConfigError",
    "CustomOpError",
    "EntryResolutionError",
    "ForkSafetyError",
    "ForkServerError",
    "HookApplyError",
    "HookError",
    "HookRegistrationError",
    "HookTargetError",
    "ImportGuardError",
    "LauncherUnavailableError",
    "LazyProxyError",
    "NamespaceError",
    "PayloadError",
    "PlatformConflictError",
    "PlatformContractError",
    "PlatformError",
    "PlatformInitError",
    "PlatformNotFoundError",
    "PlatformPluginError",
    "PlatformUnavailableError",
    "PluginError",
    "PreloadError",
    "ProgressCallbackError",
    "SpawnkitError",
    "SpecError",
    "SpecSignatureError",
    "SpecTypeError",
    "SpecValueError",
    "StageError",
    "WorkerReuseError",
)
_EXPORTS.update(dict.fromkeys(_ERROR_NAMES, "spawnkit.errors"))

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from spawnkit.bootstrap import (
        BootstrapReport,
        WorkerGroup,
        bootstrap_process,
        build_spec,
        cleanup,
        spawn_with_plugins,
        write_launch_spec,
    )

    # The function, not the submodule of the same name (mypy may pick either otherwise).
    from spawnkit.bootstrap.lazy import lazy
    from spawnkit.errors import *
    from spawnkit.hooks import (
        HookRegistry,
        HookSource,
        HookType,
        apply_plugin_hooks,
        load_plugins,
        plugin_hook,
    )
    from spawnkit.namespace import Namespace, default_namespace, get_namespace
    from spawnkit.platforms import explain_platform, initialize_current_platform
    from spawnkit.spec import NamespaceConfig, Payload, ProcessSpec


def __getattr__(name: str) -> Any:
    # Imported here, not at the top: unpickling a spec imports this package, and that
    # must stay standard library plus spawnkit.spec and spawnkit.errors.
    from spawnkit._exports import load_export

    return load_export(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__
