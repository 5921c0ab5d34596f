"""``spawnkit launch --launcher torchrun``: write a signed spec, run (or print) torchrun, clean up.

Spec and key live in a ``mkdtemp`` folder (0700, files 0600): whoever can rewrite the spec and
read the key runs code in every rank.  ``--print-only`` keeps the folder for another shell or
node; otherwise it is removed however torchrun ends.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from spawnkit.bootstrap.stages import Stage
from spawnkit.cli._errors import EXIT_OK
from spawnkit.cli._output import Output, emit_json

__all__ = ["Nodes", "check_torchrun", "run_torchrun", "torchrun_command"]

#: How long torchrun gets after SIGTERM to stop its ranks before everything is killed.
_STOP_GRACE_S = 10.0
_KILL_WAIT_S = 5.0


def check_torchrun() -> None:
    """torchrun is ``torch.distributed.run``: refuse before writing anything when it is missing."""
    import importlib.util

    from spawnkit.cli._errors import UsageError

    try:
        found = importlib.util.find_spec("torch.distributed.run")
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UsageError(
            "--launcher torchrun needs torch.distributed.run, which this Python cannot import",
            "install torch in this environment (pip install torch==<your version>)",
        )


@dataclass(frozen=True)
class Nodes:
    """torchrun's multi-node options as given on ``spawnkit launch`` (None: not given)."""

    nnodes: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    spec_dir: str | None = None
    extra: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: Any) -> Nodes:
        return cls(
            args.nnodes,
            args.node_rank,
            args.rdzv_endpoint,
            args.rdzv_id,
            args.spec_dir,
            tuple(args.torchrun_args or ()),
        )

    @property
    def multi(self) -> bool:
        return (self.nnodes or 1) > 1 or self.rdzv_endpoint is not None

    def world(self, nproc_per_node: int) -> int:
        return (self.nnodes or 1) * nproc_per_node

    def torchrun_args(self) -> list[str]:
        if not self.multi:
            return ["--standalone", *self.extra]
        args: list[str] = []
        for flag, value in (
            ("--nnodes", self.nnodes),
            ("--node-rank", self.node_rank),
            ("--rdzv-endpoint", self.rdzv_endpoint),
            ("--rdzv-id", self.rdzv_id),
        ):
            if value is not None:
                args += [flag, str(value)]
        return [*args, *self.extra]


def torchrun_command(spec_file: Path, nprocs: int, nodes: Nodes | None = None) -> list[str]:
    """``nprocs`` ranks on this node, each running ``python -m spawnkit.run --spec FILE``;
    ``nodes``: the multi-node options, and torchrun arguments given after ``--``, verbatim."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *(nodes or Nodes()).torchrun_args(),
        "--nproc-per-node",
        str(nprocs),
        "-m",
        "spawnkit.run",
        "--spec",
        str(spec_file),
    ]


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _stop(proc: subprocess.Popen[bytes], run_id: str) -> list[int]:
    """SIGTERM torchrun, then SIGKILL its tree (captured first); returns the survivors."""
    from spawnkit.launch._cleanup import _tagged, snapshot_tree

    tree = snapshot_tree([proc.pid])
    known = {p.pid for p in tree}
    tree += [p for p in _tagged(run_id) if p.pid not in known and p.pid != os.getpid()]
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(_STOP_GRACE_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
    import psutil

    left = [p for p in tree if p.is_running()]
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            continue
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
    _gone, alive = psutil.wait_procs(left, timeout=_KILL_WAIT_S)
    return sorted(p.pid for p in alive)


def run_torchrun(
    *,
    entry: str,
    payload: Any,
    nprocs: int,
    namespace: Any,
    app_dir: str,
    timeout: float,
    print_only: bool,
    as_json: str | None,
    out: Output,
    err: TextIO,
    nodes: Nodes | None = None,
) -> int:
    """Write the spec, then print the torchrun command or run it; torchrun's exit status."""
    nodes = nodes or Nodes()
    own = nodes.spec_dir or tempfile.mkdtemp(prefix="spawnkit-torchrun-")
    folder = Path(own)
    keep = nodes.spec_dir is not None
    try:
        key, template = _spec_in(folder, entry, payload, nodes.world(nprocs), namespace)
        key_file, spec_file = folder / "key", folder / "spec.bin"
        cmd = torchrun_command(spec_file, nprocs, nodes)
        pythonpath = os.pathsep.join(p for p in (app_dir, os.environ.get("PYTHONPATH", "")) if p)
        if print_only:
            keep = True
            _print_command(cmd, pythonpath, key_file, template.run_id, as_json, out, err)
            return EXIT_OK
        started = time.monotonic()
        store = nodes.rdzv_endpoint if nodes.multi else None
        what = f"{nprocs} rank(s) of {entry}"
        # torchrun keeps no results: each rank of this node writes its own into a private
        # folder of this node's (a --spec-dir may be shared by every node).
        results_dir = Path(tempfile.mkdtemp(prefix="spawnkit-results-"))
        try:
            code = _run(
                cmd, key, pythonpath, template.run_id, what, timeout, store, nodes, err, results_dir
            )
            results = _read_results(results_dir, nodes.world(nprocs))
        finally:
            shutil.rmtree(results_dir, ignore_errors=True)
        wall = time.monotonic() - started
        if as_json:
            document = {"ok": code == 0, "launcher": "torchrun", "entry": entry, "nprocs": nprocs}
            document |= {"run_id": template.run_id, "exit_status": code, "wall_seconds": wall}
            emit_json(out, as_json, {**document, "results": results})
        if code != 0:
            err.write(
                f"spawnkit: FAILED: torchrun exited with status {code} ({nprocs} rank(s) of "
                f"{entry}); the failing rank's traceback and torchrun's failure table are above\n"
            )
            return code if code > 0 else 128 - code
        if as_json != "-":
            _print_results(out, results)
            out.line(f"{nprocs} rank(s) finished under torchrun in {wall:.2f} s")
        return EXIT_OK
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _read_results(folder: Path, world: int) -> list[str | None]:
    """By global rank, the ``repr`` of each entry's result that a rank of this node wrote
    (``spawnkit.run`` with ``RESULT_DIR_VAR``); None for a rank of another node or one that
    did not finish.  Under ``--max-restarts`` only the last attempt's count: a rank removes
    its earlier result as it starts again, and one of an older attempt than another rank's
    (a rank that did not start again) is not shown as this job's."""
    import json

    found: dict[int, tuple[int, str]] = {}
    for rank in range(world):
        try:
            doc = json.loads((folder / f"rank{rank}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("repr"), str):
            attempt = doc.get("attempt", 0)
            found[rank] = (attempt if isinstance(attempt, int) else 0, doc["repr"])
    last = max((attempt for attempt, _ in found.values()), default=0)
    return [found[r][1] if r in found and found[r][0] == last else None for r in range(world)]


def _print_results(out: Output, results: list[str | None]) -> None:
    """``rank N returned: ...`` for each rank of this node, as for a local launch."""
    for rank, text in enumerate(results):
        if text is not None:
            out.line(f"rank {rank} returned: {text if len(text) <= 200 else text[:197] + '...'}")


def _spec_in(folder: Path, entry: str, payload: Any, world: int, namespace: Any) -> tuple[str, Any]:
    """``(key, template)``: the signed spec in ``folder`` if one is there (another node wrote
    it: every node must run the same one), else a new one written there."""
    from spawnkit.cli._errors import UsageError
    from spawnkit.launch.specs import write_launch_spec
    from spawnkit.spec.signing import generate_key, read_spec_file

    key_file, spec_file = folder / "key", folder / "spec.bin"
    if spec_file.exists() and key_file.exists():
        key = key_file.read_text(encoding="utf-8").strip()
        template = read_spec_file(spec_file, key=key)
        if template.entry and template.entry != entry:
            raise UsageError(
                f"--spec-dir {str(folder)!r} holds a spec for entry {template.entry!r}, not "
                f"{entry!r}",
                "pass the same ENTRY on every node, or another --spec-dir",
            )
        if template.world_size != world:
            raise UsageError(
                f"--spec-dir {str(folder)!r} holds a spec for {template.world_size} rank(s); "
                f"--nnodes x --nproc-per-node here makes {world}",
                "pass the same --nnodes and --nproc-per-node on every node",
            )
        return key, template
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = generate_key()
    _write_private(key_file, key)
    template = write_launch_spec(
        spec_file, entry, payload, key=key, nprocs=world, namespace=namespace
    )
    return key, template


def _print_command(
    cmd: list[str],
    pythonpath: str,
    key_file: Path,
    run_id: str,
    as_json: str | None,
    out: Output,
    err: TextIO,
) -> None:
    """``--print-only``: the command line to run by hand; the spec and key stay for it."""
    from spawnkit.spec.signing import DEFAULT_KEY_VAR

    folder = key_file.parent
    shown = (
        f"PYTHONPATH={shlex.quote(pythonpath)} "
        f'{DEFAULT_KEY_VAR}="$(cat {shlex.quote(str(key_file))})" {shlex.join(cmd)}'
    )
    if as_json:
        emit_json(out, as_json, {"command": shown, "folder": str(folder), "run_id": run_id})
    else:
        out.line(shown)
    err.write(
        f"spawnkit launch: spec and key kept in {folder} (readable by you only); "
        f"remove them when done: rm -r {shlex.quote(str(folder))}\n"
    )


def _run(
    cmd: list[str],
    key: str,
    pythonpath: str,
    run_id: str,
    what: str,
    timeout: float,
    store: str | None = None,
    nodes: Nodes | None = None,
    err: TextIO | None = None,
    results_dir: Path | None = None,
) -> int:
    """Run torchrun, bounded by ``timeout``; on node 0 a failure published in ``store`` stops it."""
    from spawnkit.bootstrap._parent_death import RUN_ID_VAR
    from spawnkit.scaleout.torchrun import FAILURE_STORE_VAR, RESULT_DIR_VAR
    from spawnkit.spec.signing import DEFAULT_KEY_VAR

    env = dict(os.environ)
    env[DEFAULT_KEY_VAR] = key
    env["PYTHONPATH"] = pythonpath
    if results_dir is not None:
        env[RESULT_DIR_VAR] = str(results_dir)
    # In torchrun's *initial* environment, so spawnkit.cleanup(run_id) finds it and its ranks.
    env[RUN_ID_VAR] = run_id
    if store:
        env[FAILURE_STORE_VAR] = store
    watch = store is not None and nodes is not None and (nodes.node_rank or 0) == 0
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        if watch:
            assert store is not None
            return _wait_watching(proc, timeout, store, run_id, err or sys.stderr)
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        survivors = _stop(proc, run_id)
        from spawnkit.errors import BootstrapTimeoutError

        extra = f"; pid(s) {survivors} survived SIGKILL" if survivors else ""
        raise BootstrapTimeoutError(
            f"torchrun ({what}) was still running after --timeout {timeout:.0f} s; it and its "
            f"ranks were stopped{extra}. Pass a larger --timeout if the entry needs longer.",
            stage=Stage.ENTRY.value,
            waited_s=timeout,
        ) from None
    except BaseException:  # Ctrl-C: stop the ranks before the interrupt goes on
        _stop(proc, run_id)
        raise


def _wait_watching(
    proc: subprocess.Popen[bytes], timeout: float, store: str, run_id: str, err: TextIO
) -> int:
    """``proc.wait(timeout)`` on node 0, polling the job's store for another node's failure."""
    from spawnkit.scaleout.torchrun import read_published_failure

    deadline = time.monotonic() + timeout
    while True:
        try:
            return proc.wait(min(0.5, max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        found = read_published_failure(store, run_id)
        if found is not None:
            err.write(
                f"spawnkit: FAILED on node {found.get('node', '?')}: {found['message']}\n"
                f"spawnkit: node 0 stops its own ranks: the job cannot finish without rank "
                f"{found['rank']}.\n"
            )
            err.flush()
            _stop(proc, run_id)
            return 1
