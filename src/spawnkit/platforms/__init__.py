"""Platforms: the device interface, discovery, built-ins and out-of-tree op dispatch.

``from spawnkit.platforms import current_platform`` resolves the platform on
first access (PEP 562), not at import.  Inside a spawnkit worker it is the
platform of the worker's namespace (the spec's), elsewhere the default
namespace's; ``ns.current_platform`` names one explicitly.  Plugins import
this package for ``Platform`` long before any platform may be chosen, and a
resolution at import time would run every plugin's ``activate()`` from inside
another plugin's import.  ``CustomOp`` and ``RMSNorm`` import torch, so they
are loaded only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spawnkit._exports import load_export
from spawnkit.platforms._selection import PlatformSelection
from spawnkit.platforms.interface import DeviceMixin, Platform, PlatformEnum
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace
    from spawnkit.platforms.builtin import (
        BUILTIN_PLATFORMS,
        CpuPlatform,
        CudaPlatform,
        RocmPlatform,
        XpuPlatform,
    )
    from spawnkit.platforms.custom_op import CustomOp
    from spawnkit.platforms.discovery import PlatformManager
    from spawnkit.platforms.explanation import PlatformExplanation
    from spawnkit.platforms.layers import RMSNorm
    from spawnkit.spec import NamespaceConfig

__all__ = [
    "BUILTIN_PLATFORMS",
    "CpuPlatform",
    "CudaPlatform",
    "CustomOp",
    "DeviceMixin",
    "Platform",
    "PlatformEnum",
    "PlatformExplanation",
    "PlatformManager",
    "PlatformSelection",
    "RMSNorm",
    "RocmPlatform",
    "XpuPlatform",
    "current_platform",
    "explain_platform",
    "initialize_current_platform",
]

_LAZY = {
    "BUILTIN_PLATFORMS": "spawnkit.platforms.builtin",
    "CpuPlatform": "spawnkit.platforms.builtin",
    "CudaPlatform": "spawnkit.platforms.builtin",
    "RocmPlatform": "spawnkit.platforms.builtin",
    "XpuPlatform": "spawnkit.platforms.builtin",
    "PlatformManager": "spawnkit.platforms.discovery",
    "PlatformExplanation": "spawnkit.platforms.explanation",  # for explain_platform() only
    "CustomOp": "spawnkit.platforms.custom_op",
    "RMSNorm": "spawnkit.platforms.layers",
}

_default_manager: PlatformManager | None = None


def _manager(namespace: Namespace | str | NamespaceConfig | None) -> PlatformManager:
    global _default_manager
    if namespace is None:
        worker = _phase.worker_namespace()
        if worker is not None:
            # A worker of namespace "minieng" runs on minieng's platform; the default
            # namespace's answer would be another engine's (usually "base").
            manager: PlatformManager = worker.platforms
            return manager
        # default_namespace() rebuilds a config on every call; current_platform may be hot.
        if _default_manager is None:
            from spawnkit.namespace import default_namespace

            _default_manager = default_namespace().platforms
        return _default_manager
    from spawnkit.namespace import get_namespace

    return get_namespace(namespace).platforms


def initialize_current_platform(namespace: Namespace | str | None = None) -> Platform:
    """Resolve the platform and run its ``init_backend()`` once per process."""
    return _manager(namespace).initialize()


def explain_platform(namespace: Namespace | str | None = None) -> PlatformExplanation:
    """What discovery did: candidates and outcomes, probes, path, winner (``str()`` it)."""
    return _manager(namespace).explain()


def __getattr__(name: str) -> Any:
    if name == "current_platform":
        return _manager(None).current()
    return load_export(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return __all__
