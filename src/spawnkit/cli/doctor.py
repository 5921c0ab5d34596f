"""``spawnkit doctor``: what a worker of this namespace would find, choose, load and patch.

The platform decision runs here; the guard and the registrations come from a dry run in a clean
spawned child.  Exit status 1 exactly when a worker of this configuration would fail.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import platform as _platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from spawnkit.cli._errors import EXIT_FAILURE, EXIT_OK
from spawnkit.cli._output import Output
from spawnkit.cli.launch import positive_seconds

__all__ = ["add_parser", "collect", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "doctor",
        parents=[common],
        help="show platform, plugins, hooks and import-guard status of a namespace",
        description=(
            "Report what a spawned worker of NAMESPACE would do: platform decision, plugins "
            "and their selection status, hook targets and conflicts, and an import-guard dry "
            "run in a clean spawned child. Exit status 1 if such a worker would fail."
        ),
    )
    p.add_argument("--namespace", metavar="NS", help="the engine namespace (default spawnkit)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=120.0,
        metavar="S",
        help="bound on platform discovery and on the dry run, each (120 s)",
    )
    p.add_argument(
        "--no-child", action="store_true", help="skip the spawned dry run (metadata only)"
    )
    p.set_defaults(handler=run)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _environment(namespace: Any) -> dict[str, Any]:
    cfg = namespace.config
    variables = {var: os.environ.get(var) for var in cfg.known_env}
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "machine": f"{_platform.system()} {_platform.machine()}",
        "torch": _version("torch"),
        "spawnkit": _version("spawnkit"),
        "namespace": cfg.name,
        "platform_group": cfg.platform_group,
        "plugin_group": cfg.plugin_group,
        "guard_policy": cfg.guard_policy,
        "variables": variables,
    }


def _platform_section(namespace: Any, problems: list[str]) -> dict[str, Any]:
    from spawnkit.errors import SpawnkitError

    section: dict[str, Any] = {"selection": None, "explanation": None, "text": ""}
    try:
        explanation = namespace.platforms.explain()
        section["explanation"] = explanation.to_dict()
        section["text"] = str(explanation)
    except SpawnkitError as exc:
        section["text"] = str(exc)
    try:
        selection = namespace.platforms.select()
        section["selection"] = selection.to_dict()
    except SpawnkitError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        problems.append(f"platform: {type(exc).__name__}: {first}")
    return section


def _bounded_platform_section(
    namespace: Any, problems: list[str], timeout: float
) -> dict[str, Any]:
    """``_platform_section`` within ``--timeout``: discovery calls every platform plugin's
    ``activate()`` in this process, and one that hangs (a driver query that never returns)
    held doctor forever while ``--timeout`` bounded only the dry run.  Names the plugin."""
    import threading

    from spawnkit import _steps, _waits

    found: list[dict[str, Any]] = []
    thread = threading.Thread(
        target=lambda: found.append(_platform_section(namespace, problems)),
        name="spawnkit-doctor-discovery",
        daemon=True,  # a hung activate() must not keep doctor from exiting
    )
    thread.start()
    _waits.join_thread(thread, timeout)
    if found:
        return found[0]
    what = _steps.activating_in(thread.ident or 0) or "platform discovery is still running"
    problems.append(
        f"platform: discovery did not finish within --timeout {timeout:g} s: {what}. A launch "
        "would wait as long in its parent before starting any worker; make activate() only "
        "check for the hardware (no blocking driver call), or select a platform by name "
        f"({namespace.config.platform_var}=...), which asks no other plugin."
    )
    text = f"discovery did not finish within --timeout {timeout:g} s (the problem below)"
    return {"selection": None, "explanation": None, "text": text, "timed_out": True}


def _plugins_section(
    namespace: Any, warnings_out: list[str], problems: list[str], *, selects: bool
) -> list[dict[str, Any]]:
    """``selects``: the launch's own plugin selection runs later (``_launch_refusals``) and
    names an unknown ``<PREFIX>_PLUGINS`` name itself, as a refusal or lenient mode's warning;
    this section's "check the spelling" line would say it a second time."""
    infos = namespace.plugins.discover()
    keys = ("name", "value", "dist", "version", "status", "reason")
    rows = [{k: getattr(i, k) for k in keys} for i in infos]
    raw = os.environ.get(namespace.config.plugins_var)
    from spawnkit.hooks._plugin_selection import blank_message, is_blank
    from spawnkit.launch._group_check import find_group_problems

    # a misspelt group's plugins: a launch warns of them, doctor listed nothing
    warnings_out.extend(f"plugins: {message}" for message in find_group_problems(namespace))
    if raw is not None and is_blank(raw):
        origin = f"{namespace.config.plugins_var}={raw!r}"
        blank = blank_message(namespace, infos, origin, raw=raw)
        if blank:  # a launch warns it as a PluginSelectionWarning: -W error refuses
            _said_as_a_launch(blank, _blank_warning(blank), warnings_out, problems)
    if raw is not None and not selects:
        wanted = {n.strip() for n in raw.split(",") if n.strip()}
        unknown = sorted(wanted - {i.name for i in infos})
        if unknown:
            warnings_out.append(
                f"{namespace.config.plugins_var} names {', '.join(map(repr, unknown))}, which "
                "match no installed plugin (check the spelling)"
            )
    return rows


def _launch_refusals(
    namespace: Any, platform: dict[str, Any], warnings_out: list[str], problems: list[str]
) -> bool:
    """What every launch refuses in its parent before any worker, from the environment and
    metadata alone (``launch._selection._select``): an ``<PREFIX>_IMPORT_GUARD`` or
    ``<PREFIX>_HOOK_CONFLICTS`` value that is no policy, and the plugin selection
    (``PluginManager.select``: a ``<PREFIX>_PLUGINS`` name no plugin has, an excluded platform
    plugin named, two distributions with one name).  Only the dry run said these, so
    ``--no-child`` printed "OK" (exit 0).  True when one refuses (the dry run's failure
    would say it again)."""
    from spawnkit.bootstrap import guard
    from spawnkit.errors import SpawnkitError
    from spawnkit.hooks import _conflicts

    cfg = namespace.config
    checks: list[Callable[[], object]] = [
        lambda: guard.resolve_policy(
            cfg.guard_policy, os.environ.get(cfg.guard_var), var=cfg.guard_var
        ),
        lambda: _conflicts.parse_policy(
            cfg.hook_conflicts_var, os.environ.get(cfg.hook_conflicts_var)
        ),
    ]
    chosen = platform.get("selection")
    if chosen:  # else the platform's problem is listed; the exclusion rule needs a platform
        checks.append(lambda: _select_plugins(namespace, chosen["name"], warnings_out, problems))
    before = len(problems)
    for check in checks:
        try:
            check()
        except SpawnkitError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            problems.append(f"launch refused: {type(exc).__name__}: {first}")
    return len(problems) > before


def _select_plugins(
    namespace: Any, platform: str, warnings_out: list[str], problems: list[str]
) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # each is said, whatever this process warned before
        namespace.plugins.select(platform=platform)
    for w in caught:  # lenient mode's
        message = w.message if isinstance(w.message, Warning) else w.category(w.message)
        issued = (message, w.filename, w.lineno, _module_of(w.filename))
        _said_as_a_launch(f"plugins: {w.message}", issued, warnings_out, problems)


def _blank_warning(message: str) -> tuple[Warning, str, int, str | None]:
    """The warning a launch issues for a blank allow-list (``launch._selection``), from the
    first frame outside spawnkit, as the launch's own is."""
    from spawnkit.errors import PluginSelectionWarning
    from spawnkit.launch._env_check import _user_line

    filename, lineno, module = _user_line()
    text = f"{message}. -W ignore::spawnkit.PluginSelectionWarning silences this."
    return PluginSelectionWarning(text), filename, lineno, module


#: How a problem made of a launch's warning begins (the dry run's launch is told it was said).
_REFUSED_WARNING = "launch refused: PluginSelectionWarning: "
_BY_THE_FILTER = (
    " (this process's warnings filter makes the warning an error, and a launch under it raises it)"
)


def _said_as_a_launch(
    line: str,
    issued: tuple[Warning, str, int, str | None],
    warnings_out: list[str],
    problems: list[str],
) -> None:
    """A warning a launch issues in its parent, listed as what a launch under this process's
    warning filters (``-W``, ``PYTHONWARNINGS``) does with it: ``error`` makes the launch raise
    it, so doctor said "OK" of a launch that refuses.  Replayed through ``warn_explicit``
    with a fresh registry, so an earlier warning of this process hides nothing."""
    import warnings

    message, filename, lineno, module = issued
    with warnings.catch_warnings(record=True):  # the filters stay this process's
        try:
            # module=None would skip the warning (CPython's C warn_explicit): name it or omit it
            where: dict[str, Any] = {"module": module} if module is not None else {}
            warnings.warn_explicit(message, type(message), filename, lineno, registry={}, **where)
        except Warning as exc:
            problems.append(
                f"launch refused: {type(exc).__name__}: {line.removeprefix('plugins: ')}"
                + _BY_THE_FILTER
            )
            return
    warnings_out.append(line)


def _module_of(filename: str) -> str | None:
    """The module ``warnings`` matched a filter's module field against at the warning."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return None


#: How ``site`` tells a ``.pth`` line that runs code from one that adds a path.
_PTH_CODE = ("import ", "import\t")


def _startup_code(plugins: list[dict[str, Any]], platform: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``.pth`` files of plugin distributions that run code at interpreter start."""
    by_dist: dict[str, list[str]] = {}
    for row in plugins:
        by_dist.setdefault(row["dist"], []).append(row["name"])
    for c in (platform.get("explanation") or {}).get("candidates") or []:
        if c.get("dist"):
            by_dist.setdefault(c["dist"], []).append(c["name"])
    found: list[dict[str, Any]] = []
    for dist, names in sorted(by_dist.items()):
        try:
            installed = md.distribution(dist)
        except md.PackageNotFoundError:
            continue
        for record in installed.files or []:
            # site reads only the .pth files at the top of a site directory
            if record.suffix != ".pth" or len(record.parts) != 1:
                continue
            path = Path(str(installed.locate_file(record)))
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            lines = [ln.rstrip() for ln in text.splitlines() if ln.startswith(_PTH_CODE)]
            if lines:
                found.append(
                    {"dist": dist, "plugins": sorted(set(names)), "file": str(path), "lines": lines}
                )
    return found


def _said_already(warnings_out: list[str], problems: list[str]) -> list[str]:
    """The plugin-selection warnings doctor's report says, as the launch words them: the dry
    run's launch does not say them again, nor raise one a ``-W error`` filter refuses (said as
    a problem: doctor would stop as an internal error)."""
    listed = [w[len("plugins: ") :] if w.startswith("plugins: ") else w for w in warnings_out]
    return listed + [
        p[len(_REFUSED_WARNING) : -len(_BY_THE_FILTER)]
        for p in problems
        if p.startswith(_REFUSED_WARNING) and p.endswith(_BY_THE_FILTER)
    ]


def collect(namespace: Any, *, child: bool = True, timeout: float = 120.0) -> dict[str, Any]:
    """Everything ``doctor`` shows, as plain data; ``ok`` is False when a worker would fail."""
    problems: list[str] = []
    warnings_out: list[str] = []
    data: dict[str, Any] = {"environment": _environment(namespace)}
    data["platform"] = _bounded_platform_section(namespace, problems, timeout)
    if data["platform"].get("timed_out"):  # its thread holds the locks a launch takes
        return {**data, "plugins": [], "startup_code": [], "dry_run": None, "ok": False,
                "warnings": warnings_out, "problems": problems}  # fmt: skip
    selects = bool(data["platform"].get("selection"))
    before = len(problems)
    data["plugins"] = _plugins_section(namespace, warnings_out, problems, selects=selects)
    data["startup_code"] = _startup_code(data["plugins"], data["platform"])
    data["dry_run"] = None
    # a launch's own refusal, already listed: the dry run's launch fails with it again
    said = _environment_findings(namespace, warnings_out, problems, data["platform"])
    said |= _launch_refusals(namespace, data["platform"], warnings_out, problems)
    said |= len(problems) > before  # a warning the filters make a launch raise, too
    if child:
        from spawnkit.cli._group import run_probe

        cfg = namespace.config
        # The child reports its hook conflicts here instead of warning on its own: doctor
        # issues them once, in this process, where -W / PYTHONWARNINGS filter them.
        own = os.environ.get(cfg.hook_conflicts_var, "").strip().lower() in ("", "warn")
        quiet = {cfg.hook_conflicts_var: "ignore"} if own else None
        listed = _said_already(warnings_out, problems)
        outcome = run_probe(namespace, timeout=timeout, env=quiet, listed=listed)
        data["dry_run"] = outcome
        if outcome.get("error"):
            if not said:
                problems.append(f"dry run in a spawned worker failed: {outcome['error']}")
        else:
            result = outcome.get("result") or {}
            for c in result.get("conflicts", []):
                warnings_out.append(f"{c['severity']}: {c['message']}")
            _issue_conflicts(result.get("hook_conflicts") or [], cfg, problems)
            report = result.get("report") or {}
            for v in (report.get("guard") or {}).get("violations", []):
                warnings_out.append(
                    f"import guard: {v.get('module')} was imported before plugins loaded "
                    f"(at {v.get('first_import')})"
                )
            for plug in report.get("plugins") or []:
                if plug.get("outside_registry"):
                    warnings_out.append(
                        f"plugin {plug['name']} changed, outside the hook registry (no ledger, "
                        "no undo, no import guard): " + ", ".join(plug["outside_registry"])
                    )
            for target, hooks in (report.get("hooks") or {}).items():
                partial = [h for h in hooks if h.get("state") == "partial"]
                if partial:
                    warnings_out.append(f"hooks on {target} are {partial[0].get('reason')}")
    data["warnings"] = warnings_out
    data["problems"] = problems
    data["ok"] = not problems
    return data


def _environment_findings(
    namespace: Any, warnings_out: list[str], problems: list[str], platform: dict[str, Any]
) -> bool:
    """Unknown and foreign variables, and ``<PREFIX>_USE_CPU_ENGINE=1`` that the platform
    chosen leaves unread (as a launch would warn); True when STRICT_ENV refuses."""
    from spawnkit.errors import ConfigError
    from spawnkit.hooks._plugin_selection import parse_bool
    from spawnkit.launch._env_check import cpu_engine_problem, find_env_problems

    findings = find_env_problems(namespace, os.environ)
    chosen = platform.get("selection")
    if chosen:  # the dry run's launch warns of it too, but that warning is not shown here
        cpu = cpu_engine_problem(namespace, os.environ, chosen["name"], chosen["kind"])
        findings += [cpu] if cpu is not None else []
    var = namespace.config.strict_env_var
    try:
        strict = parse_bool(var, os.environ.get(var, "0"))
    except ConfigError as exc:
        problems.append(str(exc))
        return False
    for f in findings:
        (problems if strict else warnings_out).append(f"environment: {f.message}")
    if strict and findings:
        problems.append(f"{var}=1 refuses every launch while these are set")
    return strict and bool(findings)


def _issue_conflicts(messages: list[str], cfg: Any, problems: list[str]) -> None:
    """The dry run's hook conflicts as ``HookConflictWarning``s, once, in this process."""
    import warnings

    from spawnkit.errors import HookConflictWarning

    for message in messages:
        try:
            warnings.warn(
                f"{message}. Silence with {cfg.hook_conflicts_var}=ignore; refuse with "
                f"{cfg.hook_conflicts_var}=error.",
                HookConflictWarning,
                stacklevel=2,
            )
        except HookConflictWarning:  # -W / PYTHONWARNINGS error::spawnkit.HookConflictWarning
            problems.append(
                f"hook conflict (escalated by the warnings filter, so a worker would stop in "
                f"stage apply_hooks with HookConflictError): {message}"
            )


def _render(data: dict[str, Any], out: Output) -> None:
    _render_environment(data["environment"], out)
    _render_platform(data["platform"], out)
    if not data["platform"].get("timed_out"):  # not asked: the platform rule needs it
        _render_plugins(data["plugins"], data["environment"]["plugin_group"], out)
    _render_startup_code(data.get("startup_code") or [], out)
    if data.get("dry_run") is not None:
        _render_dry_run(data["dry_run"], out)
    for warning in data["warnings"]:
        out.line(f"warning: {warning}")
    if data["ok"]:
        out.line("OK: a worker of this namespace would bootstrap.")
    else:
        out.line("PROBLEM: a worker of this namespace would fail:")
        for problem in data["problems"]:
            out.line(f"  - {problem}")


def _render_environment(env: dict[str, Any], out: Output) -> None:
    out.heading(f"spawnkit doctor: namespace {env['namespace']!r}")
    rows = [
        ("python", f"{env['python']} ({env['executable']})"),
        ("machine", env["machine"]),
        ("torch", env["torch"] or "not installed"),
        ("spawnkit", env["spawnkit"] or "?"),
        ("groups", f"{env['platform_group']}, {env['plugin_group']}"),
        ("import guard policy", env["guard_policy"]),
    ]
    rows += [
        (var, "<unset>" if value is None else value) for var, value in env["variables"].items()
    ]
    out.table(["setting", "value"], rows)


def _render_platform(plat: dict[str, Any], out: Output) -> None:
    out.heading("platform")
    expl = plat.get("explanation") or {}
    candidates = expl.get("candidates") or []
    if candidates:
        out.table(
            ["plugin", "distribution", "activate()", "detail"],
            [
                _plugin_row(c, c["outcome"], c.get("qualname") or c.get("error") or "")
                for c in candidates
            ],
            title="platform plugins",
        )
    out.line(plat.get("text") or "")
    sel = plat.get("selection")
    if sel:
        origin = f" from {sel['dist']} {sel['version']}" if sel.get("dist") else ""
        out.line(f"would choose: {sel['kind']} {sel['name']!r} ({sel['qualname']}{origin})")


def _render_plugins(plugins: list[dict[str, Any]], group: str, out: Output) -> None:
    out.heading("general plugins")
    if plugins:
        out.table(
            ["plugin", "distribution", "status", "reason"],
            [_plugin_row(p, p["status"], p["reason"]) for p in plugins],
        )
    else:
        out.line(f"none installed in group {group!r}")


def _render_startup_code(found: list[dict[str, Any]], out: Output) -> None:
    if not found:
        return
    out.heading("plugin start-up code (.pth files run at every interpreter start)")
    for item in found:
        plugins = ", ".join(item["plugins"])
        out.line(f"{item['file']} (from {item['dist']}, plugin {plugins}):")
        for line in item["lines"]:
            out.line(f"    {line}")
    out.line(
        "This code runs before spawnkit in every process, outside the hook registry and the "
        "import guard: what it patches has no ledger and no undo."
    )


def _plugin_row(plugin: dict[str, Any], *rest: str) -> tuple[str, ...]:
    return (f"{plugin['name']} = {plugin['value']}", f"{plugin['dist']} {plugin['version']}", *rest)


def _render_dry_run(dry: dict[str, Any], out: Output) -> None:
    out.heading("dry run in a clean spawned worker")
    result = dry.get("result") or {}
    regs = result.get("registrations") or []
    if regs:
        cols = ["target", "type", "hook", "source", "state", "reason"]
        rows = [tuple(r.get(k, "") for k in cols) for r in regs]
        out.table(cols, rows, title="hook registrations")
    elif not dry.get("error"):
        out.line("no hooks registered")
    if result.get("report_text"):
        out.line(result["report_text"])
    if dry.get("error"):
        out.line(f"FAILED: {dry['error']}")
        if dry.get("traceback"):
            out.line(dry["traceback"].rstrip())


def run(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    from spawnkit.cli._resolve import resolve_namespace

    namespace = resolve_namespace(args.namespace)
    data = collect(namespace, child=not args.no_child, timeout=args.timeout)
    if not args.debug and data.get("dry_run"):
        # The child's full traceback is for --debug; the error line already names the cause.
        data["dry_run"] = {k: v for k, v in data["dry_run"].items() if k != "traceback"} | (
            {"traceback": data["dry_run"].get("traceback")} if args.json else {}
        )
    if args.json:
        out.json(data)
    else:
        _render(data, out)
    return EXIT_OK if data["ok"] else EXIT_FAILURE
