"""``spawnkit launch --launcher torchrun``: write a signed spec, run (or print) torchrun, clean up.

The spec and its key live in a private folder (``mkdtemp``: mode 0700; both
files 0600), because whoever can rewrite the spec and read the key can run
code in every rank.  The key reaches the ranks through torchrun's
environment and is dropped from each rank's environment before any plugin or
entry code runs (see :mod:`spawnkit.run`).  With ``--print-only`` nothing is
started: the command line is printed for another shell, or another node,
and the folder is kept for it; otherwise the folder is removed when torchrun
ends, fails, times out or is interrupted.
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
from pathlib import Path
from typing import Any, TextIO

from spawnkit.bootstrap.stages import Stage
from spawnkit.cli._errors import EXIT_OK
from spawnkit.cli._output import Output, emit_json

__all__ = ["check_torchrun", "run_torchrun", "torchrun_command"]

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


def torchrun_command(spec_file: Path, nprocs: int) -> list[str]:
    """One node, ``nprocs`` ranks, each running ``python -m spawnkit.run --spec FILE``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
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


def _pythonpath(app_dir: str) -> str:
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (app_dir, rest) if p)


def _stop(proc: subprocess.Popen[bytes], run_id: str) -> list[int]:
    """SIGTERM torchrun (it stops its ranks), then SIGKILL whatever of its tree is left.

    The tree is captured before signalling: a rank whose agent died is
    re-parented and no walk from torchrun would find it afterwards.  Returns
    the pids that survived SIGKILL.
    """
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
) -> int:
    """Write the spec, then print the torchrun command or run it; torchrun's exit status."""
    from spawnkit.launch.specs import write_launch_spec
    from spawnkit.spec.signing import generate_key

    folder = Path(tempfile.mkdtemp(prefix="spawnkit-torchrun-"))
    keep = False
    try:
        key = generate_key()
        key_file = folder / "key"
        _write_private(key_file, key)
        spec_file = folder / "spec.bin"
        template = write_launch_spec(
            spec_file, entry, payload, key=key, nprocs=nprocs, namespace=namespace
        )
        cmd = torchrun_command(spec_file, nprocs)
        pythonpath = _pythonpath(app_dir)
        if print_only:
            keep = True
            _print_command(cmd, pythonpath, key_file, template.run_id, as_json, out, err)
            return EXIT_OK
        started = time.monotonic()
        code = _run(cmd, key, pythonpath, template.run_id, f"{nprocs} rank(s) of {entry}", timeout)
        wall = time.monotonic() - started
        if as_json:
            document = {"ok": code == 0, "launcher": "torchrun", "entry": entry, "nprocs": nprocs}
            document |= {"run_id": template.run_id, "exit_status": code, "wall_seconds": wall}
            emit_json(out, as_json, document)
        if code != 0:
            err.write(
                f"spawnkit: FAILED: torchrun exited with status {code} ({nprocs} rank(s) of "
                f"{entry}); the failing rank's traceback and torchrun's failure table are above\n"
            )
            return code if code > 0 else 128 - code
        if as_json != "-":
            out.line(f"{nprocs} rank(s) finished under torchrun in {wall:.2f} s")
        return EXIT_OK
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


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


def _run(cmd: list[str], key: str, pythonpath: str, run_id: str, what: str, timeout: float) -> int:
    """Run torchrun to its end, bounded by ``timeout``; its ranks never outlive this call."""
    from spawnkit.bootstrap._parent_death import RUN_ID_VAR
    from spawnkit.spec.signing import DEFAULT_KEY_VAR

    env = dict(os.environ)
    env[DEFAULT_KEY_VAR] = key
    env["PYTHONPATH"] = pythonpath
    # In torchrun's *initial* environment, so spawnkit.cleanup(run_id) finds it and its ranks.
    env[RUN_ID_VAR] = run_id
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
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
