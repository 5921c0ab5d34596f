"""The import guard: fail fast when a hook target was imported before its hooks could exist.

Code that ran ``from engine.sched import Scheduler`` before the patch holds the original forever;
see README "The import guard and the lazy proxy".  :func:`arm` puts a recording finder at
``sys.meta_path[0]`` (it never finds anything; it notes the first frame and bootstrap step of
each *new* module); :func:`check` then reports every target imported before plugin loading
began.  Standard library only: the child's command line imports this before anything else.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Collection, Mapping

from spawnkit import _steps
from spawnkit._compat import TYPE_CHECKING
from spawnkit._plain import Plain
from spawnkit.bootstrap._first_imports import (
    _RECORDER as _RECORDER,
)
from spawnkit.bootstrap._first_imports import (
    MAIN as MAIN,
)
from spawnkit.bootstrap._first_imports import (
    OTHER as OTHER,
)
from spawnkit.bootstrap._first_imports import (
    PLACED as PLACED,
)
from spawnkit.bootstrap._first_imports import (
    PLUGIN as PLUGIN,
)
from spawnkit.bootstrap._first_imports import (
    PRELOAD as PRELOAD,
)
from spawnkit.bootstrap._first_imports import (
    STAGE as STAGE,
)
from spawnkit.bootstrap._first_imports import (
    STARTUP as STARTUP,
)
from spawnkit.bootstrap._first_imports import (
    UNPICKLING as UNPICKLING,
)
from spawnkit.bootstrap._first_imports import (
    ImportSite,
    _plugin_import,
    arm,
    armed,
    disarm,
    first_import,
)
from spawnkit.bootstrap._first_imports import (
    _sites as _sites,
)
from spawnkit.bootstrap._first_imports import (
    frame_window as frame_window,
)
from spawnkit.bootstrap._first_imports import (
    window_of as window_of,
)
from spawnkit.errors import ConfigError, ImportGuardError, ImportGuardWarning

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "POLICIES",
    "GuardResult",
    "ImportGuardWarning",
    "ImportSite",
    "arm",
    "armed",
    "check",
    "check_provisions",
    "check_stale",
    "disarm",
    "first_import",
    "mark_plugins_began",
    "resolve_policy",
    "set_step",
    "step",
    "tried_before",
]

POLICIES = ("error", "warn", "off")


# The step labels live below the hook engine, which sets them while plugins load.
set_step, step, current_step = _steps.set_step, _steps.step, _steps.current_step
mark_plugins_began = _steps.mark_plugins_began
# Former names of the three step functions, for callers outside spawnkit.
set_phase, phase, current_phase = set_step, step, current_step


def resolve_policy(
    default: str, env_value: str | None, override: str | None = None, *, var: str = ""
) -> str:
    """``ProcessSpec.guard_policy`` beats the variable ``var``, which beats its default."""
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


class GuardResult(Plain):
    """What :func:`check` found, as plain dicts so the report pickles anywhere.

    Plain, not a dataclass: its generated code would cost every cold worker ~1 ms
    (spawnkit._plain).
    """

    _fields = ("policy", "armed", "violations", "plugin_imports", "stale_holders")

    def __init__(
        self,
        policy: str,
        armed: bool,
        violations: list[dict[str, Any]] | None = None,
        plugin_imports: list[dict[str, Any]] | None = None,
        stale_holders: list[dict[str, str]] | None = None,
    ) -> None:
        self.policy, self.armed = policy, armed
        self.violations: list[dict[str, Any]] = [] if violations is None else violations
        self.plugin_imports: list[dict[str, Any]] = [] if plugin_imports is None else plugin_imports
        self.stale_holders: list[dict[str, str]] = [] if stale_holders is None else stale_holders

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "armed": self.armed,
            "violations": [dict(v) for v in self.violations],
            "plugin_imports": [dict(a) for a in self.plugin_imports],
            "stale_holders": [dict(h) for h in self.stale_holders],
        }


def check(
    namespace: Any,
    registry: Any,
    policy: str,
    *,
    before: Collection[str] | None = None,
    plugin_imports: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
    sweep_repairs: bool = True,
) -> GuardResult:
    """Classify every hook target module; raise ``ImportGuardError`` when policy is ``error``.

    ``before`` defaults to the :func:`mark_plugins_began` snapshot; ``extra`` names carriers.
    ``sweep_repairs=False``: a finding the sweep would repair still fails.
    """
    result = GuardResult(policy=policy, armed=armed())
    if policy == "off":
        return result
    if before is None:
        began = _steps.plugins_began()
        before = began if began is not None else frozenset(sys.modules)
    plugin_imports = plugin_imports or {}
    from spawnkit.hooks._queries import imported_target_modules  # loaded: the registry's
    targets_by_module: Mapping[str, list[Any]] = imported_target_modules(registry)
    early: list[tuple[str, list[Any], ImportSite | None]] = []
    for module in sorted(targets_by_module):
        if module not in sys.modules:
            continue
        regs = targets_by_module[module]
        site = first_import(module)
        if module not in before:
            result.plugin_imports.append(_plugin_import(module, regs, site, plugin_imports))
        else:
            early.append((module, regs, site))
    if early:
        from spawnkit.bootstrap._guard_findings import judge  # only with something to say

        judge(namespace, registry, policy, early, extra, sweep_repairs, result)
    return result


def check_stale(
    namespace: Any,
    holders: list[dict[str, str]],
    policy: str,
    *,
    stage: str = "apply_hooks",
    defined: Mapping[str, str] | None = None,
) -> None:
    """Report, per policy, what the stale-binding sweep could not rebind after ``apply_hooks()``
    (``stage`` ``apply_hooks``), or the targets replaced since (``resolve_entry``: the
    payload's and the entry's imports ran after the hooks).  ``defined``: target -> the
    module defining its original, imported before plugins loaded (a re-export's target)."""
    if not holders or policy == "off":
        return
    from spawnkit.bootstrap._guard_findings import (
        _defined_early_lines,
        _guard_var,
        _unrebound_lines,
    )

    ns_name = getattr(namespace, "name", str(namespace))
    n, s = len(holders), "s" if len(holders) > 1 else ""
    ending = ", so this worker stops." if policy == "error" else " (guard policy 'warn')."
    if stage == "apply_hooks":
        lines = _unrebound_lines(ns_name, holders, ending)
        lines += _defined_early_lines(holders, defined or {})
    else:
        lines = [
            f"import guard ({ns_name}): {n} hook target{s} {'were' if n > 1 else 'was'} "
            "replaced after the hooks were applied, by code the payload's or the entry's "
            f"imports ran; calls through {'them' if n > 1 else 'it'} skip the hooks{ending}"
        ]
        lines += [f"- {h['target']!r} at {h['module']}.{h['name']}: {h['kind']}" for h in holders]
        lines.append(
            "  Fix: hook what replaces it (the replacement's own name) instead, or make that "
            "replacement a plugin's REPLACE hook, so spawnkit applies it with the others."
        )
    if policy == "error":
        lines.append(
            f"To run anyway with these hooks ineffective, set {_guard_var(namespace)}=warn "
            "(or ProcessSpec.guard_policy='warn')."
        )
    message = "\n".join(lines)
    if policy == "error":
        from spawnkit.bootstrap.stages import Stage  # failure path only

        raise ImportGuardError(message, findings=list(holders), stage=Stage(stage).value)
    home = getattr(sys.modules.get(holders[0]["module"]), "__file__", None)
    warnings.warn_explicit(message, ImportGuardWarning, home or holders[0]["module"], 0)


#: spawnkit's own folder: its own lookups (``provide_module``'s ``find_spec``) are no user's
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def tried_before(names: Collection[str]) -> dict[str, ImportSite]:
    """Of the modules ``provide_module()`` is to place, those an import already tried, and
    failed (recorded, yet absent from ``sys.modules``): where, by the deepest name tried (a
    missing top package is the name the import system asks for first)."""
    out: dict[str, ImportSite] = {}
    for name in names:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            sub = ".".join(parts[:i])
            if sub in sys.modules:
                break  # present: an import that failed would have asked for a deeper name
            site = first_import(sub)
            if site is not None and not site.filename.startswith(_OWN):
                out[name] = site
                break
    return out


def check_provisions(namespace: Any, tried: Mapping[str, ImportSite], policy: str) -> None:
    """A module ``provide_module()`` placed at apply time that an import had already asked
    for, and missed: that code took its ``except ImportError`` fallback for the whole
    process (``HAS_AITER_GEMM = False``), while ``status()`` says provided."""
    if not tried or policy == "off":
        return
    from spawnkit.bootstrap._guard_findings import _guard_var

    ns_name = getattr(namespace, "name", str(namespace))
    ending = ", so this worker stops." if policy == "error" else " (guard policy 'warn')."
    lines = [
        f"import guard ({ns_name}): {len(tried)} module(s) provide_module() placed when the "
        "hooks were applied had been imported before, and were missing then: the code that "
        f"imported them took its ImportError path (a fallback, a feature turned off){ending}"
    ]
    lines += [f"- {name!r}: tried at {site.describe()}" for name, site in sorted(tried.items())]
    lines.append(
        "  Fix: import engine code inside the plugin's register() or its hooks, not at its "
        "module's top: a plugin's module is imported before any module is provided."
    )
    if policy == "error":
        lines.append(f"To run anyway, set {_guard_var(namespace)}=warn.")
    message = "\n".join(lines)
    if policy == "error":
        findings = [{"module": n, "site": str(s)} for n, s in tried.items()]
        raise ImportGuardError(message, findings=findings, stage="apply_hooks")
    site = next(iter(tried.values()))
    warnings.warn_explicit(message, ImportGuardWarning, site.filename, site.lineno)
