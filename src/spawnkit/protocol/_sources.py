"""The files a warm-start server runs and read, and whether any changed since.

A server imports its plugins, hook targets, preloads and the launcher's modules once, and
every worker it forks runs that code.  A spawned worker imports them anew: a plugin edited
between two launches of one long-lived launcher (a notebook, an engine relaunching its
workers) takes effect in the next spawned group, and in no warm one, without a word.  The
server's key cannot see it: an edit in place changes the file, not the directory whose
mtime the key reads (``_metadata.path_fingerprint``).  So the server lists, once it is
ready, each file it imported from outside the interpreter's own trees (what pip installs
there changes a directory the key reads), and the launcher looks at them before it forks
from that server again (``warm.get_server``): one ``stat`` a file, about a microsecond each.

The same holds for a file a plugin or preload reads as it loads (its configuration, a table of
tuned settings): a spawned worker reads it at every launch, a warm one has what the server
read.  While the server bootstraps and preloads, ``open`` notes each file opened for reading
(:class:`Reads`), and those are listed too, a missing one as missing (its coming is a
change).  Not the kernel's own files (``/proc``, ``/sys``, ``/dev``: they read as changed at
every look), nor what the installed trees hold.

And a directory listed as it loads (``os.listdir``, ``os.scandir``: ``pkgutil.iter_modules``,
``glob``, ``os.walk``, ``Path.iterdir``): a registry that imports every module of its package
(SGLang's model registry), a plugin that reads each ``*.json`` of its directory.  A spawned
worker lists it again and finds a file added since; a warm one had the server's list.  The
directory's own ``stat`` moves when an entry comes or goes.  Not a ``sys.path`` directory
(what ``importlib.metadata`` lists: what is installed there is the key's, and a launcher's
log or output written beside its script would start a server at every launch).
"""

from __future__ import annotations

import builtins
import io
import os
import sys
import time
from collections.abc import Iterable
from importlib._bootstrap_external import FileLoader
from importlib.machinery import BYTECODE_SUFFIXES, SOURCE_SUFFIXES
from typing import Any

__all__ = ["ABSENT", "Reads", "changed", "installed_roots", "snapshot"]

#: The kernel's files: their size and times change with every look.
_VIRTUAL = ("/proc/", "/sys/", "/dev/")

#: (path, st_mtime_ns, st_size, st_ino): an edit in place moves the first two, a save by
#: rename the third.
Source = tuple[str, int, int, int]
#: The mtime of a file the server tried to read and found missing
ABSENT = -2


def installed_roots() -> tuple[str, ...]:
    """The interpreter's and the environment's trees: the standard library, site-packages
    (the user's too), which change only by installing; and spawnkit's own package, edited or
    not: the launcher runs the copy it imported, and its server must speak that protocol."""
    spawnkit_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, spawnkit_dir}
    site = sys.modules.get("site")
    user_site = getattr(site, "USER_SITE", None)
    if isinstance(user_site, str):
        roots.add(user_site)
    return tuple(os.path.join(os.path.abspath(r), "") for r in roots if r)


class _NotedOpen:
    """``open`` while the server bootstraps: opens, and notes a path opened for reading.

    An object, not a function, and still callable after the block, as the real ``open``: a
    module imported meanwhile may keep it (``from io import open``; Python 3.10's pathlib
    keeps ``io.open`` as a class attribute of its accessor, where a function would become a
    method and take the path for the mode).  After the block it notes nothing.
    """

    __slots__ = ("opened", "paths")

    def __init__(self, opened: Any) -> None:
        self.opened = opened
        self.paths: set[str] | None = set()

    def __call__(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        paths = self.paths
        named = isinstance(file, (str, bytes, os.PathLike))
        if paths is not None and named and not set("wax+") & set(mode):  # not written: input
            # noted before it opens: one not there yet counts too (a plugin's optional
            # configuration: ``try: open(cfg) except FileNotFoundError: defaults``)
            paths.add(os.path.abspath(os.fsdecode(file)))
        return self.opened(file, mode, *args, **kwargs)


class _NotedListing:
    """``os.listdir`` or ``os.scandir`` while the server bootstraps: lists, and notes the
    directory (``None``: the working directory); after the block it notes nothing."""

    __slots__ = ("listed", "paths")

    def __init__(self, listed: Any) -> None:
        self.listed = listed
        self.paths: set[str] | None = set()

    def __call__(self, path: Any = None) -> Any:
        paths = self.paths
        if paths is not None and (path is None or isinstance(path, (str, bytes, os.PathLike))):
            paths.add(os.path.abspath(os.fsdecode("." if path is None else path)))
        return self.listed(path)


class _NotedMisses:
    """Last on ``sys.meta_path`` while the server bootstraps: asked only for a module no other
    finder found, it notes the package directories a submodule was looked for in (an
    optional ``from eng import _fast`` that failed) and finds nothing itself.  A module put
    there since (``build_ext --inplace`` done) is imported by a spawned worker; a warm one kept
    the server's fallback.  A top-level module is looked for on ``sys.path``: its name is
    noted (``names``), for ``_shadows.watch``."""

    __slots__ = ("names", "paths")

    def __init__(self, paths: set[str], names: set[str]) -> None:
        self.paths: set[str] | None = paths
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        paths = self.paths
        if paths is not None and path is not None:
            paths.update(os.path.abspath(entry) for entry in path if isinstance(entry, str))
        elif paths is not None:
            self.names.add(fullname)


#: What the import system reads through ``FileLoader.get_data`` as it imports: not data.
_CODE_SUFFIXES = tuple(SOURCE_SUFFIXES + BYTECODE_SUFFIXES)


class _NotedData:
    """``FileLoader.get_data`` while the server bootstraps: ``pkgutil.get_data`` (and a
    loader's own ``get_data``) read a package's data file through it, by ``io.open_code``,
    which the ``open`` stand-in never sees; a table edited since was read by a spawned worker
    and not by a warm one.  Sources and bytecode it reads as modules are imported are not
    noted (the modules' files are listed).  After the block it notes nothing."""

    def __init__(self, paths: set[str]) -> None:
        self.paths: set[str] | None = paths
        self.real = FileLoader.get_data
        noted = self

        def get_data(loader: Any, path: Any) -> bytes:
            paths = noted.paths
            if paths is not None and isinstance(path, str) and not path.endswith(_CODE_SUFFIXES):
                paths.add(os.path.abspath(path))  # before: one not there counts too
            return noted.real(loader, path)

        self.ours = get_data

    def __enter__(self) -> None:
        setattr(FileLoader, "get_data", self.ours)  # setattr: mypy refuses a method assigned

    def __exit__(self, *exc: object) -> None:
        self.paths = None  # a copy kept meanwhile reads as the real one from now on
        if FileLoader.__dict__.get("get_data") is self.ours:  # a wrapper put over ours is kept
            setattr(FileLoader, "get_data", self.real)


class Reads:
    """The files opened for reading during the block (``open``, ``io.open``, what pathlib's
    ``read_text`` calls), and the directories listed (``os.listdir``, ``os.scandir``) or
    searched in vain for a submodule, for :func:`snapshot`; a file opened to write or update
    is output."""

    def __enter__(self) -> Reads:
        self.paths: set[str] = set()
        self.listed: set[str] = set()
        self._ours = ours = _NotedOpen(builtins.open)
        ours.paths = self.paths
        builtins.open = io.open = ours
        self._lists = {name: _NotedListing(getattr(os, name)) for name in _LISTINGS}
        for name, noted in self._lists.items():
            noted.paths = self.listed
            setattr(os, name, noted)
            if noted.listed in os.supports_fd:  # shutil's import asks (its rmtree's safe way)
                os.supports_fd.add(noted)
        self.missed: set[str] = set()  # top-level imports no finder found
        self._misses = _NotedMisses(self.listed, self.missed)
        sys.meta_path.append(self._misses)
        self._data = _NotedData(self.paths)
        self._data.__enter__()
        # Python 3.10's pathlib opens and lists through the functions its accessor kept at
        # import (3.11 looks them up)
        self._accessor = getattr(sys.modules.get("pathlib"), "_NormalAccessor", None)
        self._swap(ours.opened, ours, {n: (w.listed, w) for n, w in self._lists.items()})
        return self

    def __exit__(self, *exc: object) -> None:
        ours, opened = self._ours, self._ours.opened
        ours.paths = None  # a copy kept meanwhile opens as the real one from now on
        if builtins.open is ours:  # a wrapper a plugin put over ours is kept
            builtins.open = opened
        if io.open is ours:
            io.open = opened
        self._data.__exit__()
        self._misses.paths = None
        if self._misses in sys.meta_path:
            sys.meta_path.remove(self._misses)
        for name, noted in self._lists.items():
            noted.paths = None
            os.supports_fd.discard(noted)
            if getattr(os, name) is noted:
                setattr(os, name, noted.listed)
        self._swap(ours, opened, {n: (w, w.listed) for n, w in self._lists.items()})

    def _swap(self, old: Any, new: Any, lists: dict[str, tuple[Any, Any]]) -> None:
        """Python 3.10's ``pathlib._NormalAccessor``: each of its functions that is ``old``
        (``open``; per name in ``lists``, the listing's) becomes ``new``."""
        accessor = self._accessor
        if accessor is None:
            return
        for name, (was, now) in {"open": (old, new), **lists}.items():
            if vars(accessor).get(name) is was:
                setattr(accessor, name, now)


#: The functions that list a directory, as the standard library's helpers call them.
_LISTINGS = ("listdir", "scandir")


def snapshot(
    started_ns: int, read: Iterable[str] = (), listed: Iterable[str] = ()
) -> list[Source]:
    """In the server, once ready: every imported module's file, every file in ``read`` and
    every directory in ``listed`` but those on ``sys.path``, outside the installed trees that
    can be looked at now (a module inside a zip cannot, and is left out, or it would read as
    changed at every launch).

    A file changed since the server started (``started_ns``, wall clock) may have changed
    after the server imported it: it is listed as changed already, so the next launch starts
    a server that imports it as it is.  Not a file dated later than now: a clock that
    disagrees with the file system's (a network mount) would start a server every launch.
    """
    roots = installed_roots()
    now_ns = time.time_ns()
    seen: set[str] = set()
    out: list[Source] = []
    on_path = {os.path.abspath(entry) for entry in sys.path}
    read = set(read) | (set(listed) - on_path)
    files = [getattr(module, "__file__", None) for module in list(sys.modules.values())]
    for path in [*files, *sorted(read), *_mapped_libraries()]:
        if not isinstance(path, str):
            continue
        path = os.path.abspath(path)
        if path in seen or path.startswith(roots) or path.startswith(_VIRTUAL):
            continue
        seen.add(path)
        try:
            st = os.stat(path)
        except OSError:
            if path in read:  # looked for and not found: its coming is a change
                out.append((path, ABSENT, -1, -1))
            continue
        edited_meanwhile = started_ns < st.st_mtime_ns <= now_ns
        out.append((path, -1 if edited_meanwhile else st.st_mtime_ns, st.st_size, st.st_ino))
    return out


def _mapped_libraries() -> list[str]:
    """The shared libraries mapped in this process: a plugin's kernel loaded by path
    (``ctypes.CDLL``, ``torch.ops.load_library``) is no module and no file ``open`` saw; after
    a rebuild a spawned worker loads the new one and a warm one ran the old, unsaid."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = [line for line in maps if ".so" in line and "/" in line]
    except OSError:  # no /proc (not Linux): none to list
        return []
    return sorted({line[line.index("/") :].strip() for line in lines})


def changed(sources: list[Source]) -> list[str]:
    """In the launcher: the files of ``sources`` that changed or went away since."""
    out: list[str] = []
    for path, mtime, size, ino in sources:
        try:
            st = os.stat(path)
        except OSError:
            if mtime != ABSENT:
                out.append(path)
            continue
        if mtime == ABSENT:  # there now
            out.append(path)
            continue
        if (st.st_mtime_ns, st.st_size, st.st_ino) != (mtime, size, ino):
            out.append(path)
    return out
