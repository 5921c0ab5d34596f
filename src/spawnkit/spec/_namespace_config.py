"""The picklable description of a namespace that travels inside every spec.

A child must not import the engine module that declared it (it could import hook targets).
"""

from __future__ import annotations

import functools

from spawnkit.spec._record import record

__all__ = ["DEFAULT_NAMESPACE_NAME", "NamespaceConfig", "default_config"]

#: The namespace the module-level API uses outside a worker (``spawnkit`` / ``SPAWNKIT_*``).
DEFAULT_NAMESPACE_NAME = "spawnkit"

GUARD_POLICIES = ("error", "warn", "off")


@record(frozen=True, slots=True)
class NamespaceConfig:
    """Names an engine embeds spawnkit under; only ``str``/``bool`` fields, so it pickles by value.

    ``platform_base`` is a ``"module:qualname"`` string for the class every
    platform plugin of this namespace must subclass; ``""`` is spawnkit's own
    ``Platform`` (the platforms, not this data, know where it lives).
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
    platform_base: str = ""
    guard_policy: str = "error"
    strict_plugins: bool = True
    #: The engine's own variables under its prefix, not typos to the unknown-variable check.
    extra_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from spawnkit._flags import check_flag

        check_flag("strict_plugins", self.strict_plugins, call=f"Namespace({self.name!r}, ...)")
        if self.guard_policy not in GUARD_POLICIES:
            raise ValueError(
                f"namespace {self.name!r}: guard_policy must be one of {GUARD_POLICIES}, "
                f"got {self.guard_policy!r}"
            )
        if not isinstance(self.extra_env, tuple) or not all(
            isinstance(v, str) and v and v.replace("_", "a").isalnum() for v in self.extra_env
        ):
            raise ValueError(
                f"namespace {self.name!r}: extra_env must be a tuple of variable names "
                f"(A-Z, 0-9, _), got {self.extra_env!r}"
            )

    @property
    def strict_env_var(self) -> str:
        """``<PREFIX>_STRICT_ENV``: 1 makes an unknown or foreign variable a ``ConfigError``."""
        return f"{self.env_prefix}_STRICT_ENV"

    @property
    def allow_plugin_drift_var(self) -> str:
        """``<PREFIX>_ALLOW_PLUGIN_DRIFT``: a rank whose node sees other plugins only warns."""
        return f"{self.env_prefix}_ALLOW_PLUGIN_DRIFT"

    @property
    def hook_conflicts_var(self) -> str:
        """``<PREFIX>_HOOK_CONFLICTS``: ``warn`` (default), ``error`` or ``ignore``."""
        return f"{self.env_prefix}_HOOK_CONFLICTS"

    @property
    def known_env(self) -> tuple[str, ...]:
        """Every variable this namespace reads: its settings, then the engine's ``extra_env``."""
        return (
            self.platform_var, self.plugins_var, self.cpu_engine_var, self.lenient_var,
            self.guard_var, self.strict_env_var, self.hook_conflicts_var,
            self.allow_plugin_drift_var, *self.extra_env,
        )  # fmt: skip

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
        platform_base: str = "",
        guard_policy: str = "error",
        strict_plugins: bool = True,
        extra_env: tuple[str, ...] | list[str] = (),
    ) -> NamespaceConfig:
        """Derive every group and variable name from ``name`` and ``env_prefix`` unless given."""
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"namespace name must be a dotted identifier, got {name!r}")
        prefix = env_prefix if env_prefix is not None else name.replace(".", "_").upper()
        _check_prefix(name, prefix)
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
            extra_env=tuple(extra_env) if isinstance(extra_env, list | tuple) else extra_env,
        )


@functools.cache
def default_config() -> NamespaceConfig:
    """The default namespace's settings; every layer that needs its state builds from these."""
    return NamespaceConfig.build(DEFAULT_NAMESPACE_NAME, "SPAWNKIT")


_PREFIX_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _check_prefix(name: str, prefix: object) -> None:
    """Upper-case ASCII only: a variable is read by its exact name, so ``eng_PLATFORM`` would
    silently ignore the ``ENG_PLATFORM`` a user sets (and no shell sets ``1ENG_...``)."""
    ok = isinstance(prefix, str) and prefix and set(prefix) <= _PREFIX_CHARS
    if ok and not str(prefix)[0].isdigit():
        return
    from spawnkit.errors import ConfigError  # the failure path only

    text = str(prefix)
    if text and set(text.upper()) <= _PREFIX_CHARS and not text[0].isdigit():
        why = (
            f"its variables are read by their exact names, so the {text.upper()}_PLATFORM a "
            f"user sets would be ignored (spawnkit would read {text}_PLATFORM). Pass "
            f"env_prefix={text.upper()!r}"
        )
    else:
        why = "a shell cannot set variables named with it. Pass one that is"
    raise ConfigError(
        f"namespace {name!r}: env_prefix must be upper-case A-Z, 0-9 or _, not starting with a "
        f"digit, got {prefix!r}: {why}.",
        setting="env_prefix",
    )
