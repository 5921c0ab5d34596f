"""Messages a worker sends its launcher over the one-shot report pipe.

Why a dedicated pipe per rank and plain named tuples: a ``Queue`` shared by
ranks needs a feeder thread and deadlocks on huge tracebacks (torch moved to
files for that reason); a pipe per rank lets the parent wait on every report
pipe and every process sentinel in one ``connection.wait`` call and always
knows which rank spoke.  Every field is a builtin, so the parent can read a
message without importing anything the child had imported; the child's
exception travels twice, pickled (best effort) and as text (always): the
failure record and what the parent makes of it live in
:mod:`spawnkit.protocol.failure` (the records themselves in ``_failed``), shared with the Ray and
torchrun launchers.
Messages are named tuples rather than dataclasses because every worker
defines all seven before its first stage: a frozen slotted dataclass costs
about ten times as much to define, and that is start-up time of every rank.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit.protocol._failed import PRE_BOOTSTRAP, Exited, Failed

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "Exited",
    "Failed",
    "Hello",
    "Message",
    "Ready",
    "Result",
    "StageFinished",
    "PRE_BOOTSTRAP",
    "StageStarted",
]


class Hello(NamedTuple):
    """The worker is alive, unpickled its spec and can take a stack-dump signal.

    ``marks``: ``(name, CLOCK_MONOTONIC)`` of its start before the first stage, for a start-up
    trace (``child.START_MARKS``): a few floats, so no worker pays for tracing being possible.
    """

    pid: int
    host: str
    dump_signal: int | None = None
    marks: tuple[tuple[str, float], ...] = ()


class StageStarted(NamedTuple):
    stage: str


class StageFinished(NamedTuple):
    stage: str
    seconds: float


class Ready(NamedTuple):
    """Every bootstrap stage passed; ``report`` is the rank's ``BootstrapReport``."""

    report: Any


class Result(NamedTuple):
    """The entry returned; ``data``: the pickled value, or ``error`` says why it did not pickle."""

    data: bytes | None = None
    error: str = ""


Message = Hello | StageStarted | StageFinished | Ready | Failed | Exited | Result
