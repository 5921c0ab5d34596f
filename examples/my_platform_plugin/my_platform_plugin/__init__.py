"""Example platform plugin: a simulated device ``my_device`` for two spawnkit namespaces.

``activate`` answers for spawnkit's default namespace (group
``spawnkit.platforms``), ``activate_diffusion`` for the demo engine's
namespace (group ``spawnkit.demo.platforms``), and ``register_hooks`` is this
package's general plugin in that namespace.  Each ``activate`` returns the
platform class's qualname when the device is present and ``None`` otherwise,
and imports nothing heavy: spawnkit may call it in a process that ends up on
another platform.
"""

from __future__ import annotations

__all__ = ["activate", "activate_diffusion", "register_hooks"]


def _my_device_is_available() -> bool:
    try:
        import my_device_runtime
    except ImportError:
        return False
    return bool(my_device_runtime.is_available())


def activate() -> str | None:
    """Return fully-qualified class name to activate, or None to skip."""
    if _my_device_is_available():
        return "my_platform_plugin.platform.MyPlatform"
    return None


def activate_diffusion() -> str | None:
    """The demo namespace's platform: the same check, a platform class of that engine."""
    try:
        import my_device_runtime
    except ImportError:
        return None
    if not my_device_runtime.is_available():
        return None
    return "my_platform_plugin.diffusion_platform.MyDiffusionPlatform"


def register_hooks() -> None:
    """Platform-required hooks: loaded only when ``my_device`` is the demo's platform.

    spawnkit excludes this distribution's general plugins when another
    platform is selected, and fails the worker if they do not apply when it
    is, so a scheduler never runs half-configured on this device.
    """
    from spawnkit.demo.namespace import demo_namespace
    from spawnkit.hooks import HookType

    demo_namespace().hooks.register(
        "spawnkit.demo.scheduler.Scheduler.__init__",
        "my_platform_plugin.hooks:bind_scheduler_device",
        HookType.AFTER,
    )
