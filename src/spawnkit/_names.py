"""How spawnkit names a type in a message: one spelling everywhere; and when a name is one
slip from another (a did-you-mean).

A parent may be unable to import a child's exception type, and a user reads
the name to find the class, so the name is the importable ``module.Qualname``,
shortened to the bare name for builtins (``ValueError``, not
``builtins.ValueError``).
"""

from __future__ import annotations

__all__ = ["one_edit", "qualified_name"]


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


def one_edit(a: str, b: str) -> bool:
    """One character changed, added, dropped, or two neighbours swapped turns ``a`` into ``b``."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    i, n = 0, min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        swapped = a[i : i + 2] == b[i : i + 2][::-1] and a[i + 2 :] == b[i + 2 :]
        return swapped or a[i + 1 :] == b[i + 1 :]
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    return longer[i + 1 :] == shorter[i:]
