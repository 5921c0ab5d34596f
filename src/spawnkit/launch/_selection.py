"""The parent's one resolution of platform and plugins, shared by every launch and context."""

from __future__ import annotations

import os

from spawnkit import _metadata
from spawnkit._environ import path_applied
from spawnkit.launch._checks import namespace_value
from spawnkit.namespace import Namespace

__all__ = ["parent_selection"]


def parent_selection(
    ns: Namespace, env: dict[str, str]
) -> tuple[str, tuple[str, ...], tuple[tuple[str, str, str, str, str], ...]]:
    """The platform, the plugins and their entry points, resolved once here for every rank."""
    # What the workers will find installed: env='s PYTHONPATH too (see _environ.path_applied);
    # then every question below reads the same installed set.
    with path_applied(env), _metadata.one_look():
        return _select(ns, env)


def _select(
    ns: Namespace, env: dict[str, str]
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
    lenient = (
        _parse_bool(config.lenient_var, env[config.lenient_var])
        if config.lenient_var in env
        else None
    )
    # Selection runs as the workers will: with env= applied (a device visible only there
    # counts), restored afterwards; see platforms.discovery.env_applied.
    how = f"{config.platform_var}={name!r} (in env=)" if name else ""
    with env_applied(env):
        selection = ns.platforms.select(name, origin=how)
        plugins = ns.plugins.select(
            names=names, platform=selection.name, lenient=lenient, origin=origin
        )
    check_cpu_engine(ns, env, selection.name, selection.kind)  # set, and never read
    rows = _metadata.snapshot((ns.config.platform_group, ns.config.plugin_group))
    return selection.name, plugins, rows
