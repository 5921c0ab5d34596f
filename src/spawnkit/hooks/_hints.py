"""The hook engine's names that exist for type checkers: a ``TypedDict`` and a ``Literal``.

Apart from :mod:`spawnkit.hooks.types` because building them needs ``typing``, which a cold
worker does not import (issue #23); ``spawnkit.hooks`` and ``spawnkit.hooks.types`` still give
both names, loaded from here on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypedDict

__all__ = ["HookOptions", "HookState"]


class HookOptions(TypedDict, total=False):
    """The keywords every ``plugin_hook`` decorator passes on to ``HookRegistry.register``."""

    on_import: bool
    optional: bool
    condition: Callable[[], object] | None


#: Where a registration stands (README "Hooks a real plugin needs"); ``partial``: applied, but a
#: reference the stale-binding sweep could not rebind still calls the original.
HookState = Literal["applied", "pending", "skipped", "failed", "provided", "partial"]
