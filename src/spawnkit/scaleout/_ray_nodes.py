"""Which Ray nodes are dead, as the cluster's node table says: the ground truth for a lost rank.

Why the driver asks instead of trusting the actor call's error: when a node
goes away, the driver's call to a rank there fails within seconds with
"actor unavailable / socket closed", long before Ray's health check marks the
node dead, and the same error also comes from a transient network fault.
Only the node table separates "the node is gone" (nothing on it will come
back; the fix is on the cluster) from "this one process died" (the rank's
own code, memory, or a kill).  And a rank whose node stops answering
without closing its sockets never fails its call at all: the wait loops poll
this table so such a rank is still reported once Ray declares the node dead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

__all__ = ["dead_nodes", "wait_node_dead"]

#: How often a wait for a node's verdict asks the node table again.
_POLL_S = 0.2


def dead_nodes(ray: Any, node_ids: Iterable[str]) -> set[str]:
    """The ids among ``node_ids`` that Ray's node table lists as not alive.

    A node missing from the table counts as dead: Ray drops nodes it has
    forgotten.  A failing query counts as "none known dead", so a GCS hiccup
    never invents a node loss.
    """
    wanted = {n for n in node_ids if n}
    if not wanted:
        return set()
    try:
        table = ray.nodes()
    except Exception:
        return set()
    alive = {str(n.get("NodeID", "")) for n in table if n.get("Alive")}
    return {n for n in wanted if n not in alive}


def wait_node_dead(ray: Any, node_id: str, within: float) -> bool:
    """True once the node table marks ``node_id`` dead, False if it did not within ``within`` s."""
    if not node_id:
        return False
    deadline = time.monotonic() + max(0.0, within)
    while True:
        if dead_nodes(ray, [node_id]):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(_POLL_S, left))
