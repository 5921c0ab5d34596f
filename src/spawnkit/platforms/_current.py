"""The module-level platform API: ``namespace=None`` is this worker's namespace, else the default.

Here, below the ``Namespace`` facade, since ``_namespace_registry.find`` needs no facade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spawnkit import _namespace_registry
from spawnkit.platforms.discovery import PlatformManager

if TYPE_CHECKING:
    from spawnkit.platforms.explanation import PlatformExplanation
    from spawnkit.platforms.interface import Platform

__all__ = ["current_platform_of", "explain_platform", "initialize_current_platform", "manager_of"]


def manager_of(namespace: Any = None) -> PlatformManager:
    """The platform manager of ``namespace`` (a ``Namespace``, a name, or ``None``)."""
    found = _namespace_registry.find(namespace)
    if found is None:
        return PlatformManager.default()
    manager: PlatformManager = found.platforms
    return manager


def current_platform_of(namespace: Any = None) -> Platform:
    """What ``spawnkit.platforms.current_platform`` is: the resolved platform of ``namespace``."""
    return manager_of(namespace).current()


def initialize_current_platform(namespace: Any = None) -> Platform:
    """Resolve the platform and run its ``init_backend()`` once per process."""
    return manager_of(namespace).initialize()


def explain_platform(namespace: Any = None) -> PlatformExplanation:
    """What discovery did: candidates and outcomes, probes, path, winner (``str()`` it)."""
    return manager_of(namespace).explain()
