"""The driver's namespace settings, carried to Ray ranks as a local launcher's workers inherit them.

Why: a local worker is the launcher's child and inherits its environment, so
``<PREFIX>_PLUGINS=batch_timer`` exported in the launcher's shell selects every
rank's plugins.  A Ray rank is its node's raylet's child: it sees the
environment that raylet started with, which is not the driver's on a cluster
joined with ``--address``, nor for a variable set after ``ray.init()``.  So
every namespace variable set in the driver (``_PLUGINS``, ``_HOOK_CONFLICTS``,
``_IMPORT_GUARD``, ``_LENIENT_PLUGINS``, ``_STRICT_ENV``, ``_ALLOW_PLUGIN_DRIFT``,
the engine's ``extra_env``) silently did nothing there: every rank loaded
every plugin, and the driver's plugin-set record said "all" too, so nothing
disagreed.  The driver now forwards each of them that ``env=`` does not set,
and resolves the plugin selection once, as the local launcher does: the ranks
load those names, and the plugin-set record covers exactly those.

``<PREFIX>_PLATFORM`` and ``<PREFIX>_USE_CPU_ENGINE`` are forwarded as well:
they are the user's explicit choice, not the driver's detection (which stays
unpinned: a driver often runs on a node without its workers' accelerators),
and each rank still resolves that choice on its own node (a node without that
platform fails in ``initialize_platform``, naming it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from spawnkit.errors import ConfigError

__all__ = ["driver_settings", "plugin_selection"]


def driver_settings(config: Any, env: Mapping[str, str]) -> dict[str, str]:
    """The namespace's variables set in this process that ``env`` does not set (``env`` wins)."""
    return {
        var: os.environ[var] for var in config.known_env if var in os.environ and var not in env
    }


def plugin_selection(
    ns: Any,
    env: Mapping[str, str],
    rows: tuple[tuple[str, str, str, str, str], ...],
    given: Sequence[str] | None = None,
) -> tuple[str, ...] | None:
    """The general plugins ``spawn_on_ray(plugins=given)`` or else ``env``'s
    ``<PREFIX>_PLUGINS`` selects (None: no selection, all).

    A name no row of the driver's installation provides is refused here, once, as the local
    launcher refuses it (lenient: warned, and left out); with ``<PREFIX>_ALLOW_PLUGIN_DRIFT=1``
    each rank's node decides instead, so the name is kept for the ranks to check.
    """
    config = ns.config
    if given is not None:
        names = _given_names(given)
        if not all(isinstance(n, str) and n.strip() for n in names):
            return names  # ProcessSpec refuses it, naming the item
        origin = f"spawn_on_ray(plugins={list(names)!r})"
    elif config.plugins_var in env:
        raw = env[config.plugins_var]
        names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
        origin = f"{config.plugins_var}={raw!r}"
    else:
        return None
    installed = {row[0]: row for row in rows if row[2] == config.plugin_group}
    unknown = sorted(set(names) - set(installed))
    from spawnkit.scaleout._plugin_set import drift_allowed

    if drift_allowed(config.allow_plugin_drift_var, env) or not unknown:  # a bad value: refused
        return names
    from spawnkit.hooks._plugin_selection import PluginInfo, parse_bool, refuse_unknown

    lenient_raw = env.get(config.lenient_var)
    lenient = (
        parse_bool(config.lenient_var, lenient_raw)
        if lenient_raw is not None
        else not config.strict_plugins
    )
    infos = [
        PluginInfo(name, value, dist, version, group, "selected", "")
        for name, value, group, dist, version in installed.values()
    ]
    refuse_unknown(ns, unknown, infos, lenient, origin)
    return tuple(n for n in names if n not in unknown)


def _given_names(given: Sequence[str]) -> tuple[str, ...]:
    """``plugins=`` as a tuple: a str was read as its letters (``plugins="patcher"`` selected
    ``'p'``, ``'a'``, ...), which every rank then refused once its actor had started."""
    if isinstance(given, str | bytes):
        raise ConfigError(
            f"spawn_on_ray(plugins={given!r}): one string, which would be read as its letters; "
            f"pass a sequence of plugin names: plugins=({given!r},). No actor was started.",
            setting="plugins",
        )
    return tuple(given)
