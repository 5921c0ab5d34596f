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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spawnkit import _metadata
from spawnkit.errors import NamespaceError

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace

__all__ = [
    "NAMESPACE_GROUP",
    "describe_unknown",
    "load_registered",
    "registration_hint",
    "unknown_namespace",
]

NAMESPACE_GROUP = "spawnkit.namespaces"


def registration_hint(name: str) -> str:
    """The ``pyproject.toml`` lines that register ``name`` (what every refusal shows)."""
    key = f'"{name}"' if "." in name else name  # a dotted TOML key must be quoted
    return (
        f'[project.entry-points."{NAMESPACE_GROUP}"] {key} = "<module>:<attr>" in the '
        "engine's pyproject.toml, naming its spawnkit.Namespace object, and reinstall the engine"
    )


def _registered(name: str) -> list[_metadata.EntryPointInfo]:
    return [ep for ep in _metadata.entry_points(NAMESPACE_GROUP) if ep.name == name]


def load_registered(name: str) -> Namespace | None:
    """The namespace an installed distribution registers as ``name``; ``None`` if none does.

    The entry point names a ``Namespace`` (or a function returning one); it
    must declare exactly ``name``.
    """
    from spawnkit.namespace import Namespace

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
        if callable(obj) and not isinstance(obj, Namespace):
            obj = obj()
    except Exception as exc:
        raise NamespaceError(
            f"namespace {name!r} is registered as {ep.describe()}, but loading it failed: "
            f"{type(exc).__name__}: {exc}. Fix the engine's module, or the entry point's "
            "'module:attr'."
        ) from exc
    if not isinstance(obj, Namespace):
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
