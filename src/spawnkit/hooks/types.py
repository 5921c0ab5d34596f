"""Plain data of the hook engine (standard library only, so users need not import the registry)."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from spawnkit._compat import TYPE_CHECKING
from spawnkit._exports import load_export
from spawnkit.spec._record import field, record

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.hooks._hints import HookOptions, HookState

__all__ = [
    "UNKNOWN_SOURCE", "AppliedTarget", "HookOptions", "HookSource", "HookState", "HookStatus",
    "HookType", "Registration", "current_plugin_source", "plugin_source",
]  # fmt: skip


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

    # Members are singletons, so identity is equality: hash in C instead of Enum's Python
    # ``__hash__`` (by name), which every hook-type dict lookup at apply time would call.
    __hash__ = object.__hash__


@record(frozen=True)
class HookSource:
    """The plugin (and distribution) a hook belongs to, so errors and reports can name it.

    ``platform``: a platform plugin registered it as its package was imported by platform
    discovery (``plugin_name`` is the platform's name); it is applied only in a process whose
    platform that is, as a worker, which imports only its own platform's package, does.
    """

    plugin_name: str
    dist_name: str | None = None
    dist_version: str | None = None
    platform: bool = False

    def __str__(self) -> str:
        kind = "platform plugin" if self.platform else "plugin"
        if self.dist_name is None:
            return f"{kind} {self.plugin_name!r}"
        if self.dist_version is None:
            return f"{kind} {self.plugin_name!r} ({self.dist_name})"
        return f"{kind} {self.plugin_name!r} ({self.dist_name} {self.dist_version})"


#: Source of hooks registered outside any plugin loader and without ``source=``.
UNKNOWN_SOURCE = HookSource("unknown")

#: Set by the plugin loader around a plugin's import and call, to attribute its registrations.
current_plugin_source: ContextVar[HookSource | None] = ContextVar(
    "spawnkit_current_plugin_source", default=None
)


@contextlib.contextmanager
def plugin_source(source: HookSource | None) -> Iterator[HookSource | None]:
    """Attribute every registration made inside the block to ``source`` (restored on raise)."""
    token = current_plugin_source.set(source)
    try:
        yield source
    finally:
        current_plugin_source.reset(token)


def describe_hook(hook: Callable[..., Any] | str) -> str:
    if isinstance(hook, str):
        return hook
    module = getattr(hook, "__module__", None)
    qualname = getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None)
    if qualname is None:
        return repr(hook)
    return f"{module}.{qualname}" if module else str(qualname)


@record(frozen=True)
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


@record(frozen=True)
class AppliedTarget:
    """A patched target as it stands now; ``hooks`` in registration order (last outermost)."""

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


@record(frozen=True)
class HookStatus:
    """One registration (or provided module, ``hook_type`` ``PROVIDE``) and where it stands."""

    target: str
    hook: str
    hook_type: str
    source: HookSource
    state: HookState
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "type": self.hook_type,
            "hook": self.hook,
            "source": str(self.source),
            "state": self.state,
            "reason": self.reason,
        }


def describe_callable(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        return repr(obj)
    return f"{module}:{qualname}" if module else str(qualname)


# Loaded on first use: they need ``typing``, which a cold worker does not import (_hints).
_HINTS = dict.fromkeys(("HookOptions", "HookState"), "spawnkit.hooks._hints")


def __getattr__(name: str) -> Any:
    return load_export(globals(), _HINTS, name)
