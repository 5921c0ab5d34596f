"""Setting a namespace's selection variables for one test, its children, and nothing after it.

Variables, not an in-process override: the parent resolves platform and allow-list from the
environment into every spec, and subprocess children read the same variables.  In-process
resolutions are reset (``reset_for_tests()``) on every change and on undo.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from spawnkit.namespace import get_namespace

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["EnvOverlay", "PlatformSelection", "PluginAllowlist", "reset_all_namespaces"]


def _reset_managers(ns: Namespace) -> None:
    """Forget resolutions made from the old variables; never creates a manager."""
    for attr in ("_platforms", "_plugins"):
        manager = getattr(ns, attr, None)
        reset = getattr(manager, "reset_for_tests", None)
        if callable(reset):
            reset()


def reset_all_namespaces() -> None:
    """Reset the managers of every namespace declared in this process (see above)."""
    from spawnkit.hooks.plugins import PluginManager
    from spawnkit.namespace import Namespace
    from spawnkit.platforms.discovery import PlatformManager

    for ns in list(Namespace._registry.values()):
        _reset_managers(ns)
    # The module-level API's (namespace=None) may be in use before the default namespace is.
    PlatformManager.default().reset_for_tests()
    PluginManager.default().reset_for_tests()


class EnvOverlay:
    """Environment changes that :meth:`undo` restores to the pre-test values."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, var: str, value: str | None) -> None:
        """Set ``var`` to ``value``; ``None`` removes it."""
        if var not in self._saved:
            self._saved[var] = os.environ.get(var)
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value

    @property
    def changed(self) -> list[str]:
        return sorted(self._saved)

    def undo(self) -> None:
        """Put every changed variable back as it was (set or absent)."""
        saved, self._saved = self._saved, {}
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


class _NamespaceVars:
    def __init__(self, namespace: Namespace | str | NamespaceConfig | None = None) -> None:
        self._default = namespace
        self._env = EnvOverlay()
        self._touched: dict[str, Namespace] = {}

    def _ns(self, namespace: Namespace | str | NamespaceConfig | None) -> Namespace:
        ns = get_namespace(namespace if namespace is not None else self._default)
        self._touched[ns.name] = ns
        return ns

    def _set(self, ns: Namespace, var: str, value: str | None) -> None:
        self._env.set(var, value)
        _reset_managers(ns)

    def undo(self) -> None:
        """Restore every variable this object changed and reset the namespaces it touched."""
        self._env.undo()
        touched, self._touched = self._touched, {}
        for ns in touched.values():
            _reset_managers(ns)


class PlatformSelection(_NamespaceVars):
    """Selects a platform by name through the namespace's platform variable; ``None`` unsets it."""

    def __call__(
        self, name: str | None, *, namespace: Namespace | str | NamespaceConfig | None = None
    ) -> str:
        return self.set(name, namespace=namespace)

    def set(
        self, name: str | None, *, namespace: Namespace | str | NamespaceConfig | None = None
    ) -> str:
        """Select ``name`` (``None``: unset); returns the variable's name."""
        ns = self._ns(namespace)
        var = ns.config.platform_var
        self._set(ns, var, name)
        return var

    def unset(self, *, namespace: Namespace | str | NamespaceConfig | None = None) -> str:
        """Remove the selection, so the platform is auto-discovered."""
        return self.set(None, namespace=namespace)

    def use_cpu_engine(
        self, enabled: bool = True, *, namespace: Namespace | str | NamespaceConfig | None = None
    ) -> str:
        """Set (``"1"``) or remove the namespace's CPU-engine fallback variable."""
        from spawnkit._flags import check_flag

        check_flag("enabled", enabled, call="use_cpu_engine")
        ns = self._ns(namespace)
        var = ns.config.cpu_engine_var
        self._set(ns, var, "1" if enabled else None)
        return var


class PluginAllowlist(_NamespaceVars):
    """Sets the namespace's plugin allow-list variable (unset: all; empty: none; else names)."""

    def __call__(
        self,
        names: Iterable[str] | str,
        *,
        namespace: Namespace | str | NamespaceConfig | None = None,
    ) -> str:
        return self.set(names, namespace=namespace)

    def set(
        self,
        names: Iterable[str] | str,
        *,
        namespace: Namespace | str | NamespaceConfig | None = None,
    ) -> str:
        """Allow exactly ``names`` (an iterable or one comma-separated string)."""
        if isinstance(names, str):
            items = [n.strip() for n in names.split(",")]
        else:
            items = [str(n).strip() for n in names]
        for item in items:
            if "," in item:
                raise ValueError(f"plugin name {item!r} contains a comma, which separates names")
        ns = self._ns(namespace)
        var = ns.config.plugins_var
        self._set(ns, var, ",".join(i for i in items if i))
        return var

    def allow(self, *names: str, namespace: Namespace | str | NamespaceConfig | None = None) -> str:
        """Allow exactly the given names; ``allow()`` with none loads no plugin."""
        return self.set(names, namespace=namespace)

    def none(self, *, namespace: Namespace | str | NamespaceConfig | None = None) -> str:
        """Load no general plugin (the variable is set to the empty string)."""
        return self.set((), namespace=namespace)

    def all(self, *, namespace: Namespace | str | NamespaceConfig | None = None) -> str:
        """Load every discovered plugin (the variable is removed)."""
        ns = self._ns(namespace)
        var = ns.config.plugins_var
        self._set(ns, var, None)
        return var
