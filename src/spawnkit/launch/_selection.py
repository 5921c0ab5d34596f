"""The parent's one resolution of platform and plugins, shared by every launch and context."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from spawnkit import _metadata
from spawnkit._environ import path_applied
from spawnkit.launch import _here
from spawnkit.launch._checks import namespace_value
from spawnkit.namespace import Namespace

__all__ = ["launching", "parent_selection", "workers_started_by"]

#: The start method of the launch or context whose selection runs now ("" for a spec of
#: another launcher's): spawn and forkserver workers re-run ``__main__``'s body.
_method: ContextVar[str] = ContextVar("spawnkit_selection_method", default="")


@contextlib.contextmanager
def workers_started_by(method: str) -> Iterator[None]:
    """The selections made inside are for workers that ``method`` starts."""
    token = _method.set(method)
    try:
        yield
    finally:
        _method.reset(token)


#: The launch's ``ready_timeout``: how long its platform decision may run before the launcher
#: says what it waits on (None: a context's selection, or no startup limit).
_limit: ContextVar[float | None] = ContextVar("spawnkit_selection_limit", default=None)


@contextlib.contextmanager
def launching(method: str, ready_timeout: float | None) -> Iterator[None]:
    """The selections made inside are a launch's: for workers ``method`` starts, and saying,
    past ``ready_timeout``, which plugin they still wait on."""
    token = _limit.set(ready_timeout)
    try:
        with workers_started_by(method):
            yield
    finally:
        _limit.reset(token)


@contextlib.contextmanager
def _watched(ns: Namespace) -> Iterator[None]:
    """Run a launch's platform decision, saying once past ``ready_timeout`` what it waits on.

    Every platform plugin's ``activate()`` runs here, in the launcher's own thread, before any
    worker starts; one that blocks (a driver query that never returns) held the launch forever
    with nothing said, while the same call in a worker is bounded by ``ready_timeout``.  It
    cannot be stopped from another thread (nor moved to one: a plugin's imports may set signal
    handlers), so it is named.  A timer thread only where platform plugins are installed.
    """
    import threading

    seconds = _limit.get()
    # A Timer past threading.TIMEOUT_MAX (292 years; 49.7 days on Windows) dies in its own
    # thread with OverflowError: such a launch outlives any watch, as with None.
    if (
        seconds is None
        or seconds > threading.TIMEOUT_MAX
        or not _metadata.entry_points(ns.config.platform_group)
    ):
        yield
        return
    timer = threading.Timer(seconds, _say_waiting, (ns, seconds, threading.get_ident()))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _say_waiting(ns: Namespace, seconds: float, thread: int) -> None:
    from spawnkit import _steps
    from spawnkit._log import LazyLogger

    what = _steps.activating_in(thread) or "platform discovery has not finished"
    LazyLogger("spawnkit.launch").warning(
        "after %g s (the launch's ready_timeout), %s: the launcher waits for it before "
        "starting any worker, and nothing but its return (or Ctrl-C) ends the wait. Make "
        "activate() only check for the hardware (no blocking driver call), or select a "
        "platform by name (%s=<name>), which asks no other plugin.",
        seconds,
        what,
        ns.config.platform_var,
    )


def parent_selection(
    ns: Namespace, env: dict[str, str], *, applies_here: bool = False
) -> tuple[str, tuple[str, ...], tuple[tuple[str, str, str, str, str], ...]]:
    """The platform, the plugins and their entry points, resolved once here for every rank.

    ``applies_here``: for this process's own bootstrap (``bootstrap_here()``), whose apply
    takes every hook registered on the namespace, a plugin's or not."""
    # What the workers will find installed: env='s PYTHONPATH too (see _environ.path_applied);
    # then every question below reads the same installed set.
    with path_applied(env), _metadata.one_look():
        return _select(ns, env, applies_here)


def _select(
    ns: Namespace, env: dict[str, str], applies_here: bool
) -> tuple[str, tuple[str, ...], tuple[tuple[str, str, str, str, str], ...]]:
    from spawnkit.bootstrap import guard
    from spawnkit.hooks import _conflicts
    from spawnkit.hooks.plugins import _parse_bool
    from spawnkit.launch._env_check import check_cpu_engine, check_env
    from spawnkit.launch._group_check import check_groups
    from spawnkit.platforms.discovery import env_applied

    config = ns.config
    check_env(ns, env)  # typos and other namespaces' variables: warned once, here
    check_groups(ns)  # a plugin declared in a misspelt group: warned once, here
    # The namespace's selection variables given in ``env=`` win over the parent's own
    # environment: the workers would see them, so the parent decides with them.
    name = env.get(config.platform_var, "").strip() or None
    names: tuple[str, ...] | None = None
    origin = ""
    if config.plugins_var in env:
        raw = env[config.plugins_var]
        names = tuple(n.strip() for n in raw.split(",") if n.strip())
        origin = f"{config.plugins_var}={raw!r} (in env=)"
    # Values every worker would refuse are refused once, here, by variable name.
    guard.resolve_policy(
        config.guard_policy,
        namespace_value(env, os.environ, config.guard_var),
        var=config.guard_var,
    )
    _conflicts.parse_policy(
        config.hook_conflicts_var, namespace_value(env, os.environ, config.hook_conflicts_var)
    )
    drift = namespace_value(env, os.environ, config.allow_plugin_drift_var)
    if drift is not None:  # read by Ray and torchrun ranks (scaleout._plugin_set.drift_allowed)
        _parse_bool(config.allow_plugin_drift_var, drift)
    lenient = (
        _parse_bool(config.lenient_var, env[config.lenient_var])
        if config.lenient_var in env
        else None
    )
    # Selection runs as the workers will: with env= applied (a device visible only there
    # counts), restored afterwards, and afresh for each launch (os.environ may have changed
    # since the last one); see platforms.discovery.env_applied.  The platform bootstrap_here()
    # pinned is this process's own: its launches decide afresh too (<PREFIX>_PLATFORM set
    # since then is followed, as without it), where a worker's launches keep the launcher's.
    how = f"{config.platform_var}={name!r} (in env=)" if name else ""
    pinned = _here.applied_here(ns) is None
    with env_applied(env, fresh=True):
        with _watched(ns):
            selection = ns.platforms.select(name, origin=how, pinned=pinned)
        plugins = ns.plugins.select(
            names=names, platform=selection.name, lenient=lenient, origin=origin
        )
        _check_blank_plugins(ns, env, selection.name)
    check_cpu_engine(ns, env, selection.name, selection.kind)  # set, and never read
    if not applies_here:  # this process's bootstrap applies them: they run here
        _check_own_hooks(ns, plugins)
    rows = _metadata.snapshot((ns.config.platform_group, ns.config.plugin_group))
    return selection.name, plugins, rows


def _check_blank_plugins(ns: Namespace, env: dict[str, str], platform: str) -> None:
    """``<PREFIX>_PLUGINS`` set but blank while plugins are installed: one warning a launch,
    since an empty value that meant "all" (SGLang's reading) runs with no plugin, unsaid."""
    var = ns.config.plugins_var
    raw = env[var] if var in env else os.environ.get(var)
    if raw is None:
        return
    from spawnkit.hooks._plugin_selection import blank_message, is_blank

    if not is_blank(raw):  # ',' names nothing too: the parsers drop empty items
        return
    origin = f"{var}={raw!r}" + (" (in env=)" if var in env else "")
    infos = ns.plugins.discover(names=(), platform=platform)
    message = blank_message(ns, infos, origin, platform, raw=raw)
    if not message:
        return
    import warnings

    from spawnkit.hooks._plugin_selection import PluginSelectionWarning
    from spawnkit.launch._env_check import _user_line

    filename, lineno, module = _user_line()
    # warn_explicit without a registry: once per launch, as the environment's checks are.
    warnings.warn_explicit(
        f"{message}. -W ignore::spawnkit.PluginSelectionWarning silences this.",
        PluginSelectionWarning,
        filename,
        lineno,
        module,
    )


def _check_own_hooks(ns: Namespace, plugins: tuple[str, ...]) -> None:
    """Hooks this process registered on the namespace outside the workers' plugins and never
    applied here: no process applies them (a worker applies what its plugins register)."""
    registry = getattr(ns, "_hooks", None)  # not created for the asking: most launchers
    if registry is None or not registry._count():
        return
    from spawnkit.hooks._decide import NOT_APPLIED_YET

    # A platform package's own (registered as discovery imported it) are not stray: the
    # workers on that platform import it and register them; the others' apply nowhere.
    # The script's own, registered by a line of its body that each worker runs again: not
    # stray, the worker registers and applies them itself (spawn before its plugins' hooks).
    rerun = _rerun_by_workers(registry) if _method.get() in ("spawn", "forkserver") else set()
    stray = [
        row
        for row in registry.status()
        if row.reason == NOT_APPLIED_YET
        and row.source.plugin_name not in plugins
        and not row.source.platform
        and (row.target, row.hook, row.hook_type) not in rerun
    ]
    if not stray:
        return
    import warnings

    from spawnkit._warnopts import user_stacklevel
    from spawnkit.hooks._plugin_selection import PluginSelectionWarning

    listed = "; ".join(f"{row.hook_type} {row.hook} on {row.target!r}" for row in stray)
    warnings.warn(
        f"{len(stray)} hook(s) registered in this process on namespace {ns.name!r} by no "
        f"plugin the workers load ({listed}) were never applied here, and no worker applies "
        "them (a worker applies what its plugins register): they never run. Register them "
        f"from a plugin's callback (an entry point in group {ns.config.plugin_group!r}) or "
        "from code the entry runs; to hook this process as well, call "
        "spawnkit.apply_plugin_hooks() (or NS.hooks.apply_hooks()) here.",
        PluginSelectionWarning,
        stacklevel=user_stacklevel(),
    )


def _rerun_by_workers(registry: Any) -> set[tuple[str, str, str]]:
    """(target, hook, type) of each hook ``__main__``'s body registered outside any ``if`` on
    ``__name__`` (``hooks.registry._note_main_line``): a spawn or forkserver worker re-runs
    that body as ``__mp_main__`` before its entry, and so registers and applies them too."""
    lines: dict[int, tuple[object, str, int]] = registry._state.main_lines
    main = sys.modules.get("__main__")
    if not lines or main is None:
        return set()
    from spawnkit.bootstrap._plain_children import _reruns, _unguarded

    if not _reruns(main):  # -c, stdin, a package's __main__: no worker runs it again
        return set()
    return {
        (reg.target, reg.hook_name, reg.hook_type.name)
        for reg in registry.registrations()
        if (at := lines.get(reg.seq)) is not None and at[0] is main and _unguarded(*at[1:])
    }
