"""The launcher's plugin set, checked on every node before a rank loads any plugin.

Why: a local worker gets the launcher's entry-point rows in its spec and
loads exactly those, from the same installation.  A rank on another node
(Ray) imports whatever that node has installed: another version of a plugin,
or none, would silently run different hooks in one job.  The launcher puts
its rows in the spec (``LaunchControl.plugin_rows``): name, entry point,
group, distribution and version of every platform plugin and every selected
general plugin, plus a SHA-256 digest over them.  That digest stands for
the hook set: the hooks themselves are known only after the plugins load,
which is what must not happen first, so the digest covers what the launcher
knows, the entry-point rows (same rows from the same versions: same code,
unless a distribution was changed in place without a new version).

A rank scans its own node's metadata for the same groups and compares: a
difference is a :class:`~spawnkit.errors.PluginDriftError` naming node,
rank, distribution and both versions, or, with ``<PREFIX>_ALLOW_PLUGIN_DRIFT=1``,
one warning saying what runs differently.

A torchrun rank (``spawnkit.run``) has no such record: its spec carries the launcher's
entry-point rows (``spec.entry_points``), which it loads by module name from its own
node's installation.  :func:`check_loaded_versions` holds each distribution it will load
(the pinned platform's, the selected plugins') to the launcher's version, with the same
error, warning and opt-out; rows it never loads (another platform's package) do not count.
So does a Ray rank whose spec records no plugin set (``spawn_spec_on_ray(build_spec(...))``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from spawnkit import _metadata
from spawnkit.errors import PluginDriftError

__all__ = ["check_loaded_versions", "check_plugin_set", "plugin_digest", "plugin_rows"]

_log = logging.getLogger("spawnkit.ray")

Row = tuple[str, str, str, str, str]  # name, value, group, dist, version


def plugin_rows(
    config: Any, plugins: tuple[str, ...] | None, extra_path: Sequence[str] = ()
) -> tuple[Row, ...]:
    """The rows of ``config``'s platform and plugin groups installed on ``extra_path`` +
    ``sys.path`` (the first distribution of a name wins, as for imports); general plugins
    limited to the ``plugins`` allow-list when there is one.

    The launcher passes the ``PYTHONPATH`` it gives the ranks as ``extra_path``:
    what its ranks will find, not only what the launcher itself imports.
    """
    import importlib.metadata as md

    groups = (config.platform_group, config.plugin_group)
    found: list[Row] = []
    for dist in md.distributions(path=list(extra_path)):  # only the few extra folders
        name = str(dist.metadata["Name"] or "")
        found += [
            (ep.name, ep.value, ep.group, name, str(dist.version))
            for ep in dist.entry_points
            if ep.group in groups
        ]
    found += _metadata.snapshot(groups)  # sys.path, scanned once per process
    first: dict[str, str] = {}  # distribution -> its version that wins (first on the path)
    rows: list[Row] = []
    for row in found:
        key = row[3].lower().replace("_", "-")
        if first.setdefault(key, row[4]) != row[4] or row in rows:
            continue
        if row[2] == config.plugin_group and plugins is not None and row[0] not in plugins:
            continue
        rows.append(row)
    return tuple(sorted(rows))


def plugin_digest(rows: tuple[Row, ...]) -> str:
    text = "\n".join("\t".join(row) for row in sorted(rows))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _versions(rows: tuple[Row, ...]) -> dict[str, str]:
    return {row[3]: row[4] for row in rows}


def check_plugin_set(spec: Any, *, node: str, rank: int) -> None:
    """Refuse (or, when allowed, warn) if this node's plugin set differs from the launcher's."""
    ctl = spec._control
    if ctl.plugin_rows is None:
        # a spec not written by a launcher that records its plugin set: ``build_spec``'s
        # (``spawn_spec_on_ray(build_spec(...))``) still has the launcher's rows, by which
        # the rank imports each plugin from its own node
        check_loaded_versions(spec, node=node, rank=rank)
        return
    here = plugin_rows(spec.namespace, spec.plugins)
    if plugin_digest(here) == ctl.plugin_digest:
        return
    theirs, ours = _versions(ctl.plugin_rows), _versions(here)
    diffs = [
        (dist, theirs.get(dist, ""), ours.get(dist, ""))
        for dist in sorted(set(theirs) | set(ours))
        if theirs.get(dist) != ours.get(dist)
    ]
    if not diffs:  # same versions, other entry points: a distribution changed in place
        changed = sorted(set(ctl.plugin_rows) ^ set(here))
        diffs = [(row[3], row[4], row[4]) for row in changed[:1]]
    _refuse(spec, diffs, node=node, rank=rank)


def _dist_key(name: str) -> str:
    return name.lower().replace("_", "-")


def check_loaded_versions(
    spec: Any, *, node: str, rank: int, extra_path: Sequence[str] = ()
) -> None:
    """Refuse (or, when allowed, warn) if a distribution this rank loads from the launcher's
    entry-point rows (``spec.entry_points``) has another version on this node, or none:
    the rank imports the module by name, so another version's hooks would run unsaid."""
    rows = spec.entry_points
    if rows is None:
        return  # a spec built by hand: no launcher's rows to hold it to
    config = spec.namespace
    loaded = [
        row
        for row in rows
        if (row[2] == config.platform_group and row[0] == spec.platform)
        or (row[2] == config.plugin_group and (spec.plugins is None or row[0] in spec.plugins))
    ]
    if not loaded:
        return
    ours = {_dist_key(row[3]): row[4] for row in plugin_rows(config, None, extra_path)}
    diffs = sorted(
        {
            (row[3], row[4], ours.get(_dist_key(row[3]), ""))
            for row in loaded
            if ours.get(_dist_key(row[3])) != row[4]
        }
    )
    if diffs:
        _refuse(spec, diffs, node=node, rank=rank)


def drift_allowed(var: str, environ: Mapping[str, str]) -> bool:
    """``<PREFIX>_ALLOW_PLUGIN_DRIFT`` read as every boolean variable of a namespace is: it
    counted only ``"1"``, so ``=true`` got the refusal telling the user to set it, and
    ``=maybe`` was off where ``_LENIENT_PLUGINS=maybe`` is refused."""
    from spawnkit.hooks._plugin_selection import parse_bool

    return parse_bool(var, environ.get(var, ""))


def _refuse(spec: Any, diffs: list[tuple[str, str, str]], *, node: str, rank: int) -> None:
    shown = "; ".join(
        f"{dist}: launcher {want or 'not installed'}, node {got or 'not installed'}"
        for dist, want, got in diffs
    )
    var = spec.namespace.allow_plugin_drift_var
    where = f"rank {rank} on node {node or '<unknown>'} (host {os.uname().nodename})"
    if drift_allowed(var, os.environ):
        _log.warning(
            "%s has another plugin set than the launcher (%s); it runs with its node's "
            "plugins, so its hooks may differ from the other ranks' (%s=1 allows this).",
            where, shown, var,
        )
        return
    dist, want, got = diffs[0]
    fix = f"pip install '{dist}=={want}'" if want else f"pip uninstall {dist}"
    raise PluginDriftError(
        f"{where} refuses to load plugins: its node has another plugin set than the "
        f"launcher ({shown}). Every rank must run the same hooks: make that node match "
        f"the launcher ({fix} there), or set {var}=1 to run anyway with a warning.",
        node=node,
        rank=rank,
        dist=dist,
        version=want,
        node_version=got,
    )
