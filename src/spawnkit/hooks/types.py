"""Plain data of the hook engine: hook types, where a hook came from, what was registered.

Kept free of any engine logic (and of any import beyond the standard library)
so that the plugin loader, the import guard and the bootstrap report can use
these types without pulling the registry in.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

__all__ = [
    "UNKNOWN_SOURCE",
    "AppliedTarget",
    "HookOptions",
    "HookSource",
    "HookState",
    "HookStatus",
    "HookType",
    "Registration",
    "current_plugin_source",
    "plugin_source",
]


class HookType(enum.Enum):
    """How a hook combines with its target.

    * ``BEFORE``  ``fn(*args, **kwargs) -> (args, kwargs) | None``
    * ``AFTER``   ``fn(result, *args, **kwargs) -> new_result | None``
    * ``AROUND``  ``fn(original_fn, *args, **kwargs)``
    * ``REPLACE`` a function called instead of the target, or a class replacing a class
    """

    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


class HookOptions(TypedDict, total=False):
    """The keywords every ``plugin_hook`` decorator passes on to ``HookRegistry.register``."""

    on_import: bool
    optional: bool
    condition: Callable[[], object] | None


@dataclass(frozen=True)
class HookSource:
    """The plugin (and distribution) a hook belongs to, so errors and reports can name it."""

    plugin_name: str
    dist_name: str | None = None
    dist_version: str | None = None

    def __str__(self) -> str:
        if self.dist_name is None:
            return f"plugin {self.plugin_name!r}"
        if self.dist_version is None:
            return f"plugin {self.plugin_name!r} ({self.dist_name})"
        return f"plugin {self.plugin_name!r} ({self.dist_name} {self.dist_version})"


#: Source of hooks registered outside any plugin loader and without ``source=``.
UNKNOWN_SOURCE = HookSource("unknown")

#: Set by the plugin loader around importing and calling a plugin, so that every
#: registration made meanwhile (decorators at import time included) is attributed.
current_plugin_source: ContextVar[HookSource | None] = ContextVar(
    "spawnkit_current_plugin_source", default=None
)


@contextlib.contextmanager
def plugin_source(source: HookSource | None) -> Iterator[HookSource | None]:
    """Attribute every registration made inside the block to ``source``.

    A context manager rather than a bare ``set`` so that the previous value comes
    back even when the plugin raises, and nested loaders stack correctly.
    """
    token = current_plugin_source.set(source)
    try:
        yield source
    finally:
        current_plugin_source.reset(token)


def describe_hook(hook: Callable[..., Any] | str) -> str:
    """``module.qualname`` of a hook (or its string form) for messages and reports."""
    if isinstance(hook, str):
        return hook
    module = getattr(hook, "__module__", None)
    qualname = getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None)
    if qualname is None:
        return repr(hook)
    return f"{module}.{qualname}" if module else str(qualname)


@dataclass(frozen=True)
class Registration:
    """One ``register()`` call: ``seq`` orders hooks across the whole registry."""

    target: str
    hook: Callable[..., Any] | str
    hook_type: HookType
    source: HookSource
    seq: int
    on_import: bool = False
    optional: bool = False
    condition: Callable[[], object] | None = None

    @property
    def hook_name(self) -> str:
        return describe_hook(self.hook)

    def describe(self) -> str:
        """``AROUND hook pkg.mod.fn from plugin 'x' (dist 1.0)``: the phrase every message uses."""
        return f"{self.hook_type.name} hook {self.hook_name} from {self.source}"


@dataclass(frozen=True)
class AppliedTarget:
    """A patched target as it stands now: where it lives and the hooks in its chain.

    ``hooks`` is in registration order (the last is the outermost wrapper);
    ``kind`` is what was wrapped: ``function``, ``async function``, ``method``,
    ``classmethod``, ``staticmethod``, ``callable`` or ``class``.
    """

    target: str
    module: str
    qualname: str
    kind: str
    hooks: tuple[Registration, ...] = field(default=())
    propagated_to: tuple[tuple[str, str], ...] = field(default=())

    @property
    def sources(self) -> tuple[HookSource, ...]:
        seen: dict[HookSource, None] = {}
        for reg in self.hooks:
            seen.setdefault(reg.source, None)
        return tuple(seen)


#: Where a registration stands: ``applied`` (in its target's chain), ``pending`` (waiting
#: for ``apply_hooks()`` or, with ``on_import=True``, for its module's first import),
#: ``skipped`` (optional target missing, or condition false), ``failed`` (applying it
#: raised), ``provided`` (a module placed by ``provide_module``), ``partial`` (applied, but a
#: reference the stale-binding sweep could not rebind still calls the original).
HookState = Literal["applied", "pending", "skipped", "failed", "provided", "partial"]


@dataclass(frozen=True)
class HookStatus:
    """One registration (or provided module) and where it stands, for reports and doctor.

    ``hook_type`` is a ``HookType`` name, or ``PROVIDE`` for ``provide_module``;
    ``reason`` says why a hook is not applied (or how it was), in words a user acts on.
    """

    target: str
    hook: str
    hook_type: str
    source: HookSource
    state: HookState
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        """Plain strings, as ``BootstrapReport.hooks`` and ``doctor --json`` carry them."""
        return {
            "type": self.hook_type,
            "hook": self.hook,
            "source": str(self.source),
            "state": self.state,
            "reason": self.reason,
        }


def describe_callable(obj: Any) -> str:
    """``pkg.compat:is_hip``: how a condition or factory is named in reasons and errors."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        return repr(obj)
    return f"{module}:{qualname}" if module else str(qualname)
