"""A ``HookRegistry`` *class* bound to one namespace: the seed's plugins, unchanged, on an engine.

The default registry's class would act on a registry the engine's workers never apply, and a
registry object breaks code expecting a class; a subclass whose ``default()`` is the
namespace's registry serves, since every public method is a ``hybridmethod``.
"""

from __future__ import annotations

from spawnkit.errors import HookRegistrationError
from spawnkit.hooks.registry import HookRegistry

__all__ = ["bound_registry_class"]


def bound_registry_class(registry: HookRegistry, namespace: str) -> type[HookRegistry]:
    """A subclass of ``HookRegistry`` whose class-level methods act on ``registry``."""

    class BoundHookRegistry(HookRegistry):
        def __init__(self, name: str = "spawnkit") -> None:
            # An instance would be a second, empty registry that no worker applies.
            raise HookRegistrationError(
                f"HookRegistry of namespace {namespace!r} is used as a class, not "
                f"instantiated: call HookRegistry.register(...) on it; it already acts on "
                f"that namespace's registry. For an independent registry, instantiate "
                "spawnkit.hooks.HookRegistry(name=...)."
            )

        @classmethod
        def default(cls) -> HookRegistry:
            return registry

    BoundHookRegistry.__name__ = "HookRegistry"
    BoundHookRegistry.__qualname__ = f"HookRegistry[{namespace}]"
    BoundHookRegistry.__doc__ = (
        f"The hook registry of namespace {namespace!r}, used through the class "
        "(``HookRegistry.register(...)``, ``HookRegistry.plugin_hook(...)``, "
        "``HookRegistry.is_hook_applied(target, fn, hook_type)``)."
    )
    return BoundHookRegistry
