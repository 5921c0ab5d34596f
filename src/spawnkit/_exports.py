"""PEP 562 lazy exports shared by spawnkit's package ``__init__`` modules.

Workers import ``spawnkit`` and its subpackages before their hooks are
applied, so a package may not import its heavier submodules just to re-export
their names; each name is imported on first access and then cached in the
package's globals, so the lookup happens once.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
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
