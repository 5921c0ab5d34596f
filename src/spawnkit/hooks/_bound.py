"""A ``HookRegistry`` *class* bound to one namespace: the seed's plugins, unchanged, on an engine.

SGLang's plugins do ``from sglang.srt.plugins.hook_registry import
HookRegistry`` and call ``HookRegistry.register(...)`` on the class.  An
engine that re-exports ``spawnkit.hooks.HookRegistry`` there sends those
calls to spawnkit's *default* registry, which the engine's workers never
apply; an engine that exports its registry object breaks code that expects a
class (``issubclass``, SGLang's three-argument ``is_hook_applied``).

Every public method of ``HookRegistry`` is a ``hybridmethod``: looked up on a
class, it binds to ``cls.default()``.  A subclass whose ``default()`` is the
namespace's registry therefore makes every class-level call act on that
namespace, with nothing duplicated, so the engine's compatibility module is
one line: ``HookRegistry = NS.HookRegistry``.
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
