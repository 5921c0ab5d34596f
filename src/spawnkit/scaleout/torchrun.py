"""``python -m spawnkit.run --spec FILE``: one rank of a torchrun job, bootstrapped by spawnkit.

Each rank verifies the signed template before unpickling, takes ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE`` and runs the staged bootstrap; a failure goes to ``TORCHELASTIC_ERROR_FILE`` in
``@record``'s format and the rank exits 1.  Without torchrun it is rank 0 of 1.  A spec
written for N ranks (N > 1) run in a job of another size fails there, in stage ``read_spec``.

``env=`` entries read only as a process starts (``PYTHONHASHSEED``, ``LD_PRELOAD``...) would be
set too late here, after the interpreter started: a rank without them execs itself once with
them (same pid, so torchrun's supervision is unaffected) before anything else runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spawnkit._flags import check_flag
from spawnkit._rank_env import FAILURE_STORE_VAR, RESTART_VAR, RESULT_DIR_VAR
from spawnkit.bootstrap import guard as _guard
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from spawnkit.spec import ProcessSpec

__all__ = [
    "FAILURE_STORE_VAR",
    "RESTART_VAR",
    "RESULT_DIR_VAR",
    "RankEnvError",
    "main",
    "rank_from_env",
    "read_published_failure",
    "spec_for_rank",
]


#: Stage name reported when the spec file itself is refused (before any bootstrap stage).
READ_SPEC_STAGE = "read_spec"
_LAUNCHER = "torchrun"
#: Stage name of the node's checks against the launcher's selection (as a Ray rank's).
_NODE_CHECK_STAGE = "plugin_check"


class RankEnvError(ValueError):
    """torchrun's rank variables are missing, partial or not integers."""


def rank_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """``(rank, local_rank, world_size)`` from torchrun's variables; all absent is rank 0 of 1."""
    env = os.environ if environ is None else environ
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    present = [n for n in names if n in env]
    if not present:
        return 0, 0, 1
    missing = [n for n in names if n not in env]
    if missing:
        raise RankEnvError(
            f"spawnkit.run found {', '.join(present)} but not {', '.join(missing)} in its "
            "environment. Start it with torchrun (which sets all three) or set none of them "
            "to run a single rank."
        )
    try:
        rank, local_rank, world = (int(env[n]) for n in names)
    except ValueError:
        shown = ", ".join(f"{n}={env[n]!r}" for n in names)
        raise RankEnvError(f"spawnkit.run: rank variables must be integers, got {shown}") from None
    if not (0 <= rank < world) or local_rank < 0:
        raise RankEnvError(
            f"spawnkit.run: RANK={rank}, LOCAL_RANK={local_rank}, WORLD_SIZE={world} is not a "
            "valid rank assignment."
        )
    return rank, local_rank, world


def spec_for_rank(template: ProcessSpec, environ: Mapping[str, str] | None = None) -> ProcessSpec:
    """This rank's spec: the template with torchrun's ranks, minus the never-copy env names,
    and the platform the launcher only detected (its own hardware) left to this rank's node."""
    from spawnkit.scaleout._node_selection import node_decides_platform
    from spawnkit.scaleout.env import split_env

    rank, local_rank, world = rank_from_env(environ)
    _check_world(template.world_size, world, os.environ if environ is None else environ)
    env, _dropped = split_env(template.env, context=f"torchrun rank {rank}")
    spec = template.replace(rank=rank, local_rank=local_rank, world_size=world, env=env)
    return node_decides_platform(spec)


def _check_world(written: int, world: int, environ: Mapping[str, str]) -> None:
    """A spec written for ``written`` ranks (``write_launch_spec(..., nprocs=N)``) run in a job
    of another size: every rank took the job's ``WORLD_SIZE`` and the spec's count was dropped,
    unsaid (``spawnkit launch --spec-dir`` refuses the same).  One rank is ``ProcessSpec``'s
    default, which a spec built by hand for a job of any size carries: not a count to hold."""
    if written in (1, world):
        return
    from spawnkit.errors import ConfigError

    started = (
        f"WORLD_SIZE={environ['WORLD_SIZE']}"
        if "WORLD_SIZE" in environ
        else "no torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE), so as rank 0 of 1"
    )
    raise ConfigError(
        f"the spec was written for {written} ranks (write_launch_spec(..., nprocs={written}) "
        f"or ProcessSpec.world_size={written}), but this rank was started with {started}: "
        f"its world_size would be {world}, the spec's {written} dropped. Fix: start "
        f"{written} ranks (torchrun --nnodes N --nproc-per-node K with N x K = {written}), "
        f"or write the spec with nprocs={world}.",
        setting="nprocs",
    )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m spawnkit.run",
        description="Run one rank of a spawnkit worker group under torchrun from a signed spec.",
    )
    parser.add_argument("--spec", required=True, help="signed spec file (write_spec_file())")
    parser.add_argument(
        "--key-env",
        default=None,
        help="environment variable holding the signing key (default SPAWNKIT_SPEC_KEY)",
    )
    return parser.parse_args(argv)


def _report(exc: BaseException, *, rank: int, stage: str) -> None:
    """Tell torchrun (error file) and the human (stderr) what failed, with the traceback."""
    from spawnkit.protocol import failure
    from spawnkit.scaleout.errorfile import write_error_file

    record = failure.record(stage, exc, rank=rank)
    message = failure.raised_message(record, failure.Worker.of(record, _LAUNCHER))
    headline = message.split("\n", 1)[0]
    try:
        # The agent's failure table prints only the callstack: lead it with rank and stage.
        write_error_file(
            record.exc_type,
            headline,
            f"spawnkit: {headline}\n{record.traceback_text}",
            extra={"rank": str(rank), "stage": record.stage, "host": record.host},
        )
    except OSError as write_exc:  # the traceback still reaches stderr below
        print(f"spawnkit.run: cannot write torchelastic's error file: {write_exc}", file=sys.stderr)
    print(message, file=sys.stderr, flush=True)
    _publish(record, message)


_STORE_TIMEOUT_S = 5.0


def _failure_key(run_id: str) -> str:
    return f"spawnkit/{run_id}/failure"


def _store(endpoint: str) -> Any:
    """A client of the rendezvous store at ``endpoint`` (torch's TCPStore), bounded."""
    from datetime import timedelta

    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host, _, port = endpoint.rpartition(":")
    return TCPStore(
        host,
        int(port),
        is_master=False,
        timeout=timedelta(seconds=_STORE_TIMEOUT_S),
        wait_for_workers=False,
    )


def _restarts_left() -> bool:
    """Whether this rank's torchrun agent starts its ranks again after this failure
    (``--max-restarts``): it does while ``TORCHELASTIC_RESTART_COUNT`` (the attempt, per
    node) is below ``TORCHELASTIC_MAX_RESTARTS``.  Without both: none left."""
    try:
        return int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < int(
            os.environ["TORCHELASTIC_MAX_RESTARTS"]
        )
    except (KeyError, ValueError):
        return False


def _publish(record: Any, message: str) -> None:
    """The first failure that ends the job, into its store (a later one does not replace it).
    A failure torchrun restarts the ranks for is not published: node 0's launcher stops the
    whole job on what it reads there, so the restart (``--max-restarts``) would never run, and
    the key, taken first, would hide the failure that ends a later attempt."""
    endpoint = os.environ.get(FAILURE_STORE_VAR)
    run_id = os.environ.get("SPAWNKIT_RUN_ID", "")
    if not endpoint or _restarts_left():
        return
    import json

    doc = {
        "rank": record.rank,
        "stage": record.stage,
        "host": record.host,
        "node": os.environ.get("GROUP_RANK", "?"),
        "message": message,
    }
    try:
        _store(endpoint).compare_set(_failure_key(run_id), "", json.dumps(doc))
    except Exception as exc:  # the local error file and stderr still have it
        print(
            f"spawnkit.run: could not publish this failure to the job's store at {endpoint} "
            f"({type(exc).__name__}: {exc}); only this node's torchrun reports it",
            file=sys.stderr,
            flush=True,
        )


def read_published_failure(endpoint: str, run_id: str) -> dict[str, Any] | None:
    """The failure a rank of the job published, if any (None also while the store is down)."""
    import json

    try:
        store = _store(endpoint)
        key = _failure_key(run_id)
        if not store.check([key]):
            return None
        doc = json.loads(store.get(key).decode("utf-8"))
    except Exception:
        return None
    return doc if isinstance(doc, dict) else None


def main(argv: Sequence[str] | None = None, *, restartable: bool = False) -> int:
    """Verify the spec, bootstrap this rank, run the entry; 0 on success, 1 on any failure.

    ``restartable``: this process is ``python -m spawnkit.run`` and may exec its own command
    line again (``sys.orig_argv``); a program that calls ``main()`` itself would run twice.
    """
    check_flag("restartable", restartable, call="spawnkit.run.main")
    _guard.arm()  # before anything below can import a hook target
    # A worker before hooks from its first statement, as a local one: a lazy proxy used
    # while the spec is unpickled is refused instead of binding the unpatched original.
    _phase.enter_worker()
    args = _parse(argv)
    rank = 0
    restarted = os.environ.pop(RESTART_VAR, None) is not None  # nothing later inherits it
    result_dir = os.environ.pop(RESULT_DIR_VAR, None)  # nor a nested launch's ranks this one
    try:
        from spawnkit.spec.signing import DEFAULT_KEY_VAR, read_spec_file

        rank, _local, _world = rank_from_env()
        if result_dir:
            _forget_result(result_dir, rank)
        key_var = args.key_env or DEFAULT_KEY_VAR
        template = read_spec_file(args.spec, key_var=key_var)
        spec = spec_for_rank(template)
        # before the key goes: the new image reads it, and the result folder popped above
        carried = {RESULT_DIR_VAR: result_dir} if result_dir else {}
        _start_with_env(spec.env, restarted, restartable, carried)
        # The key has done its job; entry code and plugins have no business reading it,
        # not even when the writer put it into the spec's own env.
        os.environ.pop(key_var, None)
        if key_var in spec.env:
            spec = spec.replace(env={k: v for k, v in spec.env.items() if k != key_var})
    except Exception as exc:
        _report(exc, rank=rank, stage=READ_SPEC_STAGE)
        return 1
    return _run(spec, result_dir)


def _start_with_env(
    env: Mapping[str, str],
    restarted: bool,
    restartable: bool,
    carried: Mapping[str, str] | None = None,
) -> None:
    """Exec this rank again with ``env``'s entries read only at start (``PYTHONHASHSEED``,
    ``LD_PRELOAD``, ``MALLOC_ARENA_MAX``...) when this process lacks them: set in
    ``os.environ`` now they would show there and do nothing (hashes stay random, the library
    is never preloaded).  The same pid and command line, so torchrun's supervision and its
    error file are unaffected; the spawned path does the same (``protocol/popen.py``).
    ``carried``: spawnkit's own variables this image already took out of ``os.environ``
    (``RESULT_DIR_VAR``); without them the new image would drop the rank's result unsaid."""
    from spawnkit._environ import read_at_start

    # PYTHONPATH's only start-time effect, sys.path, is what the bootstrap's first stage
    # gives its entries (as in a spawned worker); in this exec it could hide spawnkit itself.
    at_start = {k: v for k, v in read_at_start(env).items() if k != "PYTHONPATH"}
    if not at_start:
        return
    names = ", ".join(sorted(at_start))
    how = ""
    if restarted:
        how = "they were still not in effect after this rank was started again with them"
    elif not restartable:
        how = "this rank was not started as `python -m spawnkit.run`, so it cannot restart"
    elif not sys.executable:
        how = "this interpreter does not know its own executable (sys.executable is empty)"
    if not how:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execve(
                sys.executable,
                [sys.executable, *sys.orig_argv[1:]],
                {**os.environ, **(carried or {}), **at_start, RESTART_VAR: "1"},
            )
        except OSError as exc:
            how = f"restarting it with them failed ({exc})"
    from spawnkit.errors import ConfigError

    raise ConfigError(
        f"the spec's env= sets {names}, read only as a process starts (by the interpreter, "
        f"the loader or the C library), and {how}: set in os.environ now, they would show "
        f"there and not take effect. Export them in the environment torchrun is started "
        f"with instead (they reach every rank from there), or leave them out of env=.",
        setting="env",
    )


def _run(spec: ProcessSpec, result_dir: str | None = None) -> int:
    from spawnkit.protocol.failure import failing_stage
    from spawnkit.scaleout.progress import ProgressListener

    try:
        _check_node(spec)
    except Exception as exc:
        _report(exc, rank=spec.rank, stage=getattr(exc, "stage", "") or _NODE_CHECK_STAGE)
        return 1
    os.environ.update(spec.env)
    listener = ProgressListener()
    result: Any = None
    try:
        from spawnkit.bootstrap.process import bootstrap_process

        result = bootstrap_process(spec, listener=listener)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _report(exc, rank=spec.rank, stage=failing_stage(exc, listener.current, True))
            return exc.code if isinstance(exc.code, int) else 1
        # sys.exit(0) in the entry is an ending meant so: its result is None, as locally
    except BaseException as exc:
        stage = failing_stage(exc, listener.current, listener.report is not None)
        _report(exc, rank=spec.rank, stage=stage)
        return 1
    if result_dir:
        _publish_result(result_dir, spec.rank, result)
    return 0


def _check_node(spec: ProcessSpec) -> None:
    """This node's installation against the launcher's, before any plugin loads: a rank
    imports each plugin by module name, so another version on this node (``spawnkit launch
    --spec-dir`` across nodes, a spec written in another environment) ran its hooks unsaid."""
    from spawnkit.scaleout._node_selection import check_node_selection
    from spawnkit.scaleout._plugin_set import check_loaded_versions

    path = [p for p in spec.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    node = os.environ.get("GROUP_RANK", "")
    # and this node's own <PREFIX>_PLUGINS / _PLATFORM, which the spec's pinned selection
    # would leave doing nothing
    check_node_selection(spec, node=node, rank=spec.rank, launcher="launcher")
    check_loaded_versions(spec, node=node, rank=spec.rank, extra_path=path)


def _result_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.json")


def _attempt() -> int:
    """torchrun's restart count for this attempt (``--max-restarts``); 0 without torchrun."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def _forget_result(folder: str, rank: int) -> None:
    """An earlier attempt's result of this rank (torchrun ``--max-restarts``), removed as the
    rank starts again: left there, the launcher would show it for a rank that failed since."""
    try:
        os.unlink(_result_path(folder, rank))
    except OSError:
        pass


def _publish_result(folder: str, rank: int, result: Any) -> None:
    """``repr(result)`` into ``folder``, whole or not at all (the launcher reads it after
    torchrun exits); a rank that cannot write says so: its result is otherwise lost unseen."""
    import json

    try:
        text = repr(result)
    except Exception as exc:  # a repr that raises: the type still says what came back
        text = f"<{type(result).__qualname__} object: repr() raised {type(exc).__name__}>"
    path = _result_path(folder, rank)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({"rank": rank, "repr": text, "attempt": _attempt()}, fh)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        print(
            f"spawnkit.run: rank {rank} returned {text[:200]}, but cannot hand it to the "
            f"launcher ({exc})",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":  # pragma: no cover - exercised through ``python -m`` in tests
    sys.exit(main(restartable=True))
