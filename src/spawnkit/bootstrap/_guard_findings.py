"""The import guard's findings: a hook target imported too early, where, what holds it, and the
message, warning or ``ImportGuardError`` that says so (:mod:`spawnkit.bootstrap.guard`).

Apart from the guard because a worker whose targets were all imported in time never builds
one (issue #23): the guard imports this only when it has something to say.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import ImportGuardError, ImportGuardWarning

if TYPE_CHECKING:
    from typing import Any
from spawnkit.bootstrap import _first_imports
from spawnkit.bootstrap._first_imports import (
    MAIN,
    OTHER,
    PLACED,
    PRELOAD,
    STAGE,
    STARTUP,
    UNPICKLING,
    ImportSite,
    _chain_sites,
    _chain_window,
    _main_files,
    _plugin_import,
    armed,
    first_import,
)

__all__: list[str] = []


def _referenced_modules(value: Any, budget: int = 2000, depth: int = 4) -> set[str]:
    """Modules whose code unpickling ``value`` would import (its classes, functions, modules)."""
    import types  # failure path only

    named = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    found: set[str] = set()
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack and budget > 0:
        obj, level = stack.pop()
        budget -= 1
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            found.add(obj.__name__)
            continue
        if isinstance(obj, named):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                found.add(module)
            continue
        found.add(type(obj).__module__)
        if level >= depth:
            continue
        children: list[Any] = []
        if isinstance(obj, dict):
            children = [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children = list(obj)
        else:
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                children = list(attrs.values())
        stack.extend((child, level + 1) for child in children)
    parents = {m.rsplit(".", i)[0] for m in found for i in range(1, m.count(".") + 1)}
    return found | parents


def _carriers(arguments: Mapping[str, Any], modules: set[str]) -> list[str]:
    """The ``spec.extra`` keys whose value, unpickled, imports one of ``modules``."""
    out: list[str] = []
    for key, value in arguments.items():
        try:
            if _referenced_modules(value) & modules:
                out.append(key)
        except Exception:  # an odd object must not hide the finding itself
            continue
    return out


def _stale_bindings(registry: Any, targets: list[str]) -> dict[str, list[str]]:
    """``module.name`` globals holding each target's original; a registry failure is listed."""
    try:
        found = registry.stale_bindings_of(targets)
        return {t: [f"{m}.{a}" for m, a in found[t]] for t in targets}
    except Exception as exc:
        said = f"(could not list them: {type(exc).__name__}: {exc})"
        return {t: [said] for t in targets}


def _previews(registry: Any, targets: list[str]) -> dict[str, Any]:
    """What the stale-binding sweep would find for each target (None: it would not vouch)."""
    try:
        return dict(registry.sweep_previews(targets))
    except Exception:  # an odd registry must not hide the finding: nothing is vouched for
        return dict.fromkeys(targets)


def _source_text(reg: Any) -> str:
    source = getattr(reg, "source", None)
    return str(source) if source is not None else "an unknown source"


_FIX_SCRIPT = (
    'move that import under `if __name__ == "__main__":` or into the function that uses it, '
    'or bind a lazy proxy instead (`Name = spawnkit.lazy("{module}:Name")`)'
)


_FIX_ANY = (
    _FIX_SCRIPT + "; or, if the import is in a plugin's hook module, give the hook as a "
    '"module:qualname" string'
)


def _fix(window: str, module: str, step: str, carriers: list[str]) -> str:
    """The one fix that applies where the import happened."""
    if window == UNPICKLING:
        what = ", ".join(f"spec.extra[{k!r}]" for k in carriers) or "that argument"
        return (
            f"do not send the object itself in {what}: send a 'module:Name' string and "
            "import it in the entry, or wrap it in spawnkit.Payload (kept as bytes until "
            "hooks are applied; call .materialize() in the entry)"
        )
    if window == PRELOAD:
        return (
            "remove that module (or the module that imports it) from preload=: a warm-start "
            "server must not import a hook target"
        )
    if window == MAIN:
        return _FIX_SCRIPT.format(module=module)
    if window == STAGE:
        from spawnkit.bootstrap.stages import Stage  # failure path only

        if step == Stage.PLATFORM:
            # "inside a function" would be no fix: init_backend() is one, and runs here
            return (
                f"the platform's code runs in stage {step!r}, before plugins load and hooks "
                "are applied (init_backend() included), so what it imports is imported before "
                "the hooks: import it in code that runs after them (an op's first call, the "
                "entry), not at platform start"
            )
        return (
            f"the code run in stage {step!r} imports it: import it inside the function that "
            "needs it, so that it is imported after hooks are applied"
        )
    return _FIX_ANY.format(module=module)


def _members_only(module: str, targets: list[str]) -> bool:
    """Whether every target is a member of a class of ``module`` (``mod.Class.method``,
    ``mod:Class.method``): patched in place on its class, so every instance and subclass
    (old or new) and every call through the class runs the hooks.  What could keep the
    original (a copy, a bound method, an object's attribute) is the apply's sweep's and the
    reference search's to rebind or name, per this same policy (``check_stale``); the
    platform's ``init_backend()``, run before the hooks, is the stage's to say."""
    for target in targets:
        qual = target.partition(":")[2] if ":" in target else target[len(module) + 1 :]
        if "." not in qual or qual.rpartition(".")[2] in _RAN_AT_PLATFORM_START:
            return False
    return True


#: What the platform stage ran before any hook existed: hooked, they never run for the
#: instance ``current_platform`` is (the guard's finding names them, with the stage's fix).
_RAN_AT_PLATFORM_START = frozenset({"__new__", "__init__", "__post_init__", "init_backend"})


def _platform_modules(namespace: Any) -> frozenset[str]:
    """The modules of the current platform's classes (its plugin's, its vendor's bases,
    spawnkit's built-in and interface): imported before plugins by design, in the platform
    stage, so a general plugin's hook on their methods (``CpuPlatform.get_device_name``) was
    refused with a fix that cannot apply, while patching the class in place reaches it."""
    manager = getattr(namespace, "_platforms", None)  # not created for the asking
    built = getattr(manager, "built", None)
    platform = built() if callable(built) else None
    if platform is None:
        return frozenset()
    return frozenset(str(getattr(cls, "__module__", "")) for cls in type(platform).__mro__)


def _imported_by_other(registry: Any, module: str) -> str | None:
    """The other namespace whose hook application imported ``module`` (an odd registry: none)."""
    from spawnkit.hooks.registry import imported_by_other  # an early target module only

    name = getattr(registry, "name", None)
    return imported_by_other(name, module) if isinstance(name, str) else None


def _by_other(
    namespace: Any, other: str, finding: dict[str, Any], previews: dict[str, Any]
) -> bool:
    """A target module namespace ``other``'s ``apply_hooks()`` imported: no early import of
    the user's code, and this namespace's hooks wrap ``other``'s chains (both run).  True when
    the sweep rebinds every reference to what stands at the targets now; else ``finding``
    is made to say so, naming both namespaces (the user's code bound them in between)."""
    held = sorted({h for t in finding["targets"] for h in (previews.get(t) or ((), ()))[1]})
    if not held:
        return True
    ns_name = getattr(namespace, "name", str(namespace))
    finding.update(
        imported_by=other,
        first_import=f"by the hook application of namespace {other!r} (its apply_hooks(): "
        f"bootstrap_here({other!r}) or a worker's bootstrap of it), which wrapped the "
        "originals in its own hooks",
        filename="",
        lineno=0,
        chain=[],
        window=OTHER,
        stale_bindings=held,
        fix=f"call spawnkit.bootstrap_here({ns_name!r}) right after "
        f"bootstrap_here({other!r}), before the code that made those references runs (or "
        "make them after it), so that both namespaces' hooks are in place when they are made",
    )
    return False


def _violation(
    module: str,
    regs: list[Any],
    site: ImportSite | None,
    bindings: dict[str, list[str]],
    previews: dict[str, Any],
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A target module imported before plugins loaded: where, how, what it defeats, the fix.

    ``bindings`` and ``previews``: every early target's holders, found by one sweep.
    """
    targets = sorted({str(r.target) for r in regs})
    sites = _chain_sites(site) if site else []
    window, step = _chain_window(sites)
    carriers: list[str] = []
    if window == UNPICKLING and extra:
        carriers = _carriers(extra, {s.module for s in sites})
    chain = [f"{s.module} <- {s.filename}:{s.lineno}" for s in sites]
    if sites and window == MAIN:
        chain.append(f"{sites[-1].filename} <- {_REEXEC}")
    finding = {
        "module": module,
        "targets": targets,
        "hooks": [
            f"{r.target} ({getattr(getattr(r, 'hook_type', None), 'name', '?')} from "
            f"{_source_text(r)})"
            for r in regs
        ],
        "sources": sorted({_source_text(r) for r in regs}),
        "first_import": site.describe() if site else _unknown_site(),
        "filename": site.filename if site else "",
        "lineno": site.lineno if site else 0,
        "chain": chain,
        "stale_bindings": sorted({b for target in targets for b in bindings[target]}),
        "window": window if site else "",
        "carriers": carriers,
        "fix": _fix(window if site else "", module, step, carriers),
    }
    if site is None:
        finding.update(_origin_unrecorded(module))
    finding.update(_sweep_verdict(previews, targets))
    return finding


_REEXEC = (
    "spawn's re-import of the launching script, as __mp_main__ in every worker "
    "(multiprocessing.spawn)"
)


def _origin_unrecorded(module: str) -> dict[str, Any]:
    """No first-import record: placed in ``sys.modules`` directly, or imported at start-up."""
    from spawnkit.bootstrap import _origins  # failure path only

    if _origins.placed_directly(module):
        line = _origins.placement_line(module, sorted(_main_files()))
        where = f"by {line} ({line.text})" if line else "by code the guard could not find"
        return {
            "first_import": f"placed in sys.modules {where}, not imported (the import system "
            "never saw it)",
            "filename": line.filename if line else "",
            "lineno": line.lineno if line else 0,
            "chain": [f"{module} <- placed in sys.modules {where}"],
            "window": PLACED,
            "fix": "do not put a hook target module into sys.modules before plugins load: "
            "put it there from a plugin's callback, or after hooks are applied",
        }
    if _first_imports._at_arm is not None and module not in _first_imports._at_arm:
        return _loaded_directly(module)
    if _first_imports._at_arm is None:
        return {}
    line = _origins.startup_line(module)
    if line is None:
        return {}
    return {
        "first_import": f"interpreter start-up, by the .pth start-up code {line} "
        f"({line.text}), before the import guard was armed",
        "filename": line.filename,
        "lineno": line.lineno,
        "chain": [f"{module} <- {line} ({line.text}), run by site at interpreter start-up"],
        "window": STARTUP,
        "fix": f"remove that import line from {line.filename} (it runs at every interpreter "
        "start, before spawnkit; spawnkit applies the hooks in every worker, so a plugin "
        "does not need it there)",
    }


def _loaded_directly(module: str) -> dict[str, Any]:
    """Imported after the guard was armed, yet unrecorded: its loader was run directly
    (``spec_from_file_location`` + ``exec_module``, ``import a source file directly``)."""
    from spawnkit.bootstrap import _origins  # failure path only

    line = _origins.loading_line(module, sorted(_main_files()))
    where = f"by {line} ({line.text})" if line else "by code the guard could not find"
    how = "loaded from its source file without the import system (spec_from_file_location"
    return {
        "first_import": f"{how} and exec_module) {where}, after the import guard was armed",
        "filename": line.filename if line else "",
        "lineno": line.lineno if line else 0,
        "chain": [f"{module} <- {how} + exec_module) {where}"],
        "window": PLACED,
        "fix": "do not load a hook target module before plugins load: move that code under "
        '`if __name__ == "__main__":` or into the function that uses it (the entry runs '
        "after the hooks are applied), or load it from a plugin's callback",
    }


def _sweep_verdict(previews: dict[str, Any], targets: list[str]) -> dict[str, Any]:
    """Whether the stale-binding sweep repairs this finding (then it is only a warning)."""
    rebindable: list[str] = []
    for target in targets:
        found = previews.get(target)
        if found is None or found[1]:
            return {"rebound_by_sweep": False}
        rebindable += found[0]
    return {"rebound_by_sweep": True, "rebindable": sorted(set(rebindable))}


def _raise_or_warn(namespace: Any, violations: list[dict[str, Any]], policy: str) -> None:
    message = _message(namespace, violations, policy)
    if policy == "error":
        from spawnkit.bootstrap.stages import Stage  # failure path only

        raise ImportGuardError(message, findings=violations, stage=Stage.PLUGINS.value)
    first = violations[0]
    # Once, located at the user's import rather than at spawnkit's call of check().
    where, line = first["filename"] or "<import guard>", first["lineno"]
    if first["carriers"]:
        where, line = f"spec.extra[{first['carriers'][0]!r}]", 0
    warnings.warn_explicit(message, ImportGuardWarning, where, line)


def _warn_repaired(namespace: Any, findings: list[dict[str, Any]]) -> None:
    """Target modules imported early whose every known holder the sweep rebinds: a warning."""
    ns_name = getattr(namespace, "name", str(namespace))
    lines = [
        f"import guard ({ns_name}): {len(findings)} hook target module(s) imported before "
        "plugins were loaded; every reference to their originals the stale-binding sweep "
        "finds is rebound when the hooks are applied, so the worker continues. A reference "
        "the sweep cannot see (a closure, an instance attribute, a functools.partial, a bound "
        "method, a local of a running function) would still run the original."
    ]
    for v in findings:
        verb = "" if v.get("window") == PLACED else "first imported at "
        lines.append(f"- module {v['module']!r}, {verb}{v['first_import']}")
        held = ", ".join(v.get("rebindable") or []) or "none found"
        lines.append(f"  references rebound: {held}")
        lines.append(f"  To be sure, fix it: {v['fix']}.")
    first = findings[0]
    where, line = first["filename"] or "<import guard>", first["lineno"]
    warnings.warn_explicit("\n".join(lines), ImportGuardWarning, where, line)


def _unknown_site() -> str:
    if armed():
        return "before the import guard was armed (interpreter start-up or sitecustomize)"
    return (
        "unknown: the import guard was not armed in this process; start workers through "
        "spawnkit (spawn_with_plugins, or spawnkit.protocol.popen.spawn_context()) to "
        "record where"
    )


def _guard_var(namespace: Any) -> str:
    config = getattr(namespace, "config", None)
    return str(getattr(config, "guard_var", "the namespace's guard variable"))


def _message(namespace: Any, violations: list[dict[str, Any]], policy: str = "error") -> str:
    ns_name = getattr(namespace, "name", str(namespace))
    n = len(violations)
    head = f"import guard ({ns_name}): {n} hook target module{'s' if n > 1 else ''} imported "
    if policy == "error":
        head += (
            "before plugins were loaded; code bound to the originals there would never run the "
            "hooks, so this worker stops."
        )
    else:
        head += (
            "before plugins were loaded. The worker continues (guard policy 'warn'), and code "
            "bound to the originals there runs WITHOUT these hooks."
        )
    lines = [head]
    for v in violations:
        if v.get("window") == UNPICKLING:
            keys = ", ".join(f"spec.extra[{k!r}]" for k in v["carriers"])
            by = (
                f" from {keys} (returned by spawn_with_plugins(rank_extra=...))"
                if keys
                else " (none of spec.extra refers to it: another argument of the Process)"
            )
            lines.append(
                f"- module {v['module']!r}, first imported while the worker unpickled its "
                f"arguments{by}, before plugins load"
            )
        elif v.get("window") == PLACED:
            lines.append(f"- module {v['module']!r}, {v['first_import']}")
        elif v.get("window") == OTHER:
            lines += _other_lines(v)
            continue
        else:
            lines.append(f"- module {v['module']!r}, first imported at {v['first_import']}")
        if len(v["chain"]) > 1 or v.get("window") in (PLACED, STARTUP):
            lines.append("  import chain: " + " ; ".join(v["chain"]))
        lines.append("  hooks it defeats: " + "; ".join(v["hooks"]))
        if v["stale_bindings"]:
            lines.append(
                "  direct references to originals (would stay unpatched): "
                + ", ".join(v["stale_bindings"])
            )
        lines.append(f"  Fix: {v['fix']}.")
    if policy == "error":
        lines.append(
            f"To run anyway with these hooks ineffective, set {_guard_var(namespace)}=warn "
            "(or ProcessSpec.guard_policy='warn')."
        )
    return "\n".join(lines)


def _other_lines(v: dict[str, Any]) -> list[str]:
    """A finding of :func:`_by_other`: the other namespace imported it; what holds its hooks."""
    return [
        f"- module {v['module']!r}, imported {v['first_import']}",
        "  hooks it defeats: " + "; ".join(v["hooks"]),
        f"  references to namespace {v['imported_by']!r}'s hooked objects that this "
        "namespace's sweep cannot rebind (they would run its hooks, never these): "
        + ", ".join(v["stale_bindings"]),
        f"  Fix: {v['fix']}.",
    ]


def _imported_at(module: str) -> str:
    """``; imported at file:line (in func) while ...``: the import to move, when recorded."""
    site = first_import(module)
    return f"; {module} was imported at {site.describe()}" if site is not None else ""


def _unrebound_lines(ns_name: str, holders: list[dict[str, str]], ending: str) -> list[str]:
    """The apply stage's report: what the holders are, one line each, and the fix."""
    from spawnkit.hooks import _propagate as p  # if any
    from spawnkit.hooks import _stale as k

    n, s = len(holders), "s" if len(holders) > 1 else ""
    level = "" if any(h["kind"] in k.BY_REFERENCE for h in holders) else "module-level "
    lines = [
        f"import guard ({ns_name}): {n} call{s} of hooked original{s} began in another "
        "thread before the hooks were applied (a loop still running, or a pool's "
        f"initializer that ran); the hooks never run for {'them' if n > 1 else 'it'}{ending}"
        if all(h["kind"] == k.BEGUN for h in holders)
        else f"import guard ({ns_name}): {n} {level}reference{s} to hooked originals "
        "could not be rebound after the hooks were applied; calls through "
        f"{'them' if n > 1 else 'it'} run {p.what_runs(holders)}{ending}"
        if any(h["kind"] != k.CALLED_AT_IMPORT for h in holders)
        else f"import guard ({ns_name}): {n} call{s} of hooked target{s} ran the "
        f"original{s} as {'their modules were' if n > 1 else 'its module was'} imported, "
        f"before the hooks were applied; what {'they' if n > 1 else 'it'} computed there "
        f"does not reflect the hooks{ending}"
    ]
    lines += [
        f"- {h['module']}: {h['name']} ran the original of {h['target']!r} ({h['kind']})"
        + _imported_at(h["module"])
        if h["kind"] == k.CALLED_AT_IMPORT
        else f"- {h['module']}.{h['name']} ({h['kind']}) keeps what the original of "
        f"{h['target']!r} answered"
        if h["kind"] == k.FILLED
        else f"- {h['module']}.{h['name']} ({h['kind']}), of {h['target']!r}"
        if h["kind"] == k.BEGUN
        else f"- {h['module']}.{h['name']} ({h['kind']}) holds {h['target']!r}"
        for h in holders
    ]
    kinds, between = {h["kind"] for h in holders}, _between_lines(ns_name, holders)
    if between:
        kinds.discard(k.LAYERED)  # its fix is the one named there
    if kinds:
        lines.append("  " + p.stale_fix(kinds))
    return lines + between


def _between_lines(ns_name: str, holders: list[dict[str, str]]) -> list[str]:
    """The fix for holders of another namespace's hooked objects (``imported_by``: the
    worker's ``_check_stale`` tags them), made by code between its ``bootstrap_here()`` and
    this one's: neither moving an import nor hooking another function is it."""
    others = sorted({h["imported_by"] for h in holders if h.get("imported_by")})
    if not others:
        return []
    after = ", ".join(f"bootstrap_here({o!r})" for o in others)
    return [
        f"  These hold the hooked objects of namespace{'s' if len(others) > 1 else ''} "
        f"{', '.join(map(repr, others))}, made after {after}; fix: call "
        f"spawnkit.bootstrap_here({ns_name!r}) right after {after}, before the code that "
        "made those references runs (or make them after it), so that both namespaces' hooks "
        "are in place when they are made."
    ]


def _defined_early_lines(holders: list[dict[str, str]], defined: Mapping[str, str]) -> list[str]:
    """Why a target whose named module was imported after plugins still had early holders:
    it names a re-export, and the module defining the original was imported early."""
    lines = []
    for target in sorted({h["target"] for h in holders} & defined.keys()):
        home = defined[target]
        site = first_import(home)
        lines.append(
            f"  {target!r} names a re-export: its original is defined in {home}, which was "
            f"imported before plugins loaded{f' (at {site.describe()})' if site else ''}, so "
            f"code imported then kept it; fix: {_FIX_SCRIPT.format(module=home)}"
        )
    return lines


def judge(
    namespace: Any,
    registry: Any,
    policy: str,
    early: list[tuple[str, list[Any], ImportSite | None]],
    extra: Mapping[str, Any] | None,
    sweep_repairs: bool,
    result: Any,
) -> None:
    """``check``'s verdict on the targets imported before plugins loaded, into ``result``:
    raised or warned per ``policy``, unless the sweep repairs it or another namespace's hooks
    imported it (then this one's wrap theirs)."""
    # Every early target's holders from one sweep of sys.modules, not one per target.
    targets = sorted({str(r.target) for _, regs, _ in early for r in regs})
    bindings, previews = _stale_bindings(registry, targets), _previews(registry, targets)
    own = _platform_modules(namespace)
    for module, regs, site in early:
        finding = _violation(module, regs, site, bindings, previews, extra)
        if module in own and _members_only(module, finding["targets"]):
            continue  # the platform's own classes, patched in place: every caller sees it
        other = _imported_by_other(registry, module)
        if other is not None and _by_other(namespace, other, finding, previews):
            found = _plugin_import(module, regs, site, {module: f"namespace {other!r}'s hooks"})
            result.plugin_imports.append({**found, "imported_by": other})
            continue  # another namespace's hooks imported it: this one's wrap theirs
        result.violations.append(finding)
    repaired = [
        v
        for v in result.violations
        if sweep_repairs and v.get("rebound_by_sweep") and not v.get("imported_by")
    ]
    failing = [v for v in result.violations if v not in repaired]
    if failing:
        _raise_or_warn(namespace, failing, policy)
    if repaired:
        _warn_repaired(namespace, repaired)
