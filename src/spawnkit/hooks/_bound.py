"""A ``HookRegistry`` *class* bound to one namespace: the seed's plugins, unchanged, on an engine.

SGLang's plugins call ``HookRegistry.register(...)`` on the class they import
from the engine.  Re-exporting ``spawnkit.hooks.HookRegistry`` there would act
on the default registry, which the engine's workers never apply; exporting a
registry object breaks code that expects a class.  Every public method being a
``hybridmethod`` (bound to ``cls.default()`` on class access), a subclass whose
``default()`` is the namespace's registry serves: ``HookRegistry = NS.HookRegistry``.
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
