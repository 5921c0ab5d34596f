"""The Ray actor that hosts one rank: a fresh worker process running spawnkit's staged bootstrap.

Why not Ray's ``worker_process_setup_hook``: it runs in every worker of the
job, cannot see the rank, breaks nested ``ray.init`` and leaves a worker alive
after it failed.  Instead the driver hands each actor the same picklable
``ProcessSpec`` a locally spawned worker gets, and the actor runs the same
``bootstrap_process`` on it.

The actor is threaded (``max_concurrency=2``): ``run`` performs the bootstrap
and then the entry (which may run for hours), while ``wait_ready`` answers
the driver as soon as the bootstrap's ``ready`` fires, or as soon as it fails.
A rank that failed exits its process shortly after returning its failure, so
a failed bootstrap never leaves a live actor behind.

This module must stay importable in the worker before any hook is applied:
it imports only the standard library and spawnkit's stdlib-only parts at the
top; the bootstrap itself is imported inside ``run``.
"""

from __future__ import annotations

import os
import pickle
import socket
import threading
import time
from typing import Any

__all__ = ["RankActor", "applied_hook_state"]

#: Seconds a failed rank waits, after returning its failure to the driver, before it exits.
FAILED_EXIT_GRACE_S = 3.0

# Set once this process has started a rank: a second rank here would be a reused worker.
_ran: dict[str, Any] | None = None
_ran_lock = threading.Lock()


def applied_hook_state() -> list[str]:
    """What in this process says it is not fresh: prior bootstraps and applied hooks."""
    found: list[str] = []
    if _ran is not None:
        found.append(
            f"rank {_ran['rank']} of run {_ran['run_id'] or '<unnamed>'} already bootstrapped "
            f"here at {time.strftime('%H:%M:%S', time.localtime(_ran['at']))}"
        )
    from spawnkit.spec import _phase

    if _phase.worker_namespace() is not None and _ran is None:
        found.append("a spawnkit worker bootstrap already ran in this process")
    import sys

    if "spawnkit.hooks.registry" in sys.modules:
        from spawnkit.namespace import Namespace

        for ns in list(Namespace._registry.values()):
            registry = ns._hooks
            if registry is None:
                continue
            for applied in registry.applied_targets():
                sources = ", ".join(str(src) for src in applied.sources) or "unknown source"
                found.append(
                    f"namespace {ns.name!r} has hooks applied on {applied.target} (from {sources})"
                )
    return found


def _locate_node() -> tuple[str, str, str]:
    """``(node id, node ip, why the node id is unknown)`` of this Ray worker process.

    The driver watches the rank's node by this id; without it node loss shows only as a dead actor.
    """
    node = ip = ""
    try:
        import ray

        ctx = ray.get_runtime_context()
        node = str(ctx.get_node_id() or "")
        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        os.environ.setdefault("RAY_ADDRESS", str(ctx.gcs_address))
    except Exception as exc:
        from spawnkit._names import qualified_name

        return node, ip, f"{qualified_name(exc)}: {exc}"
    if not node or node == "None":
        return "", ip, "Ray's runtime context returned no node id"
    return node, ip, ""


class RankActor:
    """One rank.  Construct it through ``ray.remote(RankActor).options(...)``, never directly."""

    def __init__(self) -> None:
        from spawnkit.bootstrap import guard
        from spawnkit.spec import _phase

        guard.arm()  # before the spec or anything of the engine can be imported here
        # "Before hooks" from here on, as a local worker is from its command line: a lazy
        # proxy touched while the actor's arguments or the spec are unpickled is refused.
        _phase.enter_worker()
        self._pid = os.getpid()
        self._host = socket.gethostname()
        self._node, self._ip, self._node_error = _locate_node()
        from spawnkit.scaleout.progress import ProgressListener

        self._progress = ProgressListener(node=self._node)
        self._started = False
        self._capture: Any = None

    def where(self) -> dict[str, Any]:
        """Where this rank lives; the driver derives local ranks from the node ids."""
        where = {"pid": self._pid, "host": self._host, "node": self._node, "ip": self._ip}
        if self._node_error:
            where["node_error"] = self._node_error
        return where

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        """``ready`` with the report, ``failed`` with the record, or ``pending`` with the stage."""
        from spawnkit._waits import wait_event

        wait_event(self._progress.ready_event, timeout)  # a bound past Event.wait's too
        if self._progress.failure is not None:
            return {"status": "failed", "failure": self._progress.failure}
        if self._progress.report is not None:
            return {"status": "ready", "report": self._progress.report}
        return {"status": "pending", "stage": self._progress.current, **self.where()}

    def output(self) -> dict[str, bytes]:
        """What the rank wrote to stdout/stderr since the driver last asked (``_ray_output``)."""
        return self._capture.take() if self._capture is not None else {}

    def _final_output(self) -> dict[str, bytes]:
        return self._capture.take(final=True) if self._capture is not None else {}

    def run(self, rank: int, spec_bytes: bytes) -> dict[str, Any]:
        """Bootstrap this rank from its spec and call the entry; never raises."""
        global _ran
        booting = False  # whether the listener speaks of this call (a reused actor's does not)
        try:
            with _ran_lock:
                reused = applied_hook_state()
                if self._started or reused:
                    from spawnkit.errors import BootstrapError

                    raise BootstrapError(
                        f"Ray worker process {self._pid} on {self._host} (node {self._node}) is "
                        f"not fresh: {'; '.join(reused) or 'run() was already called'}. "
                        "Bootstrapping another rank here would mix two hook sets in one "
                        "process, so it is refused. spawnkit.ray starts one new actor per rank; "
                        "do not call RankActor.run twice or reuse its worker.",
                        stage="reuse_check",
                        rank=rank,
                        pid=self._pid,
                        host=self._host,
                        kind="worker_reuse",
                    )
                self._started = True
                spec = pickle.loads(spec_bytes)
                _ran = {"rank": rank, "run_id": spec.run_id, "at": time.time()}
            self._set_rank_env(spec)
            from spawnkit.scaleout._ray_output import Capture

            self._capture = Capture()
            self._capture.start()
            from spawnkit.scaleout._node_selection import check_node_selection
            from spawnkit.scaleout._plugin_set import check_plugin_set

            # before any plugin loads: the selection the raylet's environment would make
            check_node_selection(spec, node=self._node, rank=rank, launcher="driver")
            check_plugin_set(spec, node=self._node, rank=rank)
            from spawnkit.bootstrap.process import bootstrap_process

            booting = True
            result = bootstrap_process(spec, listener=self._progress)
        except BaseException as exc:
            from spawnkit.protocol import failure

            current = self._progress.current if booting else ""
            ready = booting and self._progress.report is not None
            if ready and isinstance(exc, SystemExit) and exc.code in (None, 0):
                # sys.exit(0) in the entry is an ending meant so, as in a local or torchrun
                # rank: its result is None, not a failure
                return {"status": "ok", "result": None, "output": self._final_output()}
            stage = failure.failing_stage(exc, current, ready)
            record = failure.record(stage, exc, rank=rank, node=self._node)
            self._progress.fail(record)
            self._exit_soon()
            return {"status": "failed", "failure": record, "output": self._final_output()}
        return {"status": "ok", "result": result, "output": self._final_output()}

    def _set_rank_env(self, spec: Any) -> None:
        """The spec's env (already filtered by the driver) plus this rank's numbers."""
        os.environ.update(spec.env)
        os.environ["RANK"] = str(spec.rank)
        os.environ["LOCAL_RANK"] = str(spec.local_rank)
        os.environ["WORLD_SIZE"] = str(spec.world_size)
        local_world = spec._control.local_world_size
        if local_world is not None:
            os.environ["LOCAL_WORLD_SIZE"] = str(local_world)

    def _exit_soon(self) -> None:
        """Leave the process after the driver had time to fetch the failure (it kills us first)."""

        def _later() -> None:
            time.sleep(FAILED_EXIT_GRACE_S)
            os._exit(1)

        threading.Thread(target=_later, name="spawnkit-failed-exit", daemon=True).start()
