"""What a user would pick instead of spawnkit, started on the same workers as the spawn benchmark.

* ``torch-mp-spawn``  ``torch.multiprocessing.spawn(join=False)``: its children unpickle
                      torch's wrapper, so even the trivial worker imports torch there;
* ``loky-first``      loky's reusable executor, created for the call (workers start);
* ``loky-reused``     the same executor's next batch (workers already up, module imported);
* ``ray-actor``       one Ray actor per worker (``num_cpus=0``), the cluster started beforehand.

Each returns, like the raw baselines, the seconds from the start call to
each entry running (``CLOCK_MONOTONIC``, system-wide).  loky and Ray are
optional: :func:`available` says which peers run and why the others do not,
and the benchmark prints that reason instead of the rows.  Every wait is
bounded by ``timeout``; processes of a failed call are killed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from spawnkit.bench._site import plain_baseline

__all__ = ["PEERS", "available", "close", "measure"]

#: The peers in the order of the table.
PEERS = ("torch-mp-spawn", "loky-first", "loky-reused", "ray-actor")

_NEEDS = {
    "torch-mp-spawn": ("torch", 'pip install "spawnkit[torch]"'),
    "loky-first": ("loky", 'pip install "spawnkit[bench]"'),
    "loky-reused": ("loky", 'pip install "spawnkit[bench]"'),
    "ray-actor": ("ray", 'pip install "spawnkit[ray]"'),
}


def available() -> tuple[tuple[str, ...], list[str]]:
    """(peers that can run here, one skip note per missing package)."""
    have: list[str] = []
    notes: dict[str, str] = {}
    for peer in PEERS:
        package, hint = _NEEDS[peer]
        if importlib.util.find_spec(package) is None:
            why = f"{package} is not installed: its peer rows are skipped; {hint}"
            notes.setdefault(package, why)
        else:
            have.append(peer)
    return tuple(have), list(notes.values())


def measure(peer: str, module: str, n: int, timeout: float) -> list[float]:
    """Start ``n`` workers of ``module`` with ``peer``; each one's seconds to its entry."""
    runners: dict[str, Callable[[str, int, float], list[float]]] = {
        "torch-mp-spawn": _torch_spawn,
        "loky-first": _loky_first,
        "loky-reused": _loky_reused,
        "ray-actor": _ray_actor,
    }
    return runners[peer](module, n, timeout)


def _torch_spawn(module: str, n: int, timeout: float) -> list[float]:
    tmp: Any = importlib.import_module("torch.multiprocessing")  # untyped: no stubs for spawn
    entry = importlib.import_module(module).rank_entry
    queue = tmp.get_context("spawn").SimpleQueue()
    deadline = time.monotonic() + timeout
    with plain_baseline():  # the peer as a user runs it: spawnkit says nothing about it
        t0 = time.monotonic()
        context = tmp.spawn(entry, args=(queue,), nprocs=n, join=False)
    try:
        stamps: list[float] = []
        while len(stamps) < n and time.monotonic() < deadline:
            if not queue.empty():
                stamps.append(queue.get())
            elif context.join(0.005) and queue.empty():  # raises with a child's traceback
                break
        if len(stamps) < n:
            raise TimeoutError(
                f"torch.multiprocessing.spawn {module}: {n - len(stamps)} of {n} workers "
                f"sent nothing within {timeout:g} s (or exited without sending); they are killed"
            )
    finally:
        for proc in context.processes:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        queue.close()
    return [t - t0 for t in stamps]


_loky_workers = 0  # the size of the executor loky holds for us; 0: none


def _loky(n: int) -> Any:
    from loky import get_reusable_executor

    global _loky_workers
    _loky_workers = n
    return get_reusable_executor(max_workers=n)


def _loky_batch(executor: Any, module: str, n: int, timeout: float, t0: float) -> list[float]:
    entry = importlib.import_module(module).entry
    futures = [executor.submit(entry) for _ in range(n)]
    return [f.result(timeout=timeout) - t0 for f in futures]


def _loky_first(module: str, n: int, timeout: float) -> list[float]:
    _shutdown_loky()
    t0 = time.monotonic()
    return _loky_batch(_loky(n), module, n, timeout, t0)


def _loky_reused(module: str, n: int, timeout: float) -> list[float]:
    executor = _loky(n)
    _loky_batch(executor, module, n, timeout, time.monotonic())  # warm: workers up, imported
    return _loky_batch(executor, module, n, timeout, time.monotonic())


def _shutdown_loky() -> None:
    global _loky_workers
    if _loky_workers:
        from loky import get_reusable_executor

        get_reusable_executor(max_workers=_loky_workers).shutdown(wait=True, kill_workers=True)
        _loky_workers = 0


#: sys.path and os.environ before ray.init, which adds to both: restored by close(), so the
#: benchmarks measured after Ray (forkservers inherit sys.path, subprocesses the environment)
#: do not run with Ray's additions.
_before_ray: list[tuple[list[str], dict[str, str]]] = []


class _Actor:
    """A Ray actor whose one method runs the worker module's entry."""

    def run(self, module: str) -> float:
        return float(importlib.import_module(module).entry())


def _ray_actor(module: str, n: int, timeout: float) -> list[float]:
    loaded = sys.modules.get("ray")
    if loaded is None or not loaded.is_initialized():  # what importing and starting Ray adds
        _before_ray.append((list(sys.path), dict(os.environ)))
    import ray

    if not ray.is_initialized():  # the cluster start is not the actor's start
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    actor: Any = ray.remote(num_cpus=0)(_Actor)
    t0 = time.monotonic()
    actors: list[Any] = [actor.remote() for _ in range(n)]
    try:
        stamps = ray.get([a.run.remote(module) for a in actors], timeout=timeout)
    finally:
        for a in actors:
            ray.kill(a)
    return [t - t0 for t in stamps]


def close() -> None:
    """Stop what the peers left running between measurements: loky's workers, Ray."""
    _shutdown_loky()
    ray = sys.modules.get("ray")  # never imported here: importing ray changes sys.path
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    while _before_ray:
        path, environ = _before_ray.pop()
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)
