"""PEP 562 lazy exports: workers import the packages before hooks apply, so no eager re-exports."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["load_export"]


def load_export(package_globals: dict[str, Any], exports: Mapping[str, str], name: str) -> Any:
    """The attribute ``name`` of module ``exports[name]``, cached in ``package_globals``."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {package_globals['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    package_globals[name] = value
    return value
