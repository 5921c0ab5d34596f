"""The demo engine's namespace (``spawnkit.demo.*`` groups, ``SPAWNKIT_DEMO_*`` variables)."""

from __future__ import annotations

from spawnkit.namespace import Namespace

__all__ = ["DEMO_ENV_PREFIX", "DEMO_NAMESPACE", "demo_namespace"]

DEMO_NAMESPACE = "spawnkit.demo"
DEMO_ENV_PREFIX = "SPAWNKIT_DEMO"


def demo_namespace() -> Namespace:
    """The interned ``spawnkit.demo`` namespace (the same object on every call)."""
    return Namespace(DEMO_NAMESPACE, DEMO_ENV_PREFIX)
