"""A module ``provide_module()`` placed in an isolated test after the test's code missed it.

Engine code such as ``try: import aiter.gemm / except ImportError: HAS_GEMM = False`` that runs
before the apply takes its fallback for good, while ``status()`` says ``provided``.  A worker
stops for that (``guard.check_provisions``, from its first-import recorder); in-process, with
``isolated_hooks``, nothing was said.  So the fixture records, from its setup on, which module
names code outside spawnkit asked the import system for, and when the test body returns it
names each module an isolated registry placed (one that was absent) that such an import had
asked for first.  Imports before the fixture's setup (the test module's top, at collection)
are not seen.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spawnkit.hooks.registry import HookRegistry

__all__ = ["Missed", "TriedImports"]

_SPAWNKIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_IMPORTLIB = os.path.dirname(importlib.__file__ or "") + os.sep
# Frames that import on behalf of another (spawnkit's lazy proxy, the hook engine's finder).
_ON_BEHALF = (
    os.path.join(_SPAWNKIT, "bootstrap", "lazy.py"),
    os.path.join(_SPAWNKIT, "hooks", "_on_import.py"),
)

Missed = tuple[str, str, str]  # (registry name, module provided, "file:line (in function)")


class TriedImports:
    """A ``sys.meta_path`` finder that finds nothing and notes who first asked for each name."""

    def __init__(self) -> None:
        self.tried: dict[str, str] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if target is not None or name in self.tried:
            return None
        frame: Any = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not (
                filename.startswith(("<frozen", _IMPORTLIB)) or filename in _ON_BEHALF
            ):
                break
            frame = frame.f_back
        if frame is not None and not frame.f_code.co_filename.startswith(_SPAWNKIT):
            code = frame.f_code
            self.tried[name] = f"{code.co_filename}:{frame.f_lineno} (in {code.co_name})"
        return None

    @staticmethod
    def invalidate_caches() -> None:
        return None

    def arm(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def disarm(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)

    def missed(self, registry: HookRegistry) -> list[Missed]:
        """The modules ``registry`` provided (absent before) that recorded code asked for first."""
        from spawnkit.hooks._journal import ABSENT, ModuleChange

        found: list[Missed] = []
        for name, done in list(registry._state.provided.items()):
            if done.state != "provided":
                continue
            placed = {
                c.name for c in done.changes if isinstance(c, ModuleChange) and c.before is ABSENT
            }
            parts = name.split(".")
            for i in range(len(parts), 0, -1):  # a missing top package is asked for first
                sub = ".".join(parts[:i])
                if sub not in placed:
                    break  # present before: an import that failed asked for a deeper name
                site = self.tried.get(sub)
                if site is not None:
                    found.append((registry.name, name, site))
                    break
        return found


def message(missed: list[Missed], guard_var: str) -> str:
    """The failure: which module, where it was missed, what that did, and the fix."""
    lines = [
        f"isolated_hooks: provide_module() placed {len(missed)} module(s) when the hooks were "
        "applied that this test's code had already tried to import, and missed:",
        *(f"  - {name!r} (registry {reg!r}): tried at {site}" for reg, name, site in missed),
        "That code took its ImportError path (a fallback, a feature turned off) for the rest "
        "of the process while status() says 'provided'; a worker stops with ImportGuardError "
        "for the same order. Fix: apply the hooks (provide_module(...), then apply_hooks()) "
        "before the engine code that imports the module is first imported: import it inside "
        f"the test after apply_hooks(). To run anyway, set {guard_var}=warn (or off).",
    ]
    return "\n".join(lines)
