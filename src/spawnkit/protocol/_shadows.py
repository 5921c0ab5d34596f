"""A module put in an earlier ``sys.path`` directory than the one a warm server imported from.

The server imported ``plug`` from ``B``; then ``plug.py`` appears in ``A``, before ``B`` on
``sys.path`` (an application folder, a ``PYTHONPATH`` entry, the script's own directory).  A
spawned worker imports ``A/plug.py``; every worker forked from that server kept ``B``'s, unsaid:
the server's key reads what is *installed* on ``sys.path`` (``.dist-info`` folders), and
``_sources`` watches the files the server imported, not the places searched before them.  The
same for a top-level import the server tried and missed (``try: import fastlib``): a
``fastlib.py`` put on ``sys.path`` since is imported by a spawned worker.

So the server lists, once ready, each ``sys.path`` directory outside the installed trees with
its ``st_mtime_ns`` and the top-level names a new entry there would change: those imported from
a later directory, and those missed.  The launcher ``stat``\\ s each (one or two in practice)
before it forks from the server again; only when one moved is it listed and its entries
matched to those names.  A directory that moved for another reason (a log written beside the
script) is noted as seen and keeps its server: watching the directory's time alone would
start a server at every launch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib.machinery import all_suffixes
from typing import Any

__all__ = ["Shadow", "shadowed", "watch"]

#: (a ``sys.path`` directory, its ``st_mtime_ns`` (-1: changed while the server started), the
#: top-level names an entry made there would import in place of the server's)
Shadow = tuple[str, int, tuple[str, ...]]


def _found_in(module: Any, dirs: dict[str, int]) -> int | None:
    """The index in ``sys.path`` of the directory ``module`` (top-level) was imported from."""
    spec = getattr(module, "__spec__", None)
    locations = getattr(spec, "submodule_search_locations", None)
    origin = getattr(spec, "origin", None)
    if locations:  # a package: the folder holding its own
        found = [dirs.get(os.path.dirname(os.path.abspath(p))) for p in list(locations)]
        indexes = [i for i in found if i is not None]
        return min(indexes) if indexes else None
    if isinstance(origin, str) and os.path.isabs(origin):  # not built-in, not frozen
        return dirs.get(os.path.dirname(origin))
    return None


def watch(started_ns: int, installed: tuple[str, ...], missed: Iterable[str] = ()) -> list[Shadow]:
    """In the server, once ready: each directory of ``sys.path`` outside ``installed`` before
    the one a top-level module came from, or any while a top-level import was missed."""
    dirs: dict[str, int] = {}
    for index, entry in enumerate(sys.path):
        dirs.setdefault(os.path.abspath(entry or "."), index)
    came_from: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        if "." not in name and not name.startswith("__"):  # __main__, __mp_main__: not imported
            found = _found_in(module, dirs)
            if found is not None:
                came_from[name] = found
    missed = set(missed) - set(sys.modules)
    out: list[Shadow] = []
    for path, index in dirs.items():
        names = {name for name, at in came_from.items() if at > index} | missed
        if not names or os.path.join(path, "").startswith(installed):
            continue
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:  # not there: nothing is looked for in it until a launch changes sys.path
            continue
        # one there already did not shadow (``sys.path`` changed since, a module's alias in
        # ``sys.modules``): it is no news, or a log written beside it would start a server
        names -= {_name(found) for found in _entries_named(path, tuple(names))}
        if names:
            out.append((path, -1 if mtime > started_ns else mtime, tuple(sorted(names))))
    return out


def shadowed(shadows: list[Shadow]) -> list[str]:
    """In the launcher: each entry made since in a watched directory that a fresh import of
    one of its names would find first.  A directory whose time moved for another entry is
    noted at its new time (in ``shadows``), so it is listed once, not at every launch."""
    out: list[str] = []
    for k, (path, mtime, names) in enumerate(shadows):
        try:
            now = os.stat(path).st_mtime_ns
        except OSError:
            continue
        if now == mtime:
            continue
        found = _entries_named(path, names)
        if found:
            out.extend(found)
        else:
            shadows[k] = (path, now, names)
    return out


def _entries_named(path: str, names: tuple[str, ...]) -> list[str]:
    """The modules and regular packages in ``path`` that import as one of ``names``."""
    try:
        entries = os.listdir(path)
    except OSError:
        return []
    wanted = set(names)
    suffixes = set(all_suffixes())
    found: list[str] = []
    for entry in sorted(entries):
        name = entry.partition(".")[0]
        if name in wanted and _imports(os.path.join(path, entry), entry[len(name) :], suffixes):
            found.append(os.path.join(path, entry))
    return found


def _imports(full: str, suffix: str, suffixes: set[str]) -> bool:
    """Whether ``full`` is a module (a known suffix) or a regular package: a folder without
    ``__init__`` is a namespace portion, which loses to the module found later."""
    if suffix:
        return suffix in suffixes and os.path.isfile(full)
    return any(os.path.isfile(os.path.join(full, "__init__" + s)) for s in suffixes)


def _name(found: str) -> str:
    """The module name an entry of :func:`_entries_named` imports as."""
    return os.path.basename(found).partition(".")[0]
