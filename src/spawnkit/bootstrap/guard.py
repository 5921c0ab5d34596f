"""The import guard: fail fast when a hook target was imported before its hooks could exist.

A hook patches an attribute of a module.  Code that ran ``from engine.sched
import Scheduler`` *before* the patch holds the original object forever, and
nothing at run time says so: the plugin "works" on some ranks and silently not
on others.  In a spawned worker the usual culprits run before spawnkit does:
the launching script re-executed as ``__mp_main__``, the unpickled Process
arguments, a forkserver preload, or the platform's initialisation.

So the guard has two halves:

* :func:`arm` puts a recording finder at ``sys.meta_path[0]`` as early as the
  child's command line allows.  It never finds anything (``find_spec`` returns
  ``None``); it only notes, for each module not yet in ``sys.modules``, the
  first frame outside the import machinery and the bootstrap phase at the
  time.  That costs one short frame walk per *new* module, nothing per
  repeated import.
* :func:`check` runs once the targets are known (after plugins loaded): every
  target module that was already imported when plugin loading began is a
  violation, reported with where it was first imported, the hooks that it
  defeats, the modules holding originals and the fixes.  Target modules that
  plugin code itself imported while loading are fine (hook application covers
  them) and are listed instead.

Standard library only: this module is imported by the child's command line
before anything else.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from spawnkit.errors import ConfigError, ImportGuardError

__all__ = [
    "POLICIES",
    "GuardResult",
    "ImportGuardWarning",
    "ImportSite",
    "arm",
    "armed",
    "check",
    "disarm",
    "first_import",
    "mark_plugins_began",
    "phase",
    "resolve_policy",
    "set_phase",
]

POLICIES = ("error", "warn", "off")


class ImportGuardWarning(RuntimeWarning):
    """Emitted instead of ``ImportGuardError`` when the guard policy is ``warn``."""


class ImportSite(NamedTuple):
    """Where a module was first imported: the importing frame and the bootstrap phase then."""

    module: str
    filename: str
    lineno: int
    function: str
    phase: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"

    def describe(self) -> str:
        """``file:line (in func) <why>``: the context that tells the user which code to move."""
        return f"{self.filename}:{self.lineno} (in {self.function}) {_context_of(self)}"


# module -> (filename, lineno, function, phase); tuples, because this is the hot path.
_sites: dict[str, tuple[str, int, str, str]] = {}
_phase = "startup"
_armed_lock = threading.Lock()
_plugins_began: frozenset[str] | None = None


def _is_machinery(filename: str) -> bool:
    return filename.startswith("<frozen importlib") or filename in _SKIP_FILES


def _importlib_init() -> str:
    import importlib

    return importlib.__file__ or ""


_SKIP_FILES = frozenset({__file__, _importlib_init()})


class _FirstImportRecorder:
    """A meta-path finder that finds nothing and records who asked (see module docstring)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        # find_spec is only consulted for modules missing from sys.modules, so the
        # last attempt recorded is the one that succeeded.
        frame: Any = sys._getframe(1)
        while frame is not None and _is_machinery(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            _sites[name] = ("<unknown>", 0, "?", _phase)
        else:
            _sites[name] = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, _phase)
        return None

    @staticmethod
    def invalidate_caches() -> None:
        return None


_RECORDER = _FirstImportRecorder()


def arm() -> None:
    """Start recording first imports; idempotent, and keeps the recorder first in ``meta_path``."""
    with _armed_lock:
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


def set_phase(name: str) -> str:
    """Label the imports that follow (a stage or ``plugin:<name>``); returns the previous label."""
    global _phase
    previous, _phase = _phase, name
    return previous


@contextmanager
def phase(name: str) -> Iterator[None]:
    """``set_phase`` for a block, restored afterwards even when the block raises."""
    previous = set_phase(name)
    try:
        yield
    finally:
        set_phase(previous)


def current_phase() -> str:
    return _phase


def mark_plugins_began() -> frozenset[str]:
    """Snapshot ``sys.modules`` as plugin loading starts: what :func:`check` calls "too early"."""
    global _plugins_began
    _plugins_began = frozenset(sys.modules)
    return _plugins_began


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


def _context_of(site: ImportSite) -> str:
    """Say which part of the worker's start made the import, in the user's terms."""
    fname = site.filename.replace("\\", "/")
    if fname.endswith("multiprocessing/spawn.py"):
        return "while unpickling the Process object and its arguments (multiprocessing.spawn)"
    if fname.endswith("multiprocessing/forkserver.py"):
        return "by a forkserver preload"
    if os.path.abspath(site.filename) in _main_files():
        return "at module scope of the launching script, which spawn re-executes in every worker"
    if site.phase == "startup":
        return "before the bootstrap started"
    if site.phase.startswith("plugin:"):
        return f"by the code of {site.phase[7:]} while it loaded"
    return f"during the bootstrap stage {site.phase!r}"


def _chain(site: ImportSite, limit: int = 6) -> list[str]:
    """Follow ``file -> module that file is -> where that module was imported`` upwards."""
    by_file: dict[str, str] = {}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if isinstance(path, str):
            by_file.setdefault(os.path.abspath(path), name)
    chain: list[str] = []
    seen: set[str] = set()
    current: ImportSite | None = site
    while current is not None and len(chain) < limit:
        chain.append(f"{current.module} <- {current.filename}:{current.lineno}")
        owner = by_file.get(os.path.abspath(current.filename))
        if owner is None or owner in seen or owner in ("__main__", "__mp_main__"):
            break
        seen.add(owner)
        current = first_import(owner)
    return chain


def resolve_policy(
    default: str, env_value: str | None, override: str | None = None, *, var: str = ""
) -> str:
    """``ProcessSpec.guard_policy`` beats the namespace's variable, which beats its default.

    ``var`` is the namespace's variable name, so a bad value is reported as
    the setting the user typed (``SPAWNKIT_IMPORT_GUARD='warnn'``).
    """
    origins = (
        ("ProcessSpec.guard_policy", override),
        (var or "the environment", env_value),
        ("the namespace's guard_policy", default),
    )
    for i, (origin, value) in enumerate(origins):
        if value is None or (i == 1 and not value.strip()):
            continue
        policy = value.strip().lower()
        if policy not in POLICIES:
            raise ConfigError(
                f"{origin}={value!r} is not an import guard policy; use 'error' (the "
                "default), 'warn' or 'off'.",
                setting=origin,
            )
        return policy
    return "error"


@dataclass
class GuardResult:
    """What :func:`check` found, as plain dicts so the report pickles anywhere."""

    policy: str
    armed: bool
    violations: list[dict[str, Any]] = field(default_factory=list)
    plugin_imports: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "armed": self.armed,
            "violations": [dict(v) for v in self.violations],
            "plugin_imports": [dict(a) for a in self.plugin_imports],
        }


def _resolve_loaded(target: str) -> tuple[bool, Any]:
    """Find ``target``'s current object among *already imported* modules, importing nothing."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        mod = sys.modules.get(".".join(parts[:cut]))
        if mod is None:
            continue
        obj: Any = mod
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False, None
        return True, obj
    return False, None


def _scan_bindings(target: str, home: str) -> list[tuple[str, str]]:
    """Modules other than ``home`` whose globals hold ``target``'s object itself."""
    found, obj = _resolve_loaded(target)
    if not found or isinstance(obj, (int, str, bytes, float, bool, type(None))):
        return []
    pairs: list[tuple[str, str]] = []
    for name, mod in list(sys.modules.items()):
        if name == home or mod is None:
            continue
        try:
            namespace = vars(mod)
        except TypeError:
            continue
        for attr, value in list(namespace.items()):
            if value is obj:
                pairs.append((name, attr))
    return pairs


def _stale_bindings(registry: Any, target: str, home: str) -> list[tuple[str, str]]:
    finder = getattr(registry, "stale_bindings", None)
    if finder is not None:
        try:
            return [(str(m), str(a)) for m, a in finder(target)]
        except Exception:  # the report must not fail because a helper did; fall back
            pass
    return _scan_bindings(target, home)


def _source_text(reg: Any) -> str:
    source = getattr(reg, "source", None)
    return str(source) if source is not None else "an unknown source"


_FIX = (
    'Fix: move that import under `if __name__ == "__main__":` or into the function that '
    'uses it; or bind a lazy proxy instead (`Name = spawnkit.lazy("{module}:Name")`); or, '
    'if the import is in a plugin\'s hook module, give the hook as a "module:qualname" string. '
    "To only warn, set {var}=warn (or ProcessSpec.guard_policy)."
)


def check(
    namespace: Any,
    registry: Any,
    policy: str,
    *,
    before: Collection[str] | None = None,
    plugin_imports: Mapping[str, str] | None = None,
) -> GuardResult:
    """Classify every hook target module; raise ``ImportGuardError`` when policy is ``error``.

    ``before`` is the set of modules present when plugin loading began
    (default: the last :func:`mark_plugins_began` snapshot, else everything
    imported now).  ``plugin_imports`` maps a module a plugin imported while
    loading to that plugin's name, for the report.
    """
    result = GuardResult(policy=policy, armed=armed())
    if policy == "off":
        return result
    if before is None:
        before = _plugins_began if _plugins_began is not None else frozenset(sys.modules)
    plugin_imports = plugin_imports or {}
    targets_by_module: Mapping[str, list[Any]] = registry.target_modules()
    for module in sorted(targets_by_module):
        regs = targets_by_module[module]
        if module not in sys.modules:
            continue
        site = first_import(module)
        targets = sorted({str(r.target) for r in regs})
        hooks = [
            f"{r.target} ({getattr(getattr(r, 'hook_type', None), 'name', '?')} from "
            f"{_source_text(r)})"
            for r in regs
        ]
        if module not in before:
            plugin = plugin_imports.get(module)
            if plugin is None and site is not None and site.phase.startswith("plugin:"):
                plugin = site.phase[7:]
            result.plugin_imports.append(
                {
                    "module": module,
                    "plugin": plugin or "plugin code",
                    "first_import": site.describe() if site else "",
                    "targets": targets,
                }
            )
            continue
        bindings: list[str] = []
        for target in targets:
            bindings.extend(f"{m}.{a}" for m, a in _stale_bindings(registry, target, module))
        result.violations.append(
            {
                "module": module,
                "targets": targets,
                "hooks": hooks,
                "sources": sorted({_source_text(r) for r in regs}),
                "first_import": site.describe() if site else _unknown_site(),
                "filename": site.filename if site else "",
                "lineno": site.lineno if site else 0,
                "chain": _chain(site) if site else [],
                "stale_bindings": sorted(set(bindings)),
            }
        )
    if result.violations:
        message = _message(namespace, result.violations)
        if policy == "error":
            raise ImportGuardError(message, findings=result.violations, stage="load_plugins")
        warnings.warn(message, ImportGuardWarning, stacklevel=2)
        import logging

        logging.getLogger("spawnkit.bootstrap").warning("%s", message)
    return result


def _unknown_site() -> str:
    if armed():
        return "before the import guard was armed (interpreter start-up or sitecustomize)"
    return (
        "unknown: the import guard was not armed in this process; start workers through "
        "spawnkit (spawn_with_plugins, or spawnkit.bootstrap._contexts.spawn_context()) to "
        "record where"
    )


def _message(namespace: Any, violations: list[dict[str, Any]]) -> str:
    ns_name = getattr(namespace, "name", str(namespace))
    config = getattr(namespace, "config", None)
    var = getattr(config, "guard_var", "the namespace's guard variable")
    n = len(violations)
    lines = [
        f"import guard ({ns_name}): {n} hook target module{'s' if n > 1 else ''} "
        "imported before plugins were loaded; code bound to the originals there would never "
        "run the hooks."
    ]
    for v in violations:
        lines.append(f"- module {v['module']!r}, first imported at {v['first_import']}")
        if len(v["chain"]) > 1:
            lines.append("  import chain: " + " ; ".join(v["chain"]))
        lines.append("  hooks it defeats: " + "; ".join(v["hooks"]))
        if v["stale_bindings"]:
            lines.append(
                "  direct references to originals (would stay unpatched): "
                + ", ".join(v["stale_bindings"])
            )
    lines.append(_FIX.format(module=violations[0]["module"], var=var))
    return "\n".join(lines)
