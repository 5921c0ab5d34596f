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

    The child reads its preparation data, re-imports ``__main__`` and only
    then reads its ``Process``: a spec larger than the pipe buffer would make
    ``start()`` wait for that re-import (forever if it hangs, before
    ``ready_timeout`` is even armed; pytorch#131931).  What fits is written
    now; the rest goes from a daemon thread that ends when the child has read
    it or is gone.  A reader that died first is not an error here: a child's
    exit, with its early traceback, reaches the launcher through its sentinel,
    a server's through its status pipe.
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
