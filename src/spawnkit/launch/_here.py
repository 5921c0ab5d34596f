"""What ``bootstrap_here()`` applied in this process, and a selection changed since refused.

Plugins load and hooks apply once per process (``PluginManager``'s gates), and the platform
is pinned and initialised once; a fork child inherits all of it.  A ``<PREFIX>_PLUGINS`` or
``<PREFIX>_PLATFORM`` set or changed in ``os.environ`` after the first ``bootstrap_here()``
therefore cannot take effect here: a second ``bootstrap_here()`` returned the first report,
and a fork context's children inherited the first plugin set while the context's spec named
the new one, both unsaid.  So did a change that moves an automatic decision
(``<PREFIX>_USE_CPU_ENGINE``, a device's visibility the probes read, ``<PREFIX>_PLATFORM``
cleared): those are recorded too, and once one changed the platform is decided afresh, as a
launch would, and compared.  Spawned and warm workers load each launch's own selection and
are not concerned; only this process's state is.

The same holds for ``spawn_with_plugins(bootstrap_parent=True, env={...})``: the launcher
bootstraps from ``os.environ`` (what a later ``bootstrap_here()`` or launch here reads), its
workers with ``env=`` applied, so a selection ``env=`` changes is refused rather than run by
the workers alone (:meth:`Applied.check_launch`).

The platform this process pinned is its own decision, not a launcher's: its launches and
contexts decide their workers' afresh (``launch._selection``), following a
``<PREFIX>_PLATFORM`` set since, as from any launcher (before, every launch took the pin
while the workers' own environment named the other platform).  Only what inherits this
process (a ``fork`` context's children, ``bootstrap_parent=True``'s launcher) is held to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NoReturn

from spawnkit import _metadata
from spawnkit.bootstrap.report import BootstrapReport
from spawnkit.errors import ConfigError
from spawnkit.namespace import Namespace
from spawnkit.platforms._probes import VISIBILITY_VARS
from spawnkit.spec import ProcessSpec

__all__ = [
    "Applied",
    "applied_here",
    "check_fork_context",
    "check_same_selection",
    "put_back",
    "record",
]


class Applied:
    """One namespace's ``bootstrap_here()`` in this process: its report, the spec it ran
    (the selection applied), the selection variables' values it was decided with, and other
    values found since to select the same."""

    __slots__ = ("env", "report", "same", "spec")

    def __init__(
        self, report: BootstrapReport, spec: ProcessSpec, env: dict[str, str | None]
    ) -> None:
        self.report, self.spec, self.env = report, spec, env
        self.same = [env]

    def check_launch(
        self, ns: Namespace, template: ProcessSpec, env: Mapping[str, str] | None
    ) -> None:
        """``spawn_with_plugins(bootstrap_parent=True, env=...)``: this process bootstrapped
        from ``os.environ``, where a later ``bootstrap_here()`` or launch reads its selection,
        so ``env=`` cannot select this process's plugins or platform; workers selected
        otherwise (``template``) would run other hooks than their launcher, unsaid.  Without
        ``env=``'s doing, the launch's fresh decision can differ too (:meth:`_changed_since`)."""
        ran = (self.spec.platform, tuple(self.spec.plugins or ()))
        if (template.platform, tuple(template.plugins or ())) == ran:
            return
        culprits = _culprits(ns, env) if env else []
        if not env or not culprits:  # env= changes nothing here: the difference is not its doing
            self._changed_since(ns, template)
        here = " and ".join(f"{var} is {_shown(os.environ.get(var))}" for var in culprits)
        names = " ".join(f"{var}={env[var]!r}" for var in culprits)
        raise ConfigError(
            f"spawn_with_plugins(bootstrap_parent=True) with env= setting {names}: this "
            f"process bootstrapped from its own environment, where {here}, and applied plugins "
            f"{list(ran[1])} on platform {ran[0]!r}, while its workers, with env= applied, "
            f"would load plugins {list(template.plugins or ())} on platform "
            f"{template.platform!r}. Plugins load and hooks apply once per process, from "
            "os.environ (a later bootstrap_here() or launch here reads it), so env= cannot "
            "change this process's selection. No worker was started. Fix: export "
            f"{names} before this process starts (or set it in os.environ before its first "
            "bootstrap_here()) and drop it from env=, or drop it from env= to run launcher "
            "and workers on this process's selection; to give only the workers another "
            "selection, pass bootstrap_parent=False.",
            setting=culprits[0],
        )

    def _changed_since(self, ns: Namespace, template: ProcessSpec) -> NoReturn:
        """A launch decides its workers' selection afresh (``launch._selection``), so a change
        since this process bootstrapped that the selection variables do not show (those
        ``bootstrap_here()`` refuses first): ``<PREFIX>_USE_CPU_ENGINE``, a device's
        visibility, the installed plugins, would start ``bootstrap_parent=True``'s workers on
        another selection than their launcher's."""
        now = _selection_env(ns)
        raise ConfigError(
            "spawn_with_plugins(bootstrap_parent=True): this process bootstrapped before "
            f"{_changes(self.env, now) or _UNNAMED} changed: "
            f"{_both(self.spec, template.platform, template.plugins or ())}, as this launch "
            "decides for its workers, so launcher and workers would run other selections. No "
            "worker was started. Fix: put back what changed, or start a new process for the "
            "new selection; to give only the workers the new one, pass bootstrap_parent=False.",
            setting=_names(self.env, now).split(" and ")[0],
        )


_applied: dict[str, Applied] = {}

#: What changed where no variable of ``_selection_env`` did.
_UNNAMED = "the installed plugins or what platform discovery reads (a device's visibility)"


def _selection_env(ns: Namespace) -> dict[str, str | None]:
    """The variables that select, as read here: ``<PREFIX>_USE_CPU_ENGINE`` and the device
    visibility the built-in probes read too, which move an automatic decision (a launch
    decides afresh with them, and a repeated ``bootstrap_here()`` asks whether they did)."""
    cfg = ns.config
    names = (cfg.plugins_var, cfg.platform_var, cfg.cpu_engine_var, *VISIBILITY_VARS)
    return {var: os.environ.get(var) for var in names}


def record(ns: Namespace, report: BootstrapReport, spec: ProcessSpec) -> None:
    _applied[ns.name] = Applied(report, spec, _selection_env(ns))


def applied_here(ns: Namespace) -> Applied | None:
    """This process's ``bootstrap_here()`` of ``ns``, or None (never called, or a worker)."""
    return _applied.get(ns.name)


def put_back(ns: Namespace, applied: Applied | None) -> None:
    """Make ``applied`` (None: none) this process's record again: ``isolated_hooks`` undoes the
    patches a ``bootstrap_here()`` in the test made, and a later test's call must run again
    rather than return the report of patches that are gone."""
    if applied is None:
        _applied.pop(ns.name, None)
    else:
        _applied[ns.name] = applied


def check_same_selection(ns: Namespace, applied: Applied, *, decide: bool = True) -> None:
    """A repeated ``bootstrap_here()``: the same selection returns as before (the variables
    unchanged: one comparison); another one is refused, since it cannot take effect here.
    ``decide=False``: the platform is not decided afresh (``context.bootstrap_ns``)."""
    now = _selection_env(ns)
    if now in applied.same:
        return
    with _metadata.one_look():
        platform = _platform_now(ns, applied.spec, decide)
        plugins = ns.plugins.select(platform=applied.spec.platform)
    if (platform, plugins) == (applied.spec.platform, applied.spec.plugins):
        if decide:  # another spelling of the same selection: asked once
            applied.same.append(now)
        return
    names = _names(applied.env, now)
    raise ConfigError(
        f"spawnkit.bootstrap_here({ns.name!r}) was called again, but "
        f"{_changes(applied.env, now)} changed since this process bootstrapped: "
        f"{_both(applied.spec, platform, plugins)}. The platform is decided and initialised "
        "once per process, and plugins load and hooks apply once (a fork child inherits "
        "them), so the new selection cannot take effect here. Fix: set "
        f"{names} before the first bootstrap_here() (at the top of the entry "
        "module), or start a new process for the other selection; to give only spawned "
        "workers another one, pass the variable in the launch's env= "
        "(spawn_with_plugins(..., env={...})) instead of changing os.environ.",
        setting=names.split(" and ")[0],
    )


def check_fork_context(ns: Namespace, spec: ProcessSpec) -> None:
    """``get_context('fork')`` in a process ``bootstrap_here()`` bootstrapped with another
    selection than the context's (``spec``): its children inherit this process's bootstrap
    whole, whatever the context's spec says."""
    applied = applied_here(ns)
    if applied is None:
        return
    platform, plugins = spec.platform, spec.plugins or ()
    if (platform, plugins) == (applied.spec.platform, applied.spec.plugins or ()):
        return
    # the context's selection is decided afresh, as a launch's (launch._selection)
    then, now = applied.env, _selection_env(ns)
    names = _names(then, now) or _UNNAMED
    raise ConfigError(
        f"get_context('fork', namespace={ns.name!r}): this process was bootstrapped by "
        f"bootstrap_here() before {_changes(then, now) or _UNNAMED} "
        f"changed: {_both(applied.spec, platform, plugins)}. A fork child inherits this "
        "process's platform, plugins and hooks as they are, so the context's children would "
        "run the old selection while its spec names the new one. Fix: use "
        "get_context('spawn') or get_context('forkserver'), whose children load the "
        "context's own selection, or set "
        f"{names} before the first bootstrap_here() (or put it back).",
        setting=_names(then, now).split(" and ")[0],
    )


def _platform_now(ns: Namespace, applied: ProcessSpec, decide: bool) -> str | None:
    """The platform a first ``bootstrap_here()`` would select now.  This process's platform is
    pinned, so no selection here reads ``<PREFIX>_PLATFORM`` again: the variable itself is
    compared (a built-in's name in any case).  Unset, the decision is made afresh, as a
    launch's (``<PREFIX>_USE_CPU_ENGINE`` or a device's visibility set since moves it); only
    asked once a recorded variable changed."""
    var = os.environ.get(ns.config.platform_var, "").strip()
    if var:
        return applied.platform if applied.platform in (var, var.lower()) else var
    if not decide:
        return applied.platform
    from spawnkit.platforms.discovery import env_applied

    with env_applied({}, fresh=True):
        return ns.platforms.select(pinned=False).name


def _culprits(ns: Namespace, env: Mapping[str, str]) -> list[str]:
    """The ``env=`` names whose value is not this process's: the selection's own variables
    (and ``PYTHONPATH``, where plugins are found) where ``env=`` changes one, else all."""
    cfg = ns.config
    changed = [var for var in env if os.environ.get(var) != env[var]]
    first = (cfg.plugins_var, cfg.platform_var, cfg.cpu_engine_var, cfg.lenient_var, "PYTHONPATH")
    return [var for var in first if var in changed] or changed


def _shown(value: str | None) -> str:
    return "unset" if value is None else repr(value)


def _changes(then: dict[str, str | None], now: dict[str, str | None]) -> str:
    return " and ".join(
        f"{var} ({_shown(then[var])} then, {_shown(now[var])} now)"
        for var in then
        if then[var] != now[var]
    )


def _names(then: dict[str, str | None], now: dict[str, str | None]) -> str:
    return " and ".join(var for var in then if then[var] != now[var])


def _both(applied: ProcessSpec, platform: str | None, plugins: tuple[str, ...]) -> str:
    said = f"this process applied plugins {list(applied.plugins or ())}"
    if platform != applied.platform:
        said += f" on platform {applied.platform!r}; the selection now is platform {platform!r}"
        return said + f" with plugins {list(plugins)}"
    return said + f"; the selection now is plugins {list(plugins)}"
