"""Messages a worker sends its launcher over the one-shot report pipe.

Why a dedicated pipe per rank and plain named tuples: a ``Queue`` shared by
ranks needs a feeder thread and deadlocks on huge tracebacks (torch moved to
files for that reason); a pipe per rank lets the parent wait on every report
pipe and every process sentinel in one ``connection.wait`` call and always
knows which rank spoke.  Every field is a builtin, so the parent can read a
message without importing anything the child had imported; the child's
exception travels twice, pickled (best effort) and as text (always).
Messages are named tuples rather than dataclasses because every worker
defines all seven before its first stage: a frozen slotted dataclass costs
about ten times as much to define, and that is start-up time of every rank.
"""

from __future__ import annotations

import pickle
from typing import Any, NamedTuple

__all__ = [
    "Exited",
    "Failed",
    "Hello",
    "Message",
    "Ready",
    "Result",
    "StageFinished",
    "StageStarted",
    "describe_exception",
    "failed_from_exception",
    "load_exception",
]

PRE_BOOTSTRAP = "process_start"
"""The stage a rank is in before its first message: interpreter start, ``__main__``
re-import and spec unpickling."""


class Hello(NamedTuple):
    """The worker is alive, unpickled its spec and can take a stack-dump signal."""

    pid: int
    host: str
    dump_signal: int | None = None


class StageStarted(NamedTuple):
    stage: str


class StageFinished(NamedTuple):
    stage: str
    seconds: float


class Ready(NamedTuple):
    """Every bootstrap stage passed; ``report`` is the rank's ``BootstrapReport``."""

    report: Any


class Failed(NamedTuple):
    """A stage or the entry raised.  ``exc_bytes`` is None when the exception did not pickle."""

    stage: str
    exc_type: str
    message: str
    traceback_text: str
    exc_bytes: bytes | None = None


class Exited(NamedTuple):
    """A stage or the entry called ``sys.exit(code)``; sent just before the process exits."""

    stage: str
    code: int
    traceback_text: str


class Result(NamedTuple):
    """The entry returned; ``data``: the pickled value, or ``error`` says why it did not pickle."""

    data: bytes | None = None
    error: str = ""


Message = Hello | StageStarted | StageFinished | Ready | Failed | Exited | Result


def describe_exception(exc: BaseException) -> str:
    """``module.Qualname``: how the parent names a type it may be unable to import."""
    cls = type(exc)
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def failed_from_exception(
    stage: str, exc: BaseException, dumps: Any = None, loads: Any = None
) -> Failed:
    """Build the FAILED message; pickling is tried and round-tripped here, never assumed."""
    import traceback  # only on this failure path: a worker that succeeds never needs it

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    exc_bytes: bytes | None = None
    dump = dumps if dumps is not None else pickle.dumps
    try:
        data = dump(exc)
        (loads if loads is not None else pickle.loads)(data)
        exc_bytes = data
    except Exception:
        exc_bytes = None
    try:
        message = str(exc)
    except Exception as str_exc:  # a broken __str__ must not hide the failure itself
        message = f"<str() of the exception raised {type(str_exc).__name__}>"
    return Failed(stage, describe_exception(exc), message, text, exc_bytes)


def load_exception(data: bytes | None, loads: Any = None) -> BaseException | None:
    """The child's exception if its type imports and unpickles here; ``None`` otherwise."""
    if data is None:
        return None
    try:
        obj = (loads if loads is not None else pickle.loads)(data)
    except Exception:
        return None
    return obj if isinstance(obj, BaseException) else None
