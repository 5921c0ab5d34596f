"""Platforms: the device interface, discovery, built-ins and out-of-tree op dispatch.

``current_platform`` resolves on each access (PEP 562), not at import: plugins import this
package long before a platform may be chosen, and resolving then would run every plugin's
``activate()`` inside another plugin's import. Torch-using names load only when asked for.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit._exports import load_export
from spawnkit.platforms._selection import PlatformSelection
from spawnkit.platforms.interface import DeviceMixin, Platform, PlatformEnum

if TYPE_CHECKING:
    from typing import Any

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
    "BUILTIN_PLATFORMS", "CpuPlatform", "CudaPlatform", "CustomOp", "DeviceMixin", "Platform",
    "PlatformEnum", "PlatformExplanation", "PlatformManager", "PlatformSelection", "RMSNorm",
    "RocmPlatform", "XpuPlatform", "current_platform", "explain_platform",
    "initialize_current_platform",
]  # fmt: skip

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
        from spawnkit.platforms._current import current_platform_of

        return current_platform_of()
    return load_export(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return __all__
