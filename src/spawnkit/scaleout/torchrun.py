"""``python -m spawnkit.run --spec FILE``: one rank of a torchrun job, bootstrapped by spawnkit.

Each rank verifies the signed template before unpickling, takes ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE`` and runs the staged bootstrap; a failure goes to ``TORCHELASTIC_ERROR_FILE`` in
``@record``'s format and the rank exits 1.  Without torchrun it is rank 0 of 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spawnkit.bootstrap import guard as _guard
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from spawnkit.spec import ProcessSpec

__all__ = [
    "FAILURE_STORE_VAR",
    "RankEnvError",
    "main",
    "rank_from_env",
    "read_published_failure",
    "spec_for_rank",
]


#: Stage name reported when the spec file itself is refused (before any bootstrap stage).
READ_SPEC_STAGE = "read_spec"
_LAUNCHER = "torchrun"


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
    """This rank's spec: the template with torchrun's ranks, minus the never-copy env names."""
    from spawnkit.scaleout.env import split_env

    rank, local_rank, world = rank_from_env(environ)
    env, _dropped = split_env(template.env, context=f"torchrun rank {rank}")
    return template.replace(rank=rank, local_rank=local_rank, world_size=world, env=env)


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


FAILURE_STORE_VAR = "SPAWNKIT_FAILURE_STORE"
"""``host:port`` of a multi-node job's rendezvous store (set by ``spawnkit launch``): a
failing rank publishes its failure there, so node 0's launcher reports it with rank and stage
(torchrun's agents only see their own node's ranks)."""
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


def _publish(record: Any, message: str) -> None:
    """The first failure of the job, into its store (a later one does not replace it)."""
    endpoint = os.environ.get(FAILURE_STORE_VAR)
    run_id = os.environ.get("SPAWNKIT_RUN_ID", "")
    if not endpoint:
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


def main(argv: Sequence[str] | None = None) -> int:
    """Verify the spec, bootstrap this rank, run the entry; 0 on success, 1 on any failure."""
    _guard.arm()  # before anything below can import a hook target
    # A worker before hooks from its first statement, as a local one: a lazy proxy used
    # while the spec is unpickled is refused instead of binding the unpatched original.
    _phase.enter_worker()
    args = _parse(argv)
    rank = 0
    try:
        from spawnkit.spec.signing import DEFAULT_KEY_VAR, read_spec_file

        rank, _local, _world = rank_from_env()
        key_var = args.key_env or DEFAULT_KEY_VAR
        template = read_spec_file(args.spec, key_var=key_var)
        spec = spec_for_rank(template)
        # The key has done its job; entry code and plugins have no business reading it,
        # not even when the writer put it into the spec's own env.
        os.environ.pop(key_var, None)
        if key_var in spec.env:
            spec = spec.replace(env={k: v for k, v in spec.env.items() if k != key_var})
    except Exception as exc:
        _report(exc, rank=rank, stage=READ_SPEC_STAGE)
        return 1
    return _run(spec)


def _run(spec: ProcessSpec) -> int:
    from spawnkit.protocol.failure import failing_stage
    from spawnkit.scaleout.progress import ProgressListener

    os.environ.update(spec.env)
    listener = ProgressListener()
    try:
        from spawnkit.bootstrap.process import bootstrap_process

        bootstrap_process(spec, listener=listener)
    except SystemExit as exc:
        if exc.code in (None, 0):
            return 0
        _report(exc, rank=spec.rank, stage=failing_stage(exc, listener.current, True))
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:
        stage = failing_stage(exc, listener.current, listener.report is not None)
        _report(exc, rank=spec.rank, stage=stage)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through ``python -m`` in tests
    sys.exit(main())
