"""torchelastic's per-rank error file, written without the ``@record`` decorator.

torchrun tells each rank where to put its error through
``TORCHELASTIC_ERROR_FILE``; the agent reads that JSON when the rank exits
non-zero and prints the traceback in its ``ChildFailedError`` table, choosing
the earliest timestamp as root cause.  Without a file it prints "To enable
traceback see ...".  spawnkit's runner writes the file itself, in the exact
shape ``torch.distributed.elastic.multiprocessing.errors.ErrorHandler``
writes, so no user code needs a decorator.  Standard library only: the
runner must not import torch just to report that importing something failed.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

__all__ = ["ERROR_FILE_VAR", "error_file_payload", "write_error_file"]

ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"


def error_file_payload(
    exc_type: str, message: str, traceback_text: str, *, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """The JSON document torchelastic expects: ``message.message`` and ``message.extraInfo``.

    ``extraInfo.py_callstack`` is what the agent prints as the traceback, and
    ``extraInfo.timestamp`` (seconds, as a string) is how it picks the root cause.
    """
    info: dict[str, str] = {"py_callstack": traceback_text, "timestamp": str(int(time.time()))}
    if extra:
        info.update({f"spawnkit_{k}": str(v) for k, v in extra.items()})
    return {"message": {"message": f"{exc_type}: {message}", "extraInfo": info}}


def write_error_file(
    exc_type: str,
    message: str,
    traceback_text: str,
    *,
    extra: dict[str, str] | None = None,
    path: str | None = None,
) -> str | None:
    """Write the error file named by ``$TORCHELASTIC_ERROR_FILE``; returns the path or None.

    Not under torchrun (no variable) it writes nothing: the traceback still
    goes to stderr, which is where a plain ``python -m spawnkit.run`` user looks.
    """
    target = path if path is not None else os.environ.get(ERROR_FILE_VAR)
    if not target:
        return None
    doc = error_file_payload(exc_type, message, traceback_text, extra=extra)
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, target)
    return target
