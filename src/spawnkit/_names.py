"""How spawnkit names a type in a message: one spelling everywhere.

A parent may be unable to import a child's exception type, and a user reads
the name to find the class, so the name is the importable ``module.Qualname``,
shortened to the bare name for builtins (``ValueError``, not
``builtins.ValueError``).
"""

from __future__ import annotations

__all__ = ["qualified_name"]


def qualified_name(obj_or_type: object) -> str:
    """``module.Qualname`` of a type, or of an instance's type; builtins by bare name."""
    cls = obj_or_type if isinstance(obj_or_type, type) else type(obj_or_type)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
