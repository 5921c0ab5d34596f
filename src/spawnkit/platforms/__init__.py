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

if TYPE_CHECKING:
    from spawnkit.platforms._current import explain_platform, initialize_current_platform
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
    "initialize_current_platform": "spawnkit.platforms._current",
    "explain_platform": "spawnkit.platforms._current",
}


def __getattr__(name: str) -> Any:
    if name == "current_platform":
        # Looked up on every access, never cached: inside a worker its namespace decides.
        from spawnkit.platforms._current import current_platform_of

        return current_platform_of()
    return load_export(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return __all__
