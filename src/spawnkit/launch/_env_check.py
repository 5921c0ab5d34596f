"""The launcher's look at the environment its workers will see: typos and foreign variables.

A variable nothing reads is a setting that silently fails to take effect:
``MINIENG_PLUGIN=general`` (the S is missing) loads every plugin, and
``SPAWNKIT_PLATFORM`` set for an engine whose prefix is ``MINIENG`` selects
nothing.  So, once per launch and in the parent, every variable of the
workers' environment (this process's, with ``env=`` on top) is sorted into:

* known: a variable of this namespace (``NamespaceConfig.known_env``, the
  engine's ``extra_env`` included) or one of spawnkit's process-wide ones;
* foreign: a known variable of another registered namespace (the
  ``spawnkit.namespaces`` entry points, the namespaces declared in this
  process and spawnkit's own); the message names this namespace's variable of the same role;
* unknown: any other name under this namespace's prefix, in any case
  (``spawnkit_plugins``: names are case-sensitive, so it is never read), except
  those under a longer prefix another namespace owns (``SPAWNKIT_DEMO_*`` is the
  demo's, not a typo of ``SPAWNKIT_*``); the message has a did-you-mean.

Each finding is one ``EnvVariableWarning`` at the user's line;
``<PREFIX>_STRICT_ENV=1`` turns them into one ``ConfigError``.  A registered
namespace whose registration does not load is left out of the check (it is
refused, with its cause, wherever it is itself used).
"""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Mapping

from spawnkit._namedtuple import NamedTuple
from spawnkit.errors import ConfigError, EnvVariableWarning, NamespaceError
from spawnkit.namespace import DEFAULT_NAMESPACE_NAME, Namespace, get_namespace

__all__ = ["EnvFinding", "check_cpu_engine", "check_env", "cpu_engine_problem", "find_env_problems"]

#: The roles a namespace's variables play; a foreign one is matched to ours by role.
_ROLES = (
    "platform_var",
    "plugins_var",
    "cpu_engine_var",
    "lenient_var",
    "guard_var",
    "strict_env_var",
    "hook_conflicts_var",
)


class EnvFinding(NamedTuple):
    """One variable that will not do what it looks like: its name and the sentence saying why."""

    var: str
    message: str


def _process_wide() -> frozenset[str]:
    """spawnkit's own variables that belong to no namespace, each owner's ``PROCESS_ENV``.

    A name missing here is one spawnkit itself reads or sets called a variable "nothing
    reads" (``SPAWNKIT_WARM_SPARES``; the ``SPAWNKIT_FAILURE_STORE`` every rank of a
    multi-node torchrun job inherits), and ``<PREFIX>_STRICT_ENV=1`` refused the launch;
    ``tests/test_env_check.py`` finds every such name in the source and fails on one left out.
    """
    from spawnkit import _rank_env
    from spawnkit.bootstrap import _parent_death
    from spawnkit.protocol import warm
    from spawnkit.spec import signing

    owners = (_parent_death, warm, signing, _rank_env)
    return frozenset(var for owner in owners for var in owner.PROCESS_ENV)


def _others(ns: Namespace) -> list[Namespace]:
    """Every other namespace this process can name: declared here, or registered."""
    from spawnkit import _metadata
    from spawnkit._namespace_registry import NAMESPACE_GROUP

    names = {ep.name for ep in _metadata.entry_points(NAMESPACE_GROUP)}
    names.update(Namespace._registry)
    names.add(DEFAULT_NAMESPACE_NAME)  # spawnkit's own, declared or not
    found: list[Namespace] = []
    for name in sorted(names - {ns.name}):
        try:
            found.append(get_namespace(name))
        except NamespaceError:
            continue  # refused with its cause where it is used; nothing to compare against
    return found


def find_env_problems(ns: Namespace, environ: Mapping[str, str]) -> list[EnvFinding]:
    """The unknown and foreign variables in ``environ`` for a launch of ``ns``, by name."""
    cfg = ns.config
    known = set(cfg.known_env) | _process_wide()
    prefix = cfg.env_prefix + "_"
    others = _others(ns)
    longer = [
        o.env_prefix + "_"
        for o in others
        if o.env_prefix != cfg.env_prefix and (o.env_prefix + "_").startswith(prefix)
    ]
    foreign: dict[str, tuple[Namespace, str]] = {}
    for other in others:
        for role in _ROLES:
            var = getattr(other.config, role)
            if var not in known:
                foreign.setdefault(var, (other, getattr(cfg, role)))
        for var in other.config.extra_env:
            if var not in known:
                foreign.setdefault(var, (other, ""))
    found: list[EnvFinding] = []
    for var in sorted(environ):
        if var in known:
            continue
        if var in foreign:
            other, ours = foreign[var]
            instead = f" (did you mean {ours}?)" if ours else ""
            found.append(
                EnvFinding(
                    var,
                    f"{var} is set, but it is a variable of namespace {other.name!r}; this "
                    f"launch is for namespace {ns.name!r}, which never reads it{instead}",
                )
            )
        elif (upper := var.upper()).startswith(prefix) and not any(
            upper.startswith(p) for p in longer
        ):
            found.append(_unknown(ns.name, var, known, prefix))
    return found


def _unknown(name: str, var: str, known: set[str], prefix: str) -> EnvFinding:
    """A variable under the prefix that nothing reads, with the one it most likely meant.

    Compared upper-cased: ``spawnkit_plugins=mine`` (a lower-case ``.env`` file, a manifest)
    is another variable to the process, never read, and was not named at all.
    """
    upper = var.upper()
    if upper in known:
        return EnvFinding(
            var,
            f"{var} is set, but variable names are case-sensitive and namespace {name!r} "
            f"reads {upper}, never {var} (did you mean {upper}?)",
        )
    close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return EnvFinding(
        var,
        f"{var} is set, but namespace {name!r} reads no such variable{hint}; "
        f"known: {', '.join(sorted(v for v in known if v.startswith(prefix)))}",
    )


def check_env(ns: Namespace, overrides: Mapping[str, str] | None = None) -> list[EnvFinding]:
    """Warn once about each finding (``EnvVariableWarning``), or refuse them all when strict."""
    environ = {**os.environ, **(overrides or {})}
    _strict(ns, environ)  # its value on its own, as the other on/off variables: once a launch
    return _report(ns, environ, find_env_problems(ns, environ))


def _strict(ns: Namespace, environ: Mapping[str, str]) -> bool:
    """``<PREFIX>_STRICT_ENV`` read as on or off; a value that is neither is a ``ConfigError``.

    Read only when there was something to report, ``=maybe`` was refused on no launch of a
    clean environment, and then refused the first launch with a typo in it instead of
    warning, or naming the typo: checked by :func:`check_env` on every launch now."""
    raw = environ.get(ns.config.strict_env_var)
    from spawnkit.hooks._plugin_selection import parse_bool

    return raw is not None and parse_bool(ns.config.strict_env_var, raw)


def check_cpu_engine(
    ns: Namespace, overrides: Mapping[str, str] | None, platform: str, kind: str
) -> list[EnvFinding]:
    """``<PREFIX>_USE_CPU_ENGINE=1`` where the decision table never read it: a platform
    selected by name, or a plugin that activated (the variable decides only when none did):
    the workers ran on that device, not the CPU asked for, with nothing said."""
    environ = {**os.environ, **(overrides or {})}
    finding = cpu_engine_problem(ns, environ, platform, kind)
    return _report(ns, environ, [finding] if finding is not None else [])


def cpu_engine_problem(
    ns: Namespace, environ: Mapping[str, str], platform: str, kind: str
) -> EnvFinding | None:
    """``check_cpu_engine``'s finding, unreported (``spawnkit doctor`` lists it)."""
    cfg = ns.config
    raw = environ.get(cfg.cpu_engine_var, "").strip()
    from spawnkit.platforms._table import _TRUE  # "read" as the decision table reads it

    if raw.lower() not in _TRUE or platform == "cpu":
        return None
    chosen = environ.get(cfg.platform_var, "").strip()
    why = (
        f"{cfg.platform_var}={chosen!r} selects the platform"
        if chosen
        else f"platform plugin {platform!r} activated and is selected"
        if kind == "plugin"
        else f"platform {platform!r} is selected"
    )
    return EnvFinding(
        cfg.cpu_engine_var,
        f"{cfg.cpu_engine_var}={raw!r} does not take effect: {why}, and the variable picks "
        f"the CPU only when no platform is named and no plugin activates; set "
        f"{cfg.platform_var}=cpu to run on the CPU, or unset {cfg.cpu_engine_var}",
    )


def _report(
    ns: Namespace, environ: Mapping[str, str], findings: list[EnvFinding]
) -> list[EnvFinding]:
    if not findings:
        return findings
    strict_var = ns.config.strict_env_var
    if _strict(ns, environ):
        raise ConfigError(
            f"{len(findings)} variable(s) would not take effect in namespace {ns.name!r}:\n"
            + "\n".join(f"  - {f.message}" for f in findings)
            + f"\nFix: rename or unset them; or unset {strict_var} to only warn; an engine "
            "reading a variable of its own declares it with Namespace(..., extra_env=(...)).",
            setting=findings[0].var,
        )
    filename, lineno, module = _user_line()
    for f in findings:
        # warn_explicit without a registry: shown once per launch, not once per process.
        warnings.warn_explicit(
            f"{f.message}. Set {strict_var}=1 to refuse it instead.",
            EnvVariableWarning,
            filename,
            lineno,
            module,
        )
    return findings


def _user_line() -> tuple[str, int, str]:
    """The first frame outside spawnkit: the user's launch call (or ours, when none is)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno, str(frame.f_globals.get("__name__", ""))
