"""Whether a worker's payload check has anything to look for: the hooked constructors and the
class REPLACEs that build otherwise (see :mod:`spawnkit.bootstrap._payload_hooks`).

Apart from that module because every worker asks, and most find neither: then the check, the
pickle's class references and its messages, is never imported (issue #23).
"""

from __future__ import annotations

from operator import itemgetter, methodcaller

from spawnkit._compat import TYPE_CHECKING
from spawnkit.spec.payload import CONSTRUCTORS

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.bootstrap._payload_hooks import Replaced
    from spawnkit.hooks.types import AppliedTarget
    from spawnkit.namespace import Namespace

__all__ = ["hooked_constructors", "replaced_classes"]

_last, _split = itemgetter(2), methodcaller("rpartition", ".")


def hooked_constructors(namespace: Namespace) -> list[AppliedTarget]:
    """The applied targets that are constructors; most workers have none, and then the payload
    (the data the docs' walk follows) is never handed here.  The registered names are read
    first: the applied records are built only where one names a constructor."""
    named = namespace.hooks.registered_targets()
    if CONSTRUCTORS.isdisjoint(map(_last, map(_split, named))):  # C-level: a hundred targets
        return []
    return [
        applied
        for applied in namespace.hooks.applied_targets()
        if "." in applied.qualname and applied.qualname.rpartition(".")[2] in CONSTRUCTORS
    ]


def replaced_classes(namespace: Namespace) -> list[Replaced]:
    """The class REPLACEs whose replacement builds its objects otherwise than the original
    (it defines a constructor of its own): a payload object of that class, built by the
    original in the launcher, is unpickled here as the replacement without it."""
    return [
        (target, replacement, regs)
        for target, original, replacement, regs in namespace.hooks._replaced_classes()
        if isinstance(replacement, type) and _builds_otherwise(original, replacement)
    ]


def _builds_otherwise(original: Any, replacement: type) -> bool:
    for cls in replacement.__mro__[:-1]:  # object's own __init__ is everyone's
        if cls is original:
            return False
        if not CONSTRUCTORS.isdisjoint(vars(cls)):
            return True
    return False
