"""The launcher's ``env=`` where setting it in the worker is too late.

A worker sets ``env=`` in ``os.environ`` as its first stage, which is in time for everything
the stages and the entry read (a platform's probe, torch's import, CUDA's start).  It is too
late for what reads it once, as the process starts: the interpreter's own variables
(``PYTHONHASHSEED``, ``PYTHONWARNINGS``, ``PYTHONDEVMODE``...; ``LANG``, ``LC_ALL`` and
``LC_CTYPE``, which set its locale and text encodings), the dynamic loader's
(``LD_LIBRARY_PATH``, ``LD_PRELOAD``) and the C library's (``MALLOC_ARENA_MAX``,
``GLIBC_TUNABLES``).  Those go into the environment a warm server is started with (its
workers are its forks), in the launcher's ``platforms.discovery.env_applied`` window; a
spawned worker is started with all of ``env=`` (``protocol/popen.py``: the launching
script's own imports run again there, before any stage).  ``PYTHONPATH`` is read at start too, but
multiprocessing then replaces ``sys.path`` with the launcher's, so the worker also puts its
entries on ``sys.path`` where the interpreter would have.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

__all__ = ["path_applied", "put_on_path", "read_at_start"]

#: Variables read only as a process starts, by prefix: the interpreter's, the loaders' (Linux,
#: macOS) and glibc's malloc and tunables.
_AT_START = ("PYTHON", "LD_", "DYLD_", "MALLOC_", "GLIBC_TUNABLES")
#: ... and by name: the ones the interpreter's start reads for its locale (``LC_CTYPE`` set
#: from them, and from that the default encoding of ``open()``, the file system's and stdio's,
#: and UTF-8 mode for a C locale); a warm server started with the launcher's kept that locale
#: in every worker it forked, while ``os.environ`` there showed ``env=``'s.
_AT_START_NAMES = frozenset({"LANG", "LC_ALL", "LC_CTYPE"})


def read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    """The entries of ``env`` read only as a process starts that this process's environment
    lacks or has otherwise: they must be set before the exec, not in the worker."""
    environ = os.environ
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(_AT_START) or k in _AT_START_NAMES) and environ.get(k) != v
    }


def put_on_path(pythonpath: str) -> list[str]:
    """``PYTHONPATH``'s entries on ``sys.path`` after its first entry (the script's directory),
    as the interpreter puts them; an entry already there stays where it is.  Returns those
    it added."""
    fresh = [p for p in dict.fromkeys(pythonpath.split(os.pathsep)) if p and p not in sys.path]
    sys.path[1:1] = fresh
    return fresh


@contextmanager
def path_applied(env: Mapping[str, str]) -> Iterator[None]:
    """The launcher's view of what is installed, as its workers will have it: ``env``'s
    ``PYTHONPATH`` entries on ``sys.path`` for the block (a plugin distribution reachable only
    there was on every worker's path, and read by no one: the workers load the plugins the
    launcher discovered).  Only the entries it added are taken off afterwards."""
    added = put_on_path(env["PYTHONPATH"]) if env.get("PYTHONPATH") else []
    try:
        yield
    finally:
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)
