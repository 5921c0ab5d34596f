"""Which Ray nodes are dead, as the cluster's node table says: the ground truth for a lost rank.

A failed actor call comes long before Ray marks the node dead, and also from transient faults;
only the table separates "node gone" from "process died".  The wait loops also poll it, for a
rank whose node stops answering without closing its sockets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

__all__ = ["dead_nodes", "wait_node_dead"]

#: How often a wait for a node's verdict asks the node table again.
_POLL_S = 0.2


def dead_nodes(ray: Any, node_ids: Iterable[str]) -> set[str]:
    """The ids among ``node_ids`` that Ray lists as not alive (or forgot); a failed query: none."""
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
