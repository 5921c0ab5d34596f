"""Where each module was first imported, and which part of a worker's start that was.

The import guard's recording half (:mod:`spawnkit.bootstrap.guard` re-exports it): a finder at
``sys.meta_path[0]`` that notes the first frame and bootstrap step of each new module, and the
windows (unpickling, preload, ``__main__``, a plugin, a stage) a frame is read as.  Standard
library only: the child's command line imports it before anything else.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

from spawnkit import _steps
from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


class ImportSite(NamedTuple):
    """Where a module was first imported: the importing frame and the bootstrap step then."""

    module: str
    filename: str
    lineno: int
    function: str
    step: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"

    @property
    def phase(self) -> str:
        """Former name of :attr:`step`."""
        return self.step

    def describe(self) -> str:
        """``file:line (in func) <why>``: the context that tells the user which code to move."""
        return f"{self.filename}:{self.lineno} (in {self.function}) {_context_of(self)}"


# module -> (filename, lineno, function, step); tuples, because this is the hot path.
_sites: dict[str, tuple[str, int, str, str]] = {}


# The modules already imported when the guard was first armed (interpreter start-up).
_at_arm: frozenset[str] | None = None


_armed_lock = threading.Lock()


def _importlib_init() -> str:
    import importlib

    return importlib.__file__ or ""


# The guard's own files (this one holds the recorder); lazy.py: a proxy resolving imports on
# behalf of the frame that touched it; _on_import.py:
# the hook finder, which asks the other finders (this one too) on behalf of the importer.
_SKIP_FILES = frozenset(
    {
        __file__,
        os.path.join(os.path.dirname(__file__), "guard.py"),
        os.path.join(os.path.dirname(__file__), "_guard_findings.py"),
        _importlib_init(),
        os.path.join(os.path.dirname(__file__), "lazy.py"),
        os.path.join(os.path.dirname(os.path.dirname(__file__)), "hooks", "_on_import.py"),
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
    }
)


class _FirstImportRecorder:
    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        # find_spec is only consulted for modules missing from sys.modules, so the
        # last attempt recorded is the one that succeeded; or for importlib.reload(target),
        # which is no first import.
        if target is not None:
            return None
        frame: Any = sys._getframe(1)
        while frame is not None:  # out of the import machinery, one set lookup a frame
            filename = frame.f_code.co_filename
            if filename not in _SKIP_FILES and not filename.startswith("<frozen importlib"):
                break
            frame = frame.f_back
        now = _steps._step
        if frame is None:
            _sites[name] = ("<unknown>", 0, "?", now)
        else:
            _sites[name] = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, now)
        return None

    @staticmethod
    def invalidate_caches() -> None:
        return None


_RECORDER = _FirstImportRecorder()


def arm() -> None:
    """Start recording first imports; idempotent, and keeps the recorder first in ``meta_path``."""
    global _at_arm
    with _armed_lock:
        if _at_arm is None:
            _at_arm = frozenset(sys.modules)
        if sys.meta_path and sys.meta_path[0] is _RECORDER:
            return
        if _RECORDER in sys.meta_path:
            sys.meta_path.remove(_RECORDER)
        sys.meta_path.insert(0, _RECORDER)


def disarm() -> None:
    """Stop recording (tests and benchmarks); what was recorded is kept."""
    with _armed_lock:
        while _RECORDER in sys.meta_path:
            sys.meta_path.remove(_RECORDER)


def armed() -> bool:
    return _RECORDER in sys.meta_path


def first_import(module: str) -> ImportSite | None:
    """Where ``module`` was first imported, or ``None`` if that happened before :func:`arm`."""
    site = _sites.get(module)
    if site is None:
        return None
    return ImportSite(module, *site)


def _main_files() -> set[str]:
    files = set()
    for name in ("__main__", "__mp_main__"):
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if isinstance(path, str):
            files.add(os.path.abspath(path))
    return files


#: Where an import (or a lazy proxy's use) happened, as ``window_of`` names it.
UNPICKLING, PRELOAD, MAIN, STARTUP, PLUGIN, STAGE, PLACED, OTHER = (
    "unpickling",
    "preload",
    "main",
    "startup",
    "plugin",
    "stage",
    "placed",
    "other namespace",
)


def _is_unpickler(filename: str) -> bool:
    fname = filename.replace("\\", "/")
    # spawn's, and where a torchrun rank (spec file) and a Ray actor (its bytes) unpickle a spec
    return fname.endswith(_UNPICKLERS)


_UNPICKLERS = (
    "multiprocessing/spawn.py",
    "multiprocess/spawn.py",
    "spawnkit/spec/signing.py",
    "spawnkit/scaleout/_ray_actor.py",
)


def _is_preload(filename: str) -> bool:
    fname = filename.replace("\\", "/")
    return fname.endswith(
        ("multiprocessing/forkserver.py", "multiprocess/forkserver.py", "protocol/warm_main.py")
    )


_OUTERMOST = frozenset({UNPICKLING, PRELOAD, MAIN})


_REEXEC_FUNCTIONS = frozenset({"prepare", "_fixup_main_from_path", "_fixup_main_from_name"})


def window_of(filename: str, step: str, function: str = "") -> str:
    """Which part of a worker's start a frame in ``filename`` ran in (one of the names above)."""
    if _is_unpickler(filename):
        return MAIN if function in _REEXEC_FUNCTIONS else UNPICKLING
    if _is_preload(filename):
        return PRELOAD
    if os.path.abspath(filename) in _main_files():
        return MAIN
    if step == STARTUP:
        return STARTUP
    return PLUGIN if _steps.split_step(step)[0] == PLUGIN else STAGE


def frame_window(frame: Any, step: str) -> str:
    """The window of a running frame: the step once the bootstrap runs, else its callers say."""
    if step != STARTUP:
        return PLUGIN if _steps.split_step(step)[0] == PLUGIN else STAGE
    while frame is not None:
        window = window_of(frame.f_code.co_filename, step, frame.f_code.co_name)
        if window in _OUTERMOST:
            return window
        frame = frame.f_back
    return STARTUP


def _context_of(site: ImportSite) -> str:
    window = window_of(site.filename, site.step, site.function)
    if window == UNPICKLING:
        return "while unpickling the Process object and its arguments (multiprocessing.spawn)"
    if window == PRELOAD:
        return "by a forkserver preload"
    if window == MAIN:
        return "at module scope of the launching script, which spawn re-executes in every worker"
    if window == STARTUP:
        return "before the bootstrap started"
    if window == PLUGIN:
        return f"by the code of {_steps.split_step(site.step)[1]} while it loaded"
    return f"during the bootstrap stage {site.step!r}"


def _chain_sites(site: ImportSite, limit: int = 6) -> list[ImportSite]:
    """Follow ``file -> module that file is -> where that module was imported`` upwards."""
    by_file: dict[str, str] = {}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if isinstance(path, str):
            by_file.setdefault(os.path.abspath(path), name)
    sites: list[ImportSite] = []
    seen: set[str] = set()
    current: ImportSite | None = site
    while current is not None and len(sites) < limit:
        sites.append(current)
        if window_of(current.filename, current.step, current.function) in _OUTERMOST:
            break  # spawn's own modules are not part of the user's chain
        owner = by_file.get(os.path.abspath(current.filename))
        if owner is None or owner in seen or owner in ("__main__", "__mp_main__"):
            break
        seen.add(owner)
        current = first_import(owner)
    return sites


def _chain_window(sites: list[ImportSite]) -> tuple[str, str]:
    """(window, step) of the import that started a chain: what the fix must address."""
    if not sites:
        return STARTUP, ""
    first = sites[0]
    if first.step != STARTUP:
        return window_of(first.filename, first.step, first.function), first.step
    for s in sites:
        window = window_of(s.filename, s.step, s.function)
        if window in _OUTERMOST:
            return window, s.step
    return STARTUP, first.step


def _plugin_import(
    module: str, regs: list[Any], site: ImportSite | None, plugin_imports: Mapping[str, str]
) -> dict[str, Any]:
    """A target module plugin code imported while loading: fine, listed in the report."""
    plugin = plugin_imports.get(module)
    if plugin is None and site is not None:
        kind, name = _steps.split_step(site.step)
        plugin = name if kind == PLUGIN else None
    return {
        "module": module,
        "plugin": plugin or "plugin code",
        "first_import": site.describe() if site else "",
        "targets": sorted({str(r.target) for r in regs}),
    }
