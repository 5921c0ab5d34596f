"""The singledispatch registries outside the sweep's reach that hold a hooked original.

The sweep rebinds a registry entry (``process.registry[int]``) where it finds the function in
a module of a target's own top-level package, or a module's global naming it.  An engine's
extension registering into another package's function through the module
(``import eng.serialize as ser`` then ``@ser.to_bytes.register(Blob)``), the very pattern
of libraries that serialize or dispatch by type, left the entry to the original: every call
of ``to_bytes(blob)`` ran the implementation unhooked while ``status()`` said applied.  The
counting that starts ``_hidden``'s climb saw the reference, but the climb names no path
through a function's ``__dict__`` or cells, which is where a registry lives.

Looked for only where the climb met a plain dict with ``object`` as a key (every registry
has one) on its way up from an original: every singledispatch function shares one code
object, so one heap pass (``gc.get_referrers`` of that code, 11-25 ms with torch loaded)
lists them all, and their registries are read for the originals.  Each entry found is
rebound through ``register`` as the sweep's are (``_propagate.DispatchTable``: journaled,
undone by ``unapply()``).
"""

from __future__ import annotations

import functools
import gc
import types
from collections.abc import Collection

from spawnkit._compat import TYPE_CHECKING
from spawnkit.hooks._stale import DispatchTable, dispatcher_of

if TYPE_CHECKING:
    from typing import Any

__all__ = ["registered"]


def registered(
    originals: list[tuple[Any, str, Any]], ignored: Collection[str]
) -> list[tuple[str, str, Any, Any, str]]:
    """The registry entries holding one of ``originals`` (``(original, target key, ...)``), as
    ``(module, label, registry, class, target key)`` items to rebind; none of a function of
    the hook modules ``ignored`` (a plugin keeping the original on purpose) or spawnkit's."""
    wanted = {id(o): key for o, key, _ in originals if type(o) is types.FunctionType}
    if not wanted:
        return []
    code = getattr(functools.singledispatch(len), "__code__", None)
    out: list[tuple[str, str, Any, Any, str]] = []
    for function in gc.get_referrers(code) if code is not None else ():
        if type(function) is not types.FunctionType or dispatcher_of(function) is not function:
            continue
        module = str(function.__module__)
        if module in ignored or module.partition(".")[0] == "spawnkit":
            continue
        registry = function.__dict__.get("registry")
        if type(registry) is not types.MappingProxyType:
            continue
        for cls, impl in list(registry.items()):
            key = wanted.get(id(impl))
            if key is not None:
                label = f"{function.__qualname__}.registry[{getattr(cls, '__qualname__', cls)}]"
                out.append((module, label, DispatchTable(function), cls, key))
    return out
