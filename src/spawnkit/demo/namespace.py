"""The demo engine's namespace: its own groups and variables, so its plugins never load elsewhere.

``spawnkit.demo.platforms`` / ``spawnkit.demo.plugins`` are the entry-point
groups; ``SPAWNKIT_DEMO_PLATFORM`` / ``SPAWNKIT_DEMO_PLUGINS`` select among
them.  Declaring a namespace builds only a small frozen config, so importing
this module is as cheap as importing ``spawnkit``.
"""

from __future__ import annotations

from spawnkit.namespace import Namespace

__all__ = ["DEMO_ENV_PREFIX", "DEMO_NAMESPACE", "demo_namespace"]

DEMO_NAMESPACE = "spawnkit.demo"
DEMO_ENV_PREFIX = "SPAWNKIT_DEMO"


def demo_namespace() -> Namespace:
    """The interned ``spawnkit.demo`` namespace (the same object on every call)."""
    return Namespace(DEMO_NAMESPACE, DEMO_ENV_PREFIX)
