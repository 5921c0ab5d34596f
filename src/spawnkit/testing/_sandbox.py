"""A per-test directory of real distributions, on ``sys.path`` for the test and its children.

Why a directory on ``sys.path`` and not an installation: writing a
``*.dist-info`` beside the modules is exactly what a wheel install leaves, so
``importlib.metadata`` finds the entry points the way it finds installed ones,
and the directory disappears with the test.  Spawned children receive the
parent's ``sys.path``; ``PYTHONPATH`` is extended as well so that children
started with ``subprocess`` (a fresh interpreter) see the same plugins.

Teardown is exact: the directory leaves ``sys.path`` and the path importer
cache, every module imported from it leaves ``sys.modules``, ``PYTHONPATH`` is
restored, and the entry-point cache is cleared so the next test rescans.
Every declared namespace's platform and plugin managers are reset on each
change as well: they cache decisions (a platform selection made before the
test's plugin existed) that would otherwise survive the new metadata.
"""

from __future__ import annotations

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
    """Whether ``module`` was loaded from a file (or package folder) under ``root``."""
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
    """Makes distributions in ``root``; :meth:`close` undoes every trace of them.

    Calling the sandbox writes one distribution (see :meth:`__call__`); the
    directory goes on ``sys.path`` at the first call, in front, so a test's
    plugin shadows an installed one of the same module name, as
    ``pip install -e`` of a checkout would.
    """

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
        """Write distribution ``name`` and make it visible to this process and its children.

        ``entry_points`` maps group -> {name: "module:attr"} for any group;
        ``modules`` maps dotted module names to source.  Entry-point *values*
        are written verbatim unless ``validate=True``: a malformed one is what
        a broken installed plugin looks like, and discovery then raises the
        same typed error (``PluginError``, ``PlatformPluginError``) a real
        worker would, instead of the fixture refusing it.
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

        Useful inside a test too, to import a plugin module afresh.
        """
        root = os.path.abspath(self.root)
        gone = [n for n, m in list(sys.modules.items()) if m is not None and _module_under(m, root)]
        for name in gone:
            sys.modules.pop(name, None)
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
