"""spawnkit's hook engine: BEFORE/AFTER/AROUND/REPLACE hooks on functions, methods and classes.

Imports neither torch nor any hook target; the plugin loader is imported on first use.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit._exports import load_export
from spawnkit.hooks.registry import HookRegistry, plugin_hook
from spawnkit.hooks.types import (
    UNKNOWN_SOURCE,
    AppliedTarget,
    HookSource,
    HookStatus,
    HookType,
    Registration,
    current_plugin_source,
    plugin_source,
)

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.hooks._hints import HookState
    from spawnkit.hooks.plugins import PluginManager, apply_plugin_hooks, load_plugins

__all__ = [
    "UNKNOWN_SOURCE", "AppliedTarget", "HookRegistry", "HookSource", "HookState", "HookStatus",
    "HookType", "PluginManager", "Registration", "apply_plugin_hooks", "current_plugin_source",
    "load_plugins", "plugin_hook", "plugin_source",
]  # fmt: skip

_LAZY = dict.fromkeys(
    ("PluginManager", "apply_plugin_hooks", "load_plugins"), "spawnkit.hooks.plugins"
)
_LAZY["HookState"] = "spawnkit.hooks._hints"  # needs typing, which a cold worker does not import


def __getattr__(name: str) -> Any:
    return load_export(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return list(__all__)
