"""A per-test directory of real distributions, on ``sys.path`` for the test and its children.

``PYTHONPATH`` is extended too, for ``subprocess`` children.  Teardown is exact: ``sys.path``,
the importer cache, ``sys.modules``, ``PYTHONPATH`` and the entry-point cache are restored, and
every namespace's platform and plugin managers are reset (they cache earlier decisions).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from spawnkit import _metadata
from spawnkit.testing._dists import Distribution, write_distribution
from spawnkit.testing._env import EnvOverlay, reset_all_namespaces

__all__ = ["DistSandbox"]


def _module_under(module: ModuleType, root: str) -> bool:
    prefix = root.rstrip(os.sep) + os.sep
    spec = getattr(module, "__spec__", None)
    candidates: list[str] = []
    origin = getattr(spec, "origin", None) if spec is not None else None
    if isinstance(origin, str):
        candidates.append(origin)
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        candidates.append(file)
    locations = getattr(spec, "submodule_search_locations", None) if spec is not None else None
    if locations is not None:
        try:
            candidates.extend(str(loc) for loc in locations)
        except TypeError:  # pragma: no cover - exotic namespace path objects
            pass
    return any(os.path.abspath(c).startswith(prefix) for c in candidates)


class DistSandbox:
    """Makes distributions in ``root``, first on ``sys.path``; :meth:`close` undoes all."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.distributions: list[Distribution] = []
        self._env = EnvOverlay()
        self._active = False

    def __call__(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        entry_points: Mapping[str, Mapping[str, str]] | None = None,
        modules: Mapping[str, str] | None = None,
        validate: bool = False,
    ) -> Distribution:
        """Write distribution ``name``, visible to this process and its children.

        Entry-point values are written verbatim unless ``validate=True`` (as broken plugins have).
        """
        dist = write_distribution(
            self.root, name, version, entry_points=entry_points, modules=modules, validate=validate
        )
        self.activate()
        self.distributions.append(dist)
        return dist

    def activate(self) -> None:
        """Put ``root`` on ``sys.path`` and ``PYTHONPATH`` (idempotent)."""
        root = str(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        if root not in sys.path:
            sys.path.insert(0, root)
        if not self._active:
            old = os.environ.get("PYTHONPATH")
            self._env.set("PYTHONPATH", root if not old else root + os.pathsep + old)
            self._active = True
        importlib.invalidate_caches()
        _metadata.clear_cache()
        reset_all_namespaces()

    def purge_modules(self) -> list[str]:
        """Drop every module imported from ``root`` out of ``sys.modules``; returns their names.

        Their bytecode caches under ``root`` go too: a source rewritten within the same second
        at the same size (``X = 1`` -> ``X = 2``) passes the ``.pyc``'s mtime-and-size check,
        and the reimport would silently run the old code.
        """
        root = os.path.abspath(self.root)
        prefix = root.rstrip(os.sep) + os.sep
        gone = [n for n, m in list(sys.modules.items()) if m is not None and _module_under(m, root)]
        for name in gone:
            module = sys.modules.pop(name, None)
            cached = getattr(getattr(module, "__spec__", None), "cached", None)
            if isinstance(cached, str) and cached.startswith(prefix):
                with contextlib.suppress(OSError):  # not written (-B): nothing to drop
                    os.remove(cached)
        return sorted(gone)

    def close(self) -> None:
        """Remove ``root`` from ``sys.path`` and the import system; restore ``PYTHONPATH``."""
        root = str(self.root)
        while root in sys.path:
            sys.path.remove(root)
        sys.path_importer_cache.pop(root, None)
        self.purge_modules()
        self._env.undo()
        self._active = False
        importlib.invalidate_caches()
        _metadata.clear_cache()
        reset_all_namespaces()
