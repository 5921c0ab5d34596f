"""``spawnkit launch --launcher ray``: on ``--address`` (left running) or a local cluster."""

from __future__ import annotations

import os
import time
from typing import Any, TextIO

from spawnkit.cli._output import Output

__all__ = ["check_ray", "run_ray"]

#: Seconds to wait for the head's TCP port before calling the address unreachable.
_PROBE_S = 5.0


def check_ray() -> None:
    """Refuse before starting anything when Ray is not installed."""
    import importlib.util

    from spawnkit.cli._errors import UsageError

    if importlib.util.find_spec("ray") is None:
        raise UsageError(
            "--launcher ray needs Ray, which is not installed in this environment",
            'pip install "spawnkit[ray]"',
        )


def _reachable(address: str) -> str | None:
    """Why ``host:port`` is unreachable, or None: ``ray.init()`` would retry it for minutes."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return None
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=_PROBE_S):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


def _connect(ray: Any, address: str | None, nprocs: int) -> None:
    from spawnkit.errors import LauncherUnavailableError

    why = _reachable(address) if address else None
    if why is not None:
        raise LauncherUnavailableError(
            f"cannot join the Ray cluster at {address}: nothing answers there ({why}). Nothing "
            "was launched; check the address (`ray status` on the head node shows it), or drop "
            "--address to start a local cluster."
        )
    try:
        if address:
            ray.init(address=address, configure_logging=False)
        else:
            # Enough logical CPUs for one bundle per rank, even on a small machine.
            ray.init(
                address="local",
                num_cpus=max(nprocs, os.cpu_count() or 1),
                include_dashboard=False,
                configure_logging=False,
            )
    except Exception as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        fix = (
            "check the address (`ray status` on the head node shows it)"
            if address
            else "check `ray start --head` works here, or pass --address of a running cluster"
        )
        raise LauncherUnavailableError(
            f"cannot start or join {where}: {type(exc).__name__}: {exc}. Nothing was launched; "
            f"{fix}."
        ) from exc


def run_ray(
    *,
    entry: str,
    payload: Any,
    nprocs: int,
    namespace: Any,
    app_dir: str,
    address: str | None,
    timeout: float,
    as_json: str | None,
    debug: bool,
    out: Output,
    err: TextIO,
    prefix_output: bool = False,
) -> int:
    """Start the group on Ray, wait for it, print timings and results; the exit status."""
    import ray

    from spawnkit.cli._group import report_failure, report_success
    from spawnkit.errors import SpawnkitError
    from spawnkit.scaleout.ray import spawn_on_ray

    _connect(ray, address, nprocs)
    started = time.monotonic()
    try:
        pythonpath = os.pathsep.join(p for p in (app_dir, os.environ.get("PYTHONPATH", "")) if p)
        with spawn_on_ray(
            entry,
            payload,
            nprocs=nprocs,
            namespace=namespace,
            env={"PYTHONPATH": pythonpath},
            ready_timeout=timeout,
            join_timeout=timeout,
            prefix_output=prefix_output,
        ) as group:
            reports = group.wait_ready()
            results = group.results(timeout=timeout)
            nodes = group.nodes
    except SpawnkitError as exc:
        return report_failure(exc, out, err, as_json=as_json, debug=debug, launcher="ray")
    finally:
        ray.shutdown()
    where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
    summary = {"launcher": "ray", "entry": entry, "nprocs": nprocs, "nodes": list(nodes)}
    return report_success(
        out,
        as_json,
        {**summary, "wall_seconds": time.monotonic() - started},
        reports,
        results,
        f"{nprocs} rank(s) finished on {where} in {{wall:.2f}} s",
    )
