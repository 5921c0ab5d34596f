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

A directory without ``__init__`` (a namespace portion) counts where it changes a fresh import:
for a name the server missed (the import now succeeds, as a namespace package), and for a
top-level namespace package the server imported (``nsplug``, portions ``A/nsplug`` made since
and ``B/nsplug``): ``nsplug.__path__`` is searched in ``sys.path``'s order, so a spawned worker
imports ``A/nsplug/mod.py`` where every warm worker kept the server's ``B/nsplug/mod.py``.
Such a package is watched in every directory (a regular ``nsplug.py`` or ``nsplug/`` anywhere
on ``sys.path`` wins over all portions), not only before the one it came from.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib.machinery import all_suffixes
from typing import Any

__all__ = ["Shadow", "shadowed", "watch"]

#: (a ``sys.path`` directory, its ``st_mtime_ns`` (-1: changed while the server started), the
#: top-level names an entry made there would import in place of the server's, and those of
#: them for which a directory without ``__init__`` counts too: a namespace portion)
Shadow = tuple[str, int, tuple[str, ...], tuple[str, ...]]


def _found_in(module: Any, dirs: dict[str, int]) -> int | None:
    """The index in ``sys.path`` of the directory ``module`` (top-level) was imported from;
    for a namespace package, past the last directory (watched in all: ``_portions``)."""
    spec = getattr(module, "__spec__", None)
    locations = getattr(spec, "submodule_search_locations", None)
    origin = getattr(spec, "origin", None)
    if locations:  # a package: the folder holding its own
        if _portions(spec):
            return len(dirs)
        found = [dirs.get(os.path.dirname(os.path.abspath(p))) for p in list(locations)]
        indexes = [i for i in found if i is not None]
        return min(indexes) if indexes else None
    if isinstance(origin, str) and os.path.isabs(origin):  # not built-in, not frozen
        return dirs.get(os.path.dirname(origin))
    return None


def _portions(spec: Any) -> bool:
    """Whether ``spec`` is a namespace package's (no ``__init__``: its origin is None, or
    ``"namespace"`` as some loaders still write), made of the portions on ``sys.path``."""
    return getattr(spec, "origin", None) in (None, "namespace") and not getattr(
        spec, "has_location", False
    )


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
    # a portion there imports (a missed name) or joins in front (a namespace package)
    bare = missed | {name for name, at in came_from.items() if at == len(dirs)}
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
        portions = tuple(sorted(names & bare))
        names -= {_name(found) for found in _entries_named(path, tuple(names), portions)}
        if names:
            when = -1 if mtime > started_ns else mtime
            out.append((path, when, tuple(sorted(names)), tuple(sorted(names & bare))))
    return out


def shadowed(shadows: list[Shadow]) -> list[str]:
    """In the launcher: each entry made since in a watched directory that a fresh import of
    one of its names would find first.  A directory whose time moved for another entry is
    noted at its new time (in ``shadows``), so it is listed once, not at every launch."""
    out: list[str] = []
    for k, (path, mtime, names, portions) in enumerate(shadows):
        try:
            now = os.stat(path).st_mtime_ns
        except OSError:
            continue
        if now == mtime:
            continue
        found = _entries_named(path, names, portions)
        if found:
            out.extend(found)
        else:
            shadows[k] = (path, now, names, portions)
    return out


def _entries_named(path: str, names: tuple[str, ...], portions: tuple[str, ...]) -> list[str]:
    """The modules and regular packages in ``path`` that import as one of ``names``, and the
    directories without ``__init__`` named as one of ``portions``."""
    try:
        entries = os.listdir(path)
    except OSError:
        return []
    wanted = set(names)
    suffixes = set(all_suffixes())
    found: list[str] = []
    for entry in sorted(entries):
        name = entry.partition(".")[0]
        full = os.path.join(path, entry)
        if name in wanted and _imports(full, entry[len(name) :], suffixes, name in portions):
            found.append(full)
    return found


def _imports(full: str, suffix: str, suffixes: set[str], portion: bool) -> bool:
    """Whether ``full`` is a module (a known suffix) or a regular package; or, ``portion``, a
    folder without ``__init__`` (elsewhere such a namespace portion loses to the module
    found later)."""
    if suffix:
        return suffix in suffixes and os.path.isfile(full)
    if any(os.path.isfile(os.path.join(full, "__init__" + s)) for s in suffixes):
        return True
    return portion and os.path.isdir(full)


def _name(found: str) -> str:
    """The module name an entry of :func:`_entries_named` imports as."""
    return os.path.basename(found).partition(".")[0]
