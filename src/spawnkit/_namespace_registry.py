"""Namespaces that installed engines register (``spawnkit.namespaces``), and those declared here.

A name nobody registered is refused: a prefix derived from the name would select through
variables the engine never reads. The table of declared namespaces lives here so the hooks and
platforms below the ``Namespace`` facade can find one by name without importing it.
"""

from __future__ import annotations

import sys

from spawnkit import _metadata
from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import NamespaceError
from spawnkit.spec import _phase
from spawnkit.spec._namespace_config import DEFAULT_NAMESPACE_NAME, NamespaceConfig

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DECLARED", "NAMESPACE_GROUP", "describe_unknown", "find", "load_registered",
    "registered", "registration_hint", "unknown_namespace",
]  # fmt: skip

NAMESPACE_GROUP = "spawnkit.namespaces"

#: Every ``Namespace`` declared in this process, by name (``Namespace._registry`` is this dict).
DECLARED: dict[str, Any] = {}


def _is_namespace(obj: object) -> bool:
    return isinstance(getattr(obj, "config", None), NamespaceConfig) and hasattr(obj, "platforms")


def find(namespace: object) -> Any:
    """The namespace object ``namespace`` stands for; ``None`` means the default namespace.

    The default's state is owned by the layers' ``default()`` objects, so none is created here.
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
    """The namespace (or factory's result) a distribution registers as ``name``; None if none."""
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


#: Names whose registered namespace is being loaded (its module declares it as it runs).
_LOADING: set[str] = set()


def registered(name: str) -> Any:
    """For ``Namespace(name)`` with no prefix and nothing declared yet: the namespace an
    installed engine registers as ``name``, or None.

    Without this a launcher's ``Namespace("eng.srt")`` derived ``ENG_SRT_*`` where the engine
    registered ``env_prefix="ENG"``: ``ENG_PLUGINS`` and ``ENG_PLATFORM`` were never read, and
    the workers got the derived names too, unsaid.  None while that name's registered module
    is being imported (it is declaring the name itself) or loaded from here.
    """
    found = _registered(name)
    if not found or name in _LOADING:
        return None
    module = sys.modules.get(found[0].value.partition(":")[0].strip())
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None  # its own module, declaring it as it runs
    _LOADING.add(name)
    try:
        return load_registered(name)
    finally:
        _LOADING.discard(name)


def describe_unknown(name: str, declared: list[str]) -> str:
    registered = sorted({ep.name for ep in _metadata.entry_points(NAMESPACE_GROUP)})
    return (
        f"unknown namespace {name!r}: no installed engine registers it (registered: "
        f"{', '.join(registered) or 'none'}) and it is not declared in this process (declared: "
        f"{', '.join(declared) or 'none'})"
    )


def unknown_namespace(name: str, declared: list[str]) -> NamespaceError:
    return NamespaceError(
        f"{describe_unknown(name, declared)}. Register it with {registration_hint(name)}; or "
        "pass the Namespace object itself."
    )
