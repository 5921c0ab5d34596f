"""What a warm server's bootstrap changed in ``sys.path``, the working directory and
``sys.argv``, put back in each worker after multiprocessing's ``prepare()`` set the launcher's.

A spawned worker runs ``prepare()`` (the launcher's ``sys.path``, working directory, arguments
and ``__main__``) and then loads its plugins, so a plugin that puts its vendored tree on
``sys.path`` (``sys.path.insert(0, here / "third_party")``), changes directory or takes its
own options out of ``sys.argv`` as it loads keeps that for the worker's life.  A warm worker
runs the same ``prepare()`` after its server loaded the plugins: it put the launcher's back,
and every entry a plugin added was gone (a lazy import through it failed, or an
``optional=True`` target there was skipped as not installed), with nothing said.

The server notes its path, directory and arguments before the bootstrap (``before``) and after
it and its preloads (``settle``); each worker replays the difference right after its
``prepare()`` (``wrap``): entries removed are removed, entries added go where they went, after
the same neighbour they followed (or first, where they led the path); the directory is
changed, the arguments are the server's.  A server whose bootstrap changed none of them
leaves ``prepare()`` as it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["before", "settle", "wrap"]

_before: tuple[list[str], str, list[str]] | None = None
# (entries removed, {entry of the launcher's path or None (first): entries added after it},
#  the directory to change to or None, the arguments or None): None when nothing changed
_Replay = tuple[frozenset[str], dict[str | None, list[str]], str | None, list[str] | None]
_replay: _Replay | None = None


def before() -> None:
    """In the server, once it holds the launcher's path, directory and arguments: where its
    bootstrap starts from."""
    global _before
    _before = list(sys.path), os.getcwd(), list(sys.argv)


def settle() -> None:
    """In the server, after its bootstrap and preloads: what each worker replays, if anything."""
    global _replay
    if _before is None:
        return
    path, cwd, argv = _before
    now_cwd = os.getcwd()
    if sys.path == path and now_cwd == cwd and sys.argv == argv:
        return
    old, now = set(path), set(sys.path)
    added: dict[str | None, list[str]] = {}
    anchor: str | None = None
    seen: set[str] = set()
    for entry in sys.path:
        if entry in old:
            anchor = entry
        elif entry not in seen:
            seen.add(entry)
            added.setdefault(anchor, []).append(entry)
    gone = frozenset(e for e in path if e not in now)
    _replay = gone, added, (now_cwd if now_cwd != cwd else None), (
        list(sys.argv) if sys.argv != argv else None
    )


def wrap(prepare: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """``spawn.prepare`` for the server's workers: the launcher's, then the bootstrap's changes.
    Unwrapped where the bootstrap changed nothing."""
    if _replay is None:
        return prepare
    gone, added, cwd, argv = _replay
    moved = {e for group in added.values() for e in group}

    def prepare_then_replay(data: dict[str, Any]) -> None:
        prepare(data)
        out = list(added.get(None, ()))
        placed: set[str | None] = {None}
        for entry in sys.path:
            if entry in gone or entry in moved:
                continue
            out.append(entry)
            if entry in added and entry not in placed:  # after its first occurrence only
                placed.add(entry)
                out.extend(added[entry])
        for anchor, group in added.items():  # a neighbour the launcher's path no longer has
            if anchor not in placed:
                out.extend(group)
        sys.path[:] = out
        if cwd is not None:
            os.chdir(cwd)  # one that vanished since fails this worker's start, reported
        if argv is not None:
            sys.argv[:] = argv

    return prepare_then_replay
