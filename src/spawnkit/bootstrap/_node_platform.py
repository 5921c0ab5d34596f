"""A rank whose node chose another platform than the launcher's, given that platform's plugins.

Why: a launcher that only detected its platform (no ``<PREFIX>_PLATFORM``) leaves each rank's
node to decide its own (``scaleout._node_selection.node_decides_platform``: torchrun across
nodes, ``spawn_spec_on_ray``), but its plugin selection, frozen into the spec, was made for its
own platform: a plugin of that platform's distribution (its kernels) is in it, named as if the
user had chosen it.  On a node that runs another platform the platform rule leaves such a
plugin out, and the rank failed with the check meant for a user's own ``<PREFIX>_PLUGINS``: "the
parent's selection (names=) selects 'acc_kernels' ... leave the plugin out of
<PREFIX>_PLUGINS", naming neither the node, nor its platform, nor the launcher's, for a
variable nobody set.

Said here instead, before any plugin loads, by the rank that sees it: its node and host, both
platforms, the plugin and its distribution, and what to do.  Only for such a rank (its spec's
platform left to the node and its node's choice another than the launcher's); the other way
round (the launcher's platform has no plugins of its own, the node's has) the node's rule adds
its platform's plugins, as a rank started there alone would load them.
"""

from __future__ import annotations

import os

from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import PluginDriftError
from spawnkit.hooks._plugin_selection import classify, is_lenient

if TYPE_CHECKING:
    from typing import Any

__all__ = ["check_node_platform"]


def check_node_platform(namespace: Any, spec: Any) -> None:
    """Refuse (``PluginDriftError``) plugins the launcher selected for its own platform where
    this rank's node chose another; lenient mode leaves them to the load's one warning."""
    detected = spec._control.detected_platform
    if detected is None or spec.platform is not None or spec.plugins is None:
        return
    here = namespace.platforms.selection().name
    if here == detected or is_lenient(namespace, True if spec.lenient_plugins else None):
        return
    infos = classify(namespace, spec.plugins)[0]
    left = [i for i in infos if i.status == "excluded" and i.name in spec.plugins]
    if not left:
        return
    config = namespace.config
    node = os.environ.get("GROUP_RANK", "")
    where = f"rank {spec.rank} on host {os.uname().nodename}" + (f" (node {node})" if node else "")
    plugin = left[0]
    shown = ", ".join(f"{i.name!r} ({i.dist} {i.version})" for i in left)
    raise PluginDriftError(
        f"{where} runs platform {here!r}, its node's own choice (the launcher only detected "
        f"{detected!r} on its machine, so each node decides), but the launcher selected "
        f"{shown} for every rank as part of platform {detected!r}: it cannot load on "
        f"{here!r} ({plugin.reason}), so this rank would run without what the launcher's "
        f"ranks run. Choose the platform for every rank where the launcher decides "
        f"({config.platform_var}, in its environment or env=), start the launcher on a node "
        f"of this node's hardware, or set {config.lenient_var}=1 to run this node without it "
        "(one warning).",
        node=node,
        rank=spec.rank,
        plugin=plugin.name,
        dist=plugin.dist,
        version=plugin.version,
        group=config.plugin_group,
        stage="load_plugins",
    )
