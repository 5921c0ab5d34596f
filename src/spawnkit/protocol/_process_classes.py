"""The Process classes a child unpickles by reference, apart from the launcher's code.

A spawned worker's ``Process`` arrives pickled by reference to a module attribute; when that
module was ``popen.py`` every worker imported the launcher's half of the protocol (the guarded
command line, the Popen classes, the launch context: 32 kB of bytecode) to read one class
whose ``_Popen`` it never calls (issue #23).  Here each class is built with a ``_Popen`` that
asks ``popen.py`` for its Popen only when a process is started, which only a launching process
does, and it has imported ``popen.py``, which hands its Popen factory over as it is imported.
"""

from __future__ import annotations

import importlib

from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: The four variants, by the module attribute that names each Process class:
#: (package, start method).  The names are stable because a child unpickles its
#: ``Process`` by reference.
_VARIANTS: dict[str, tuple[str, str]] = {
    "_StdSpawnProcess": ("multiprocessing", "spawn"),
    "_DillSpawnProcess": ("multiprocess", "spawn"),
    "_StdWarmProcess": ("multiprocessing", "forkserver"),
    "_DillWarmProcess": ("multiprocess", "forkserver"),
}

#: ``popen.popen_class``, put here by ``popen.py`` as it is imported (``use_popens``).
_POPENS: list[Callable[[str, str], type]] = []


def use_popens(popen_class: Callable[[str, str], type]) -> None:
    """The Popen of (package, start method) for the classes here: ``popen.py``'s, given on its
    import so that this module needs no import of it (it imports this one)."""
    _POPENS[:] = [popen_class]


class _LaunchersPopen:
    """A class's ``_Popen``: the launcher's Popen, built on first start and kept.

    Read as ``self._Popen(self)`` by ``BaseProcess.start`` like the staticmethod it stands
    for; an instance's own ``_Popen`` still wins (a non-data descriptor)."""

    def __init__(self, package: str, method: str, name: str) -> None:
        self.package, self.method, self.name = package, method, name
        self.popen: type | None = None

    def __get__(self, obj: object, owner: type | None = None) -> type:
        if self.popen is None:
            if not _POPENS:
                raise ConfigError(
                    f"spawnkit's Process class {self.name} ({self.package}, start method "
                    f"{self.method!r}) was started in a process that never imported "
                    "spawnkit.protocol.popen, which makes its Popen: a worker unpickles this "
                    "class but cannot start it; start workers through spawn_with_plugins() or "
                    "spawnkit.protocol.popen.spawn_context()",
                    setting="start_method",
                )
            self.popen = _POPENS[0](self.package, self.method)
        return self.popen


def _sub(package: str, name: str) -> Any:
    return importlib.import_module(f"{package}.{name}")


class LazyClasses:
    """Process classes that are module attributes with stable names, built on first access.

    A child unpickles its ``Process`` by reference; building lazily keeps a ``multiprocessing``
    worker from importing ``multiprocess``, dill or the forkserver machinery.
    """

    def __init__(self, module: str, variants: dict[str, tuple[str, str]], build: Any) -> None:
        self.module, self.variants, self.build = module, variants, build
        self.built: dict[str, type] = {}

    def get(self, name: str) -> type:
        if name not in self.variants:
            raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
        cls = self.built.get(name)
        if cls is None:
            cls = self.built[name] = self.build(name)
        return cls

    def variant(self, package: str, method: str) -> type:
        """The class for ``package`` and start ``method``."""
        return self.get(next(n for n, v in self.variants.items() if v == (package, method)))


def _process_class(name: str) -> type:
    """Build the Process class ``name`` of :data:`_VARIANTS`: the package's own, our Popen."""
    package, method = _VARIANTS[name]
    context = _sub(package, "context")
    base = context.SpawnProcess if method == "spawn" else context.ForkServerProcess
    namespace = {
        "_start_method": method,
        "_Popen": _LaunchersPopen(package, method, name),
        "__module__": __name__,
        "__qualname__": name,
    }
    return type(name, (base,), namespace)


classes = LazyClasses(__name__, _VARIANTS, _process_class)
__getattr__ = classes.get
