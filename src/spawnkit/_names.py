"""How spawnkit names a type in a message: one spelling everywhere.

A parent may be unable to import a child's exception type, and a user reads
the name to find the class, so the name is the importable ``module.Qualname``,
shortened to the bare name for builtins (``ValueError``, not
``builtins.ValueError``).
"""

from __future__ import annotations

__all__ = ["qualified_name"]


def qualified_name(obj_or_type: object, kind: object = None) -> str:
    """``module.Qualname`` of a type, or of an instance's type; builtins by bare name.

    An error with a ``kind`` (``spawnkit.errors.KINDS``) is named with it,
    ``spawnkit.errors.SpecError[signature]``: the case a former class named.  A caller
    holding a worker's exception passes its type and ``kind`` instead, so the exception
    itself goes no further than the module that records it.
    """
    cls = obj_or_type if isinstance(obj_or_type, type) else type(obj_or_type)
    if kind is None:
        kind = "" if obj_or_type is cls else getattr(obj_or_type, "kind", "")
    suffix = f"[{kind}]" if kind and isinstance(kind, str) else ""
    if cls.__module__ == "builtins":
        return cls.__qualname__ + suffix
    return f"{cls.__module__}.{cls.__qualname__}{suffix}"
