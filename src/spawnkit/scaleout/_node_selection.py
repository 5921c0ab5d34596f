"""A rank's own environment selecting other plugins (or another platform) than its launcher did.

Why: the launcher decides the plugin selection once for every rank and records it in the
spec, and each rank compares its node's installation with that record (``_plugin_set``).
But a rank's environment is its node's (torchrun's shell on that node, the raylet's for
Ray), and ``<PREFIX>_PLUGINS`` (or ``<PREFIX>_PLATFORM``) set there was read by no one or
by the wrong one, unsaid:

* torchrun: the spec pins the launcher's plugins (and a platform it chose), so
  ``SRT_PLUGINS=one torchrun -m spawnkit.run ...`` loaded every plugin the spec names,
  the variable doing nothing;
* Ray, with no selection in the driver (``spec.plugins`` None): the rank read its
  raylet's ``SRT_PLUGINS`` and loaded that subset, while the driver recorded "all" as the
  set every rank runs, so the plugin-set check agreed.

A value that selects what the launcher selected is quiet; the launcher's own choice,
carried in ``spec.env``, is what the rank runs and is never a difference.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from spawnkit.errors import ConfigError, PluginDriftError

if TYPE_CHECKING:
    from spawnkit.spec import ProcessSpec

__all__ = ["check_node_selection", "node_decides_platform"]

_log = logging.getLogger("spawnkit.scaleout")


def _launcher_plugins(spec: Any) -> tuple[set[str], set[str]] | None:
    """(the plugins the launcher selected, every plugin name its installation has), or None
    for a spec that records neither (built by hand)."""
    group = spec.namespace.plugin_group
    rows = spec.entry_points if spec.entry_points is not None else spec._control.plugin_rows
    if rows is None:
        return None
    known = {row[0] for row in rows if row[2] == group}
    if spec.plugins is not None:
        return set(spec.plugins), known
    return known, known  # Ray's record of no selection: every plugin it found


def node_decides_platform(template: ProcessSpec) -> ProcessSpec:
    """``build_spec``'s platform where its own detection chose it (no ``<PREFIX>_PLATFORM``)
    is the launcher's hardware: pinned, a rank on a node with an accelerator the launcher
    lacks ran the launcher's platform, unsaid (Ray's ``spawn_spec_on_ray``, torchrun across
    nodes).  Each rank's node decides, as ``spawn_on_ray``'s ranks do, its own
    ``<PREFIX>_PLATFORM`` included; a platform chosen, or set on the template since, stays."""
    if template.platform is not None and template.platform == template._control.detected_platform:
        return template.replace(platform=None)
    return template


def check_node_selection(spec: Any, *, node: str, rank: int, launcher: str) -> None:
    """Refuse a ``<PREFIX>_PLUGINS`` / ``<PREFIX>_PLATFORM`` of this rank's own environment
    (not the spec's) that selects otherwise than the launcher did; ``launcher`` names it."""
    where = f"rank {rank} on node {node or '<unknown>'} (host {os.uname().nodename})"
    _check_plugins(spec, where, node, rank, launcher)
    _check_platform(spec, where, launcher)


def _check_plugins(spec: Any, where: str, node: str, rank: int, launcher: str) -> None:
    config = spec.namespace
    var = config.plugins_var
    raw = os.environ.get(var)
    recorded = _launcher_plugins(spec)
    if raw is None or var in spec.env or recorded is None:
        return
    chosen, known = recorded
    asked = {n.strip() for n in raw.split(",") if n.strip()}
    # a name the launcher's installation lacks is not compared: the launcher dropped it
    # (lenient), or, read by the rank, its own load refuses it by name
    if asked & known == chosen:
        return
    if spec.plugins is None:
        runs = (
            f"it would load its node's selection, other hooks than the {launcher} recorded "
            "for every rank"
        )
    else:
        runs = (
            f"it loads the {launcher}'s selection, which the spec pins, so {var} here "
            "does nothing"
        )
    shown = ", ".join(sorted(chosen)) or "no plugin"
    here = ", ".join(sorted(asked)) or "no plugin"
    allow = config.allow_plugin_drift_var
    message = (
        f"{where} has {var}={raw!r} in its own environment (selecting {here}), but the "
        f"{launcher} selected {shown} for every rank: {runs}"
    )
    from spawnkit.scaleout._plugin_set import drift_allowed

    if drift_allowed(allow, os.environ):
        _log.warning("%s (%s=1 allows this).", message, allow)
        return
    node_env = "this node's environment"
    if spec.plugins is None:
        node_env = "the environment its raylet started in"
    raise PluginDriftError(
        f"{message}. Set {var} where the {launcher} decides (its environment, or its "
        f"env=: it reaches every rank from there), or unset it in {node_env}; "
        f"{allow}=1 runs anyway with a warning.",
        node=node,
        rank=rank,
        plugin=sorted(chosen ^ (asked & known))[0],
    )


def _check_platform(spec: Any, where: str, launcher: str) -> None:
    """A platform the spec pins (one torchrun's launcher chose) and this rank's environment
    names another: the pin wins, and the variable did nothing.  An unpinned rank (Ray's, or
    one whose launcher only detected its platform: ``node_decides_platform``) reads it itself."""
    var = spec.namespace.platform_var
    raw = os.environ.get(var, "").strip()
    if not raw or spec.platform is None or var in spec.env or raw == spec.platform:
        return
    if spec.entry_points is None:  # a spec built by hand pins on purpose
        return
    raise ConfigError(
        f"{where} has {var}={raw!r} in its own environment, but the {launcher} pinned "
        f"platform {spec.platform!r} for every rank, so {var} here does nothing. Set it "
        f"where the {launcher} decides (its environment, or its env=), or unset it in this "
        "node's environment.",
        setting=var,
    )
