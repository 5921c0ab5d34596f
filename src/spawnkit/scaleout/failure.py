"""A worker's failure as plain data, and the parent's typed error built from it.

Ray and torchrun move errors between processes their own way (Ray pickles,
torchrun reads a JSON file).  Either way the exception object itself may not
unpickle where it lands (its type lives in a plugin the parent lacks), so the
worker sends a plain record: the stage, where it ran, the type name, the
message, the formatted traceback and, separately, the pickled exception.  The
parent falls back to the text when the bytes do not load.
"""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from typing import Any

from spawnkit.errors import ChildRaisedError

__all__ = ["describe_failure", "failure_message", "raised_error"]


def _qualname(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def describe_failure(
    exc: BaseException, *, rank: int, stage_hint: str, node: str = ""
) -> dict[str, Any]:
    """Plain-typed record of ``exc`` raised in this worker (call it in the ``except`` block)."""
    stage = str(getattr(exc, "stage", "") or stage_hint or "entry")
    # A bootstrap error's own text is the failing stage's traceback (its cause's, when wrapped).
    text = getattr(exc, "traceback_text", "") or "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__)
    )
    try:
        exc_bytes: bytes | None = pickle.dumps(exc)
    except Exception:
        exc_bytes = None
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "node": node,
        "stage": stage,
        "exc_type": _qualname(exc),
        "message": str(exc),
        "traceback_text": text,
        "exc_bytes": exc_bytes,
    }


def failure_message(failure: dict[str, Any], *, launcher: str, effect: str = "") -> str:
    """Root cause first: which rank, where, which stage, what; then the child's traceback."""
    from spawnkit.bootstrap.stages import Stage  # failure path only

    node = f", node {failure['node']}" if failure.get("node") else ""
    stage = failure.get("stage") or Stage.ENTRY.value
    what = (
        "the entry function raised"
        if stage == Stage.ENTRY
        else f"bootstrap stage {stage!r} failed"
    )
    lines = [
        f"rank {failure['rank']} ({launcher}, pid {failure['pid']} "
        f"on host {failure['host']}{node}): {what}: {failure['exc_type']}: {failure['message']}"
    ]
    if effect:
        lines.append(effect)
    lines.append(f"--- traceback of rank {failure['rank']} ---")
    lines.append(failure["traceback_text"].rstrip())
    return "\n".join(lines)


def raised_error(failure: dict[str, Any], *, launcher: str, effect: str = "") -> ChildRaisedError:
    """The parent-side ``ChildRaisedError`` for a failure record; the original if it unpickles."""
    original: BaseException | None = None
    if failure.get("exc_bytes"):
        try:
            loaded = pickle.loads(failure["exc_bytes"])
            if isinstance(loaded, BaseException):
                original = loaded
        except Exception:
            original = None
    err = ChildRaisedError(
        failure_message(failure, launcher=launcher, effect=effect),
        exc_type=failure["exc_type"],
        traceback_text=failure["traceback_text"],
        child_exception=original,
        rank=failure["rank"],
        pid=failure["pid"],
        host=failure["host"],
        stage=failure.get("stage") or "entry",
    )
    if original is not None:
        err.__cause__ = original
    return err
