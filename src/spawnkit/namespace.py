"""``Namespace``: the names an engine embeds spawnkit under, and the state that goes with them.

Interned by name: the same settings return the same object (a child rebuilding one from its
spec finds the engine's); different settings are an error, since two parts of a program would
disagree about which variables select the platform. Subsystems are created lazily, so
importing this imports neither torch nor any plugin. A facade above ``spawnkit.hooks`` and
``spawnkit.platforms`` (docs/architecture.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from spawnkit import _namespace_registry, _reference
from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import NamespaceError
from spawnkit.spec import NamespaceConfig, _phase
from spawnkit.spec._namespace_config import DEFAULT_NAMESPACE_NAME, default_config

if TYPE_CHECKING:
    from typing import Any, ClassVar, NoReturn, TypeVar

    from typing_extensions import Unpack

    from spawnkit.hooks.plugins import PluginManager
    from spawnkit.hooks.registry import HookRegistry
    from spawnkit.hooks.registry import HookRegistry as _Registry
    from spawnkit.hooks.types import HookOptions, HookType
    from spawnkit.hooks.types import HookType as _HookType
    from spawnkit.platforms.discovery import PlatformManager
    from spawnkit.platforms.interface import Platform
else:
    from spawnkit._compat import TypeVar

__all__ = ["DEFAULT_NAMESPACE_NAME", "Namespace", "default_namespace", "get_namespace"]


class _Moved:
    """A former method of ``Namespace``: reading it raises with the call that replaces it."""

    def __init__(self, replacement: str) -> None:
        self.replacement = replacement

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, ns: Namespace | None, owner: type) -> NoReturn:
        where = self.replacement.format(ns=ns.name if ns is not None else "NAME")
        raise AttributeError(
            f"Namespace.{self.name}() moved to the launcher: call {where} (spawnkit's layers "
            "put contexts above the namespace; README 'Every process of an engine')."
        )


_H = TypeVar("_H")
_S = TypeVar("_S")


class Namespace:
    """One engine's view of spawnkit: groups, variables, hook registry, platform, plugins."""

    _registry: ClassVar[dict[str, Namespace]] = _namespace_registry.DECLARED
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    config: NamespaceConfig

    def __new__(cls, name: str, env_prefix: str | None = None, **settings: Any) -> Namespace:
        if not settings:
            # Every plugin module re-declares its engine's namespace: an argument pair checked
            # once against the declared config needs no config built and compared again.
            found = cls._registry.get(name)
            if found is not None and env_prefix in found._checked_prefixes:
                return found
            if found is None and env_prefix is None:  # an engine's, maybe: see registered()
                registered: Namespace | None = _namespace_registry.registered(name)
                if registered is not None:
                    registered._checked_prefixes.add(None)  # the name alone means it now
                    return registered
            ns = cls.from_config(NamespaceConfig.build(name, env_prefix))
            ns._checked_prefixes.add(env_prefix)  # from_config refuses a different config
            return ns
        platform_base = settings.pop("platform_base", None)
        if platform_base is not None and not isinstance(platform_base, str):
            platform_base = _reference.reference_to(platform_base)
        if platform_base is not None:
            from spawnkit.platforms.interface import Platform

            # spawnkit's own Platform, named or not, is the default (""): one config, not two.
            own = f"{Platform.__module__}:{Platform.__qualname__}"
            settings["platform_base"] = "" if platform_base == own else platform_base
        config = NamespaceConfig.build(name, env_prefix, **settings)
        return cls.from_config(config)

    def __init__(self, name: str, env_prefix: str | None = None, **settings: Any) -> None:
        # All work happens in __new__/from_config so that re-declaring returns the interned object.
        pass

    @classmethod
    def from_config(cls, config: NamespaceConfig) -> Namespace:
        """The interned namespace for ``config``, created if new; a conflicting one is an error."""
        with cls._registry_lock:
            existing = cls._registry.get(config.name)
            if existing is not None:
                if existing.config != config:
                    raise NamespaceError(
                        f"namespace {config.name!r} is already declared with different settings:\n"
                        f"  existing: {existing.config}\n  new:      {config}\n"
                        "Declare each namespace once (in the engine's own module) and import it."
                    )
                return existing
            ns = object.__new__(cls)
            ns.config = config
            ns._lock = threading.RLock()
            ns._hooks = None
            ns._platforms = None
            ns._plugins = None
            ns._checked_prefixes = set()
            cls._registry[config.name] = ns
            return ns

    _lock: threading.RLock
    _hooks: HookRegistry | None
    _platforms: PlatformManager | None
    _plugins: PluginManager | None
    _checked_prefixes: set[str | None]  # env_prefix arguments whose config equals this one

    # ------------------------------------------------------------- identity
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def env_prefix(self) -> str:
        return self.config.env_prefix

    def __repr__(self) -> str:
        return f"Namespace({self.config.name!r}, env_prefix={self.config.env_prefix!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Namespace.from_config, (self.config,))

    # Former methods: the launcher sits above this module; an old call says where they went.
    get_context = _Moved("spawnkit.get_context(method, namespace=get_namespace({ns!r}))")
    bootstrap_here = _Moved("spawnkit.bootstrap_here(get_namespace({ns!r}))")

    # ----------------------------------------------------------- subsystems
    @property
    def hooks(self) -> HookRegistry:
        """This namespace's hook registry (the default namespace uses the default registry)."""
        found = self._hooks
        return found if found is not None else self._create("_hooks", _new_hooks)

    @property
    def platforms(self) -> PlatformManager:
        """Discovery, selection and the current platform of this namespace."""
        found = self._platforms
        return found if found is not None else self._create("_platforms", _new_platforms)

    @property
    def plugins(self) -> PluginManager:
        """General-plugin discovery and the load/apply stages of this namespace."""
        found = self._plugins
        return found if found is not None else self._create("_plugins", _new_plugins)

    def _create(self, attr: str, build: Callable[[Namespace], _S]) -> _S:
        with self._lock:
            found: _S | None = getattr(self, attr)
            if found is None:
                found = build(self)
                setattr(self, attr, found)
            return found

    # ------------------------------------------------------ convenience API
    @property
    def current_platform(self) -> Platform:
        return self.platforms.current()

    def initialize_current_platform(self) -> Platform:
        return self.platforms.initialize()

    def explain_platform(self) -> Any:
        return self.platforms.explain()

    def load_plugins(self, **kwargs: Any) -> Any:
        return self.plugins.load(**kwargs)

    def apply_plugin_hooks(self, **kwargs: Any) -> Any:
        return self.plugins.apply(**kwargs)

    def plugin_hook(
        self, target: str, type: HookType | None = None, **options: Unpack[HookOptions]
    ) -> Callable[[_H], _H]:
        """Decorator registering on this namespace's registry (the seed's ``plugin_hook``)."""
        from spawnkit.hooks.types import HookType

        return self.hooks.plugin_hook(target, type or HookType.AFTER, **options)

    # ----------------------------------------- seed-compatible module names
    _hook_class: type[_Registry] | None = None

    @property
    def HookRegistry(self) -> type[_Registry]:
        """A ``HookRegistry`` class acting on this namespace's registry, for seed-style plugins."""
        found = self._hook_class
        return found if found is not None else self._create("_hook_class", _new_hook_class)

    @property
    def HookType(self) -> type[_HookType]:
        """The ``HookType`` enum, for ``HookType = NS.HookType`` beside the registry class."""
        from spawnkit.hooks.types import HookType

        return HookType


def _new_hooks(ns: Namespace) -> HookRegistry:
    from spawnkit.hooks.registry import HookRegistry

    return HookRegistry.default() if ns.name == DEFAULT_NAMESPACE_NAME else HookRegistry(ns.name)


def _new_platforms(ns: Namespace) -> PlatformManager:
    from spawnkit.platforms.discovery import PlatformManager

    return PlatformManager.default() if _default_config(ns) else PlatformManager(ns)


def _new_plugins(ns: Namespace) -> PluginManager:
    from spawnkit.hooks.plugins import PluginManager

    return PluginManager.default() if _default_config(ns) else PluginManager(ns)


def _default_config(ns: Namespace) -> bool:
    """Whether ``ns`` has the default namespace's settings (its managers are the default ones).
    Its name first: an engine's namespace (a worker's, nearly always) is told by one string
    compare, not the field-by-field compare of two configs, once per manager it builds."""
    config = ns.config
    return config.name == DEFAULT_NAMESPACE_NAME and config == default_config()


def _new_hook_class(ns: Namespace) -> type[_Registry]:
    from spawnkit.hooks._bound import bound_registry_class

    return bound_registry_class(ns.hooks, ns.name)


def default_namespace() -> Namespace:
    """The ``spawnkit`` namespace: what the module-level API uses outside a worker."""
    return Namespace.from_config(default_config())


def get_namespace(ns: Namespace | str | NamespaceConfig | None = None) -> Namespace:
    """Normalise the ``namespace=`` argument every public function accepts.

    ``None``: the worker's own namespace in a worker, else the default. An undeclared name is
    loaded from its ``spawnkit.namespaces`` entry point; an unknown one is a ``NamespaceError``.
    """
    if ns is None:
        worker: Namespace | None = _phase.worker_namespace()
        return worker if worker is not None else default_namespace()
    if isinstance(ns, Namespace):
        return ns
    if isinstance(ns, NamespaceConfig):
        return Namespace.from_config(ns)
    if isinstance(ns, str):
        if ns == DEFAULT_NAMESPACE_NAME:
            return default_namespace()
        found = Namespace._registry.get(ns)
        if found is None:
            found = _namespace_registry.load_registered(ns)
            if found is None:
                raise _namespace_registry.unknown_namespace(ns, sorted(Namespace._registry))
        return found
    raise TypeError(f"namespace must be a Namespace, a name or None, got {type(ns).__name__}")
