"""Entry-point discovery, scanned once per process and read from metadata only.

``importlib.metadata.entry_points()`` rescans every distribution on every
call (several milliseconds with a hundred installed packages), and spawnkit
asks for two groups per namespace in every worker.  One scan per process,
grouped, is enough; nothing here imports a plugin module.

The cache is cleared in forked children (``os.register_at_fork``) because the
child's ``sys.path`` may differ, and by :func:`clear_cache` for tests that
install distributions at run time.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["EntryPointInfo", "clear_cache", "entry_points", "load_entry_point"]


@dataclass(frozen=True, slots=True)
class EntryPointInfo:
    """An entry point with the distribution that declared it (name and version)."""

    name: str
    value: str
    group: str
    dist: str
    version: str

    @property
    def module(self) -> str:
        return self.value.split(":", 1)[0].strip()

    @property
    def attr(self) -> str:
        return self.value.split(":", 1)[1].strip() if ":" in self.value else ""

    def describe(self) -> str:
        """``name = value`` from ``dist version``: what error messages say."""
        return f"{self.name!r} = {self.value!r} from distribution {self.dist} {self.version}"


_lock = threading.Lock()
_cache: dict[str, tuple[EntryPointInfo, ...]] | None = None


def _scan() -> dict[str, tuple[EntryPointInfo, ...]]:
    grouped: dict[str, list[EntryPointInfo]] = {}
    seen_dists: set[str] = set()
    for dist in md.distributions():
        meta: Any = dist.metadata
        name = (meta["Name"] if meta is not None else None) or "<unknown>"
        # The first distribution of a name on sys.path wins, as importlib does.
        key = name.lower().replace("-", "_").replace(".", "_")
        if key in seen_dists:
            continue
        seen_dists.add(key)
        version = (meta["Version"] if meta is not None else None) or "?"
        for ep in dist.entry_points:
            grouped.setdefault(ep.group, []).append(
                EntryPointInfo(ep.name, ep.value, ep.group, name, version)
            )
    return {g: tuple(eps) for g, eps in grouped.items()}


def entry_points(group: str) -> tuple[EntryPointInfo, ...]:
    """Every entry point of ``group`` across installed distributions, in ``sys.path`` order."""
    global _cache
    cache = _cache
    if cache is None:
        with _lock:
            if _cache is None:
                _cache = _scan()
            cache = _cache
    return cache.get(group, ())


def clear_cache() -> None:
    """Forget the scan, so distributions written since are seen (tests, forked children)."""
    global _cache
    with _lock:
        _cache = None
    importlib.invalidate_caches()


def load_entry_point(ep: EntryPointInfo) -> Any:
    """Import the entry point's module and walk its attribute path; errors are left raw.

    Callers wrap failures with their own context (platform or plugin, stage).
    """
    obj: Any = importlib.import_module(ep.module)
    for part in filter(None, ep.attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _after_fork() -> None:
    global _cache
    _cache = None


os.register_at_fork(after_in_child=_after_fork)
