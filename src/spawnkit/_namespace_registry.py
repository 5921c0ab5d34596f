"""Namespaces that installed engines register, so a name alone finds its real settings.

An engine declares ``NS = spawnkit.Namespace("minieng", env_prefix="ME")`` in
one of its modules and registers it in its ``pyproject.toml``::

    [project.entry-points."spawnkit.namespaces"]
    minieng = "minieng.namespace:NS"

``get_namespace("minieng")`` (and ``spawnkit doctor/launch --namespace
minieng``) then imports that module through the entry point the first time
the name is asked for and not yet declared in this process.  A name nobody
registered is refused: deriving a prefix from the name would show and select
through variables the engine never reads (``MINIENG_*`` for an engine whose
variables are ``ME_*``).

Only the parent and plain imports get here: a spawned worker rebuilds its
namespace from the spec before any plugin runs, so a plugin's
``get_namespace("minieng")`` finds it declared and no metadata is scanned.

This module also holds the table of namespaces declared in this process
(``Namespace`` interns into it), so that the hooks and the platforms, which
sit below the ``Namespace`` facade, can find a namespace by name for their
module-level ``namespace=`` API without importing the facade (:func:`find`).
"""

from __future__ import annotations

from typing import Any

from spawnkit import _metadata
from spawnkit.errors import NamespaceError
from spawnkit.spec import _phase
from spawnkit.spec._namespace_config import DEFAULT_NAMESPACE_NAME, NamespaceConfig

__all__ = [
    "DECLARED",
    "NAMESPACE_GROUP",
    "describe_unknown",
    "find",
    "load_registered",
    "registration_hint",
    "unknown_namespace",
]

NAMESPACE_GROUP = "spawnkit.namespaces"

#: Every ``Namespace`` declared in this process, by name (``Namespace._registry`` is this dict).
DECLARED: dict[str, Any] = {}


def _is_namespace(obj: object) -> bool:
    return isinstance(getattr(obj, "config", None), NamespaceConfig) and hasattr(obj, "platforms")


def find(namespace: object) -> Any:
    """The namespace object ``namespace`` stands for; ``None`` means the default namespace.

    ``None`` is this worker's namespace inside a bootstrapped worker (else the
    default); a name is a declared namespace, else the installed engine that
    registers it; a ``Namespace`` is itself.  The default namespace's state is
    owned by the layers that use it (``HookRegistry.default()``,
    ``PlatformManager.default()``, ``PluginManager.default()``), so this
    never needs to create one.
    """
    if namespace is None:
        return _phase.worker_namespace()
    if not isinstance(namespace, str | NamespaceConfig):
        return namespace
    name = namespace if isinstance(namespace, str) else namespace.name
    if name == DEFAULT_NAMESPACE_NAME:
        return None
    found = DECLARED.get(name)
    if found is None and isinstance(namespace, str):
        found = load_registered(name)
    if found is None:
        raise unknown_namespace(name, sorted(DECLARED))
    if isinstance(namespace, NamespaceConfig) and found.config != namespace:
        raise NamespaceError(
            f"namespace {name!r} is declared in this process with other settings than the "
            "NamespaceConfig given; pass the Namespace object itself."
        )
    return found


def registration_hint(name: str) -> str:
    """The ``pyproject.toml`` lines that register ``name`` (what every refusal shows)."""
    key = f'"{name}"' if "." in name else name  # a dotted TOML key must be quoted
    return (
        f'[project.entry-points."{NAMESPACE_GROUP}"] {key} = "<module>:<attr>" in the '
        "engine's pyproject.toml, naming its spawnkit.Namespace object, and reinstall the engine"
    )


def _registered(name: str) -> list[_metadata.EntryPointInfo]:
    return [ep for ep in _metadata.entry_points(NAMESPACE_GROUP) if ep.name == name]


def load_registered(name: str) -> Any:
    """The namespace an installed distribution registers as ``name``; ``None`` if none does.

    The entry point names a ``Namespace`` (or a function returning one); it
    must declare exactly ``name``.
    """
    found = _registered(name)
    if not found:
        return None
    if len({ep.value for ep in found}) > 1:
        raise NamespaceError(
            f"namespace {name!r} is registered by several distributions: "
            + "; ".join(ep.describe() for ep in found)
            + ". Uninstall all but the engine that owns the name."
        )
    ep = found[0]
    try:
        obj = _metadata.load_entry_point(ep)
        if callable(obj) and not _is_namespace(obj):
            obj = obj()
    except Exception as exc:
        raise NamespaceError(
            f"namespace {name!r} is registered as {ep.describe()}, but loading it failed: "
            f"{type(exc).__name__}: {exc}. Fix the engine's module, or the entry point's "
            "'module:attr'."
        ) from exc
    if not _is_namespace(obj):
        raise NamespaceError(
            f"namespace {name!r} is registered as {ep.describe()}, which is a "
            f"{type(obj).__name__}, not a spawnkit.Namespace. Point the entry point at the "
            "engine's Namespace object ('module:attr')."
        )
    if obj.name != name:
        raise NamespaceError(
            f"namespace {name!r} is registered as {ep.describe()}, which declares "
            f"Namespace({obj.name!r}). Register it under {obj.name!r}, or declare {name!r}."
        )
    return obj


def describe_unknown(name: str, declared: list[str]) -> str:
    """What is wrong with a name that is neither declared in this process nor registered."""
    registered = sorted({ep.name for ep in _metadata.entry_points(NAMESPACE_GROUP)})
    return (
        f"unknown namespace {name!r}: no installed engine registers it (registered: "
        f"{', '.join(registered) or 'none'}) and it is not declared in this process (declared: "
        f"{', '.join(declared) or 'none'})"
    )


def unknown_namespace(name: str, declared: list[str]) -> NamespaceError:
    """The refusal for an unknown name, with the registration that fixes it."""
    return NamespaceError(
        f"{describe_unknown(name, declared)}. Register it with {registration_hint(name)}; or "
        "pass the Namespace object itself."
    )
