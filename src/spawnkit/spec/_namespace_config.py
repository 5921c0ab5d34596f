"""The picklable description of a namespace that travels inside every spec.

A child cannot import the engine module that declared a namespace (that could
import hook targets), so the parent sends the settings themselves and the
child rebuilds an equal ``Namespace`` from them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NamespaceConfig"]

GUARD_POLICIES = ("error", "warn", "off")


@dataclass(frozen=True, slots=True)
class NamespaceConfig:
    """Names an engine embeds spawnkit under; only ``str``/``bool`` fields, so it pickles by value.

    ``platform_base`` is a ``"module:qualname"`` string for the class every
    platform plugin of this namespace must subclass.
    """

    name: str
    env_prefix: str
    platform_group: str
    plugin_group: str
    platform_var: str
    plugins_var: str
    cpu_engine_var: str
    lenient_var: str
    guard_var: str
    platform_base: str = "spawnkit.platforms.interface:Platform"
    guard_policy: str = "error"
    strict_plugins: bool = True

    def __post_init__(self) -> None:
        if self.guard_policy not in GUARD_POLICIES:
            raise ValueError(
                f"namespace {self.name!r}: guard_policy must be one of {GUARD_POLICIES}, "
                f"got {self.guard_policy!r}"
            )

    @classmethod
    def build(
        cls,
        name: str,
        env_prefix: str | None = None,
        *,
        platform_group: str | None = None,
        plugin_group: str | None = None,
        platform_var: str | None = None,
        plugins_var: str | None = None,
        cpu_engine_var: str | None = None,
        lenient_var: str | None = None,
        guard_var: str | None = None,
        platform_base: str = "spawnkit.platforms.interface:Platform",
        guard_policy: str = "error",
        strict_plugins: bool = True,
    ) -> NamespaceConfig:
        """Derive every group and variable name from ``name`` and ``env_prefix`` unless given."""
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"namespace name must be a dotted identifier, got {name!r}")
        prefix = env_prefix if env_prefix is not None else name.replace(".", "_").upper()
        if not prefix or not prefix.replace("_", "a").isalnum():
            raise ValueError(
                f"namespace {name!r}: env_prefix must be A-Z, 0-9 or _, got {prefix!r}"
            )
        return cls(
            name=name,
            env_prefix=prefix,
            platform_group=platform_group or f"{name}.platforms",
            plugin_group=plugin_group or f"{name}.plugins",
            platform_var=platform_var or f"{prefix}_PLATFORM",
            plugins_var=plugins_var or f"{prefix}_PLUGINS",
            cpu_engine_var=cpu_engine_var or f"{prefix}_USE_CPU_ENGINE",
            lenient_var=lenient_var or f"{prefix}_LENIENT_PLUGINS",
            guard_var=guard_var or f"{prefix}_IMPORT_GUARD",
            platform_base=platform_base,
            guard_policy=guard_policy,
            strict_plugins=strict_plugins,
        )
