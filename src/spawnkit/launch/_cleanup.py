"""Finding and ending a worker group's processes, including orphans of a dead launcher.

A tree walk misses re-parented processes, so :func:`cleanup` also unions a pid record (with
start times, so a reused pid is never killed) and the ``SPAWNKIT_RUN_ID`` every worker exports.
:func:`kill_trees` is the one bounded ending; it returns the pids it could not reap.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from spawnkit.bootstrap._parent_death import RUN_ID_VAR

__all__ = [
    "CleanupResult",
    "cleanup",
    "forget_run",
    "kill_trees",
    "record_run",
    "snapshot_tree",
    "stop_group",
]

_log = logging.getLogger("spawnkit.bootstrap")


@dataclass
class CleanupResult:
    """What :func:`cleanup` did: ``ended`` were signalled and are gone, ``survivors`` are not."""

    run_id: str
    ended: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ended or self.survivors)


def _runs_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"spawnkit-{uid}" / "runs"


def _record_path(run_id: str) -> Path:
    safe = "".join(ch for ch in run_id if ch.isalnum() or ch in "-_")
    return _runs_dir() / f"{safe}.json"


def record_run(run_id: str, pids: Iterable[int]) -> None:
    """Remember a run's worker pids and start times, for :func:`cleanup` after a launcher crash."""
    entries: list[list[float]] = []
    for pid in pids:
        try:
            entries.append([pid, psutil.Process(pid).create_time()])
        except psutil.Error:
            continue
    path = _record_path(run_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"launcher": os.getpid(), "workers": entries}), encoding="utf-8"
        )
        os.replace(tmp, path)
    except OSError as exc:  # cleanup() still finds workers by their environment
        _log.debug("could not record run %s: %s", run_id, exc)


def forget_run(run_id: str) -> None:
    with contextlib.suppress(OSError):
        _record_path(run_id).unlink()


def _recorded(run_id: str) -> list[psutil.Process]:
    try:
        data = json.loads(_record_path(run_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found: list[psutil.Process] = []
    for pid, created in data.get("workers", []):
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - float(created)) < 0.01:
                found.append(proc)
        except (psutil.Error, ValueError, TypeError):
            continue
    return found


def _tagged(run_id: str) -> list[psutil.Process]:
    """Processes of this user whose initial environment carries ``SPAWNKIT_RUN_ID=run_id``."""
    if os.path.isdir("/proc/self"):
        return _tagged_procfs(run_id)
    me = os.getuid() if hasattr(os, "getuid") else None
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            if me is not None and proc.uids().real != me:
                continue
            if proc.environ().get(RUN_ID_VAR) == run_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _tagged_procfs(run_id: str) -> list[psutil.Process]:
    """``_tagged`` from ``/proc`` directly: every group's teardown reads every process of
    this user, and psutil parsing each environment into a dict made that scan cost about
    10 ms per 100 processes; a byte search for the one variable takes a sixth of that
    (``benchmarks/cleanup_scan.py``)."""
    tag = f"{RUN_ID_VAR}={run_id}".encode()
    me = os.getuid()
    found: list[psutil.Process] = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != me:
                    continue
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    block = f.read()
            except OSError:  # ended meanwhile, or not ours to read
                continue
            if tag in block and tag in block.split(b"\0"):  # a whole variable, not a prefix
                with contextlib.suppress(psutil.Error):
                    found.append(psutil.Process(int(entry.name)))
    return found


def snapshot_tree(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes and all their descendants, captured now (before anything is signalled)."""
    seen: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            continue
        seen.setdefault(proc.pid, proc)
        try:
            for child in proc.children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.Error:
            continue
    return list(seen.values())


def _signal(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            continue


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie: a zombie has already ended and only waits for its parent."""
    try:
        return bool(proc.is_running()) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll until every process ended; returns those running (``wait_procs`` hangs on zombies)."""
    end = time.monotonic() + max(timeout, 0.0)
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() >= end:
            return alive
        time.sleep(0.02)


def kill_trees(
    procs: list[psutil.Process],
    *,
    term_timeout: float,
    kill_timeout: float,
    first: int = signal.SIGTERM,
    wait: Callable[[list[psutil.Process], float], list[psutil.Process]] = _wait_ended,
) -> list[int]:
    """The one ending: ``first`` (SIGTERM), bounded wait, SIGKILL, bounded wait; returns survivors.

    ``wait`` reaps the launcher's own children (psutil must not: their exit codes are needed).
    """
    if not procs:
        return []
    _signal(procs, first)
    alive = wait(procs, term_timeout)
    if alive:
        _signal(alive, signal.SIGKILL)
        alive = wait(alive, kill_timeout)
    return sorted(proc.pid for proc in alive)


def stop_group(
    pids: Sequence[int],
    run_id: str,
    *,
    grace: float,
    kill_wait: float,
    first: int,
    reap: Callable[[list[int], float], set[int]],
) -> list[int]:
    """End a group's workers ``pids``, their trees (captured first) and run-tagged processes."""
    tree = snapshot_tree(pids)
    known = {p.pid for p in tree}
    me = os.getpid()
    tree += [p for p in _tagged(run_id) if p.pid not in known and p.pid != me]
    workers = set(pids)

    def wait(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
        end = time.monotonic() + timeout
        running = reap([p.pid for p in procs if p.pid in workers], timeout)
        others = [p for p in procs if p.pid not in workers]
        left = _wait_ended(others, end - time.monotonic())
        return [p for p in procs if p.pid in running] + left

    survivors = kill_trees(tree, term_timeout=grace, kill_timeout=kill_wait, first=first, wait=wait)
    if survivors:
        _log.warning(
            "worker group %s: pid(s) %s survived SIGKILL and could not be reaped", run_id, survivors
        )
    return survivors


def unreaped_warning(pids: list[int]) -> str:
    """The line a group's failure gains when its teardown could not reap ``pids``."""
    return (
        f"Warning: pid(s) {pids} survived SIGKILL and could not be reaped (uninterruptible "
        "sleep, usually a device or filesystem call); they may still hold resources."
    )


def _check_timeout(timeout: object) -> None:
    """``timeout=nan`` never expired (``monotonic() >= nan`` is false), so a process ignoring
    SIGTERM held ``cleanup()`` forever and was never sent SIGKILL; ``-1`` read as 0, ``"5"``
    was a bare ``TypeError``."""
    from spawnkit.errors import ConfigError
    from spawnkit.launch._checks import check_seconds

    if check_seconds("timeout", timeout, none="", zero_ok=True, call="cleanup") is None:
        raise ConfigError(
            "cleanup(timeout=None): must be a number of seconds (0: SIGKILL right after "
            "SIGTERM).",
            setting="timeout",
        )


def cleanup(run_id: str, *, timeout: float = 5.0) -> CleanupResult:
    """End every process of run ``run_id`` still alive: workers, their children, orphans.

    Never touches this process or its ancestors; bounded by about ``timeout``; returns survivors.
    """
    if not run_id:
        raise ValueError("cleanup() needs the run id of a worker group (WorkerGroup.run_id)")
    _check_timeout(timeout)
    protected = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        protected.update(p.pid for p in psutil.Process().parents())
    roots = {p.pid: p for p in (*_recorded(run_id), *_tagged(run_id)) if p.pid not in protected}
    # A zombie already ended before this call: it is neither ended by it nor a survivor.
    procs = [p for p in snapshot_tree(roots) if p.pid not in protected and _running(p)]
    started = time.monotonic()
    survivors = kill_trees(procs, term_timeout=timeout / 2, kill_timeout=timeout / 2)
    forget_run(run_id)
    ended = sorted(p.pid for p in procs if p.pid not in survivors)
    if procs:
        _log.info(
            "cleanup(%s): ended %d process(es) in %.2f s; %d survived SIGKILL: %s",
            run_id,
            len(ended),
            time.monotonic() - started,
            len(survivors),
            survivors,
        )
    return CleanupResult(run_id, ended, survivors)
