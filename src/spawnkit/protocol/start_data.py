"""The bytes a launcher writes to a new child or warm server, never blocking the launcher.

Apart from ``popen`` and ``warm`` because both write start data and ``popen``
imports ``warm``: here neither needs the other.
"""

from __future__ import annotations

import os
import threading

__all__ = ["send_start_data"]


def send_start_data(fd: int, data: bytes) -> None:
    """Write start data to ``fd``, a pipe to a child or a warm server, never blocking the launcher.

    The child re-imports ``__main__`` before reading its ``Process``: a spec larger than the
    pipe buffer would make ``start()`` wait for that re-import (pytorch#131931).  What fits is
    written now, the rest from a daemon thread; a reader's death reaches the launcher elsewhere.
    """
    w = os.dup(fd)
    view = memoryview(data)
    try:
        os.set_blocking(w, False)
        try:
            view = view[os.write(w, view) :]
        except BlockingIOError:
            pass
        os.set_blocking(w, True)
    except OSError:  # EPIPE: the child is already gone
        view = view[len(view) :]
    if not view:
        os.close(w)
        return
    threading.Thread(
        target=_write_rest, args=(w, view), name="spawnkit-start-writer", daemon=True
    ).start()


def _write_rest(fd: int, view: memoryview) -> None:
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the child died before reading everything; its sentinel says how
        pass
    finally:
        os.close(fd)
