"""The two records a failing worker sends its launcher, and the stage before its first message.

Apart from :mod:`spawnkit.protocol.failure` (which re-exports them) because every worker
defines them (they are report messages: :mod:`spawnkit.protocol.messages`) while the rest of
that module, making the record from an exception and the parent's error from a record, only a
failure needs: a worker that succeeds does not import it (issue #23).
"""

from __future__ import annotations

from spawnkit._namedtuple import NamedTuple

__all__ = ["PRE_BOOTSTRAP", "Exited", "Failed"]

PRE_BOOTSTRAP = "process_start"
"""The stage a rank is in before its first message: interpreter start, ``__main__``
re-import and spec unpickling."""


class Failed(NamedTuple):
    """A stage or the entry raised.  ``exc_bytes`` is None when the exception did not pickle."""

    stage: str
    exc_type: str
    message: str
    traceback_text: str
    exc_bytes: bytes | None = None
    rank: int | None = None
    pid: int = 0
    host: str = ""
    node: str = ""
    #: Why ``exc_bytes`` is None where the worker can say more than the traceback does: an
    #: exception group's member that would not load as itself (``_pickled``).
    unsent: str = ""


class Exited(NamedTuple):
    """A stage or the entry called ``sys.exit(code)``; sent just before the process exits."""

    stage: str
    code: int
    traceback_text: str
    said: str = ""  # the argument's repr when it was no number: sys.exit("bad config") exits 1
