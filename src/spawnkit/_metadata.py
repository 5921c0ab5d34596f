"""Entry-point discovery, scanned once per process and read from metadata only.

``importlib.metadata.entry_points()`` rescans every distribution per call (milliseconds).
The parent's rows travel in the spec (:func:`snapshot`, :func:`seed`), so a worker neither
scans nor imports ``importlib.metadata`` and every rank sees the plugins the parent decided on.
The cache is dropped in forked children, whose ``sys.path`` may differ.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import stat
import sys
import threading
import time
from collections.abc import Iterable, Iterator

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple

if TYPE_CHECKING:
    import importlib.metadata as md
    from typing import Any

__all__ = ["EntryPointInfo", "clear_cache", "entry_points", "load_entry_point", "seed", "snapshot"]

#: What is installed on ``sys.path``, as ``path_fingerprint()`` reads it (directory, entries).
Fingerprint = tuple[tuple[str, tuple[tuple[str, int], ...]], ...]

#: One entry point as plain strings (name, value, group, dist, version): what travels in a spec.
EntryPointRow = tuple[str, str, str, str, str]


class EntryPointInfo(NamedTuple):
    """An entry point with the distribution that declared it (name and version)."""

    name: str
    value: str
    group: str
    dist: str
    version: str

    @property
    def module(self) -> str:
        return _reference_part(self.value).split(":", 1)[0].strip()

    @property
    def attr(self) -> str:
        ref = _reference_part(self.value)
        return ref.split(":", 1)[1].strip() if ":" in ref else ""

    def describe(self) -> str:
        """``name = value`` from ``dist version``: what error messages say."""
        return f"{self.name!r} = {self.value!r} from distribution {self.dist} {self.version}"


def _reference_part(value: str) -> str:
    """The ``module:attr`` of an entry-point value, without a trailing ``[extras]`` list.

    Extras are still legal there (``mod:register [gpu]``, written by older setuptools
    projects); the entry-point specification asks consumers to parse and may ignore them, as
    ``importlib.metadata`` does.  Read as part of the attribute, they failed a valid plugin
    with "no attribute 'register [gpu]'".  Ignoring them hides nothing: a plugin whose extra's
    packages are missing fails its own import, named.
    """
    text = value.strip()
    if text.endswith("]") and "[" in text:
        return text[: text.rindex("[")].rstrip()
    return text


#: A metadata folder's name, its version and its entry points.
_Copy = tuple[str, str, tuple[EntryPointInfo, ...]]
#: A distribution with two or more metadata folders in one directory: where, its name, the
#: folders in ``importlib.metadata``'s order (the first is the one read).
_Twice = tuple[str, str, tuple[_Copy, ...]]
_Scan = tuple[dict[str, tuple[EntryPointInfo, ...]], tuple[_Twice, ...]]

_lock = threading.Lock()
_cache: _Scan | None = None  # by entry-point group; distributions installed twice
_cache_fingerprint: Fingerprint | None = None
_seeded: dict[str, tuple[EntryPointInfo, ...]] = {}


def _name_version(dist: md.Distribution) -> tuple[str | None, str | None]:
    """Name and version from the metadata *headers* only.

    ``dist.metadata`` parses the whole file (about 0.5 ms per distribution); the headers come
    first, so reading to the first blank line is enough; anything unusual falls back.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    name = version = None
    if text:
        for line in text.splitlines():
            if not line.strip():
                break
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key = key.strip().lower()
            if key == "name" and name is None:
                name = value.strip()
            elif key == "version" and version is None:
                version = value.strip()
            if name is not None and version is not None:
                return name, version
    meta: Any = dist.metadata
    if meta is None:
        return name, version
    # .get: a missing field is None (3.13 deprecates that for [], which later raises KeyError)
    return name or meta.get("Name"), version or meta.get("Version")


def _scan() -> _Scan:
    import importlib.metadata as md

    grouped: dict[str, list[EntryPointInfo]] = {}
    kept: dict[str, tuple[md.Distribution, str, tuple[EntryPointInfo, ...]]] = {}
    twice: dict[str, tuple[str, str, list[_Copy]]] = {}
    for dist in md.distributions():
        found_name, found_version = _name_version(dist)
        name, key = (found_name, found_name) if found_name else _nameless(dist)
        key = key.lower().replace("-", "_").replace(".", "_")
        version = found_version or "?"
        eps = tuple(
            EntryPointInfo(ep.name, ep.value, ep.group, name, version) for ep in dist.entry_points
        )
        first = kept.get(key)
        if first is None:
            kept[key] = (dist, version, eps)
            for info in eps:
                grouped.setdefault(info.group, []).append(info)
            continue
        # The first distribution of a name on sys.path wins, as importlib does (a later
        # directory's is shadowed).  A second in the *same* directory is a broken install
        # (``pip install --target`` again without ``--upgrade``): kept for installed_twice().
        here, folder = _where(dist)
        there, first_folder = _where(first[0])
        if here and here == there and folder != first_folder:  # (a directory listed twice
            # on sys.path yields each of its folders twice: one folder, no second copy)
            title = name if found_name else first_folder
            copies = twice.setdefault(key, (here, title, [(first_folder, first[1], first[2])]))[2]
            if all(folder != seen for seen, _, _ in copies):
                copies.append((folder, version, eps))
    grouped_t = {g: tuple(eps) for g, eps in grouped.items()}
    return grouped_t, tuple((d, n, tuple(c)) for d, n, c in twice.values())


def _where(dist: md.Distribution) -> tuple[str, str]:
    """The directory a distribution's metadata folder is in, and the folder's name."""
    path = getattr(dist, "_path", None)  # a PathDistribution's; other finders have none
    if path is None:
        return "", "<metadata>"
    return os.path.split(str(path).rstrip("/\\"))


def installed_twice(groups: Iterable[str]) -> list[str]:
    """One message per distribution with two metadata folders in one ``sys.path`` directory
    where either declares entry points in ``groups``.

    ``importlib.metadata`` reads the first in ``listdir`` order, unsaid: its plugins load and
    its version is reported whichever copy's code is on disk, and what only the other
    declares never loads.
    """
    wanted = frozenset(groups)
    out = []
    for directory, name, copies in _scanned_all()[1]:
        if not any(ep.group in wanted for _, _, eps in copies for ep in eps):
            continue
        listed = " and ".join(
            f"{folder} (version {version}, entry points "
            f"{', '.join(repr(ep.name) for ep in eps if ep.group in wanted) or 'none'})"
            for folder, version, eps in copies
        )
        read = {ep.name for ep in copies[0][2] if ep.group in wanted}
        lost = sorted({ep.name for c in copies[1:] for ep in c[2] if ep.group in wanted} - read)
        never = f"; {', '.join(map(repr, lost))} never load" if lost else ""
        out.append(
            f"distribution {name} has {len(copies)} metadata folders in {directory}: {listed}, "
            "a broken install (a second 'pip install --target' without --upgrade, or a folder "
            f"left behind). Only {copies[0][0]} is read, as importlib.metadata reads it: "
            f"launches load its plugins and report version {copies[0][1]} whichever copy's "
            f"code is on disk{never}. Remove the stale folder, or reinstall the distribution "
            "(pip install --upgrade, with the same --target)"
        )
    return out


def _nameless(dist: md.Distribution) -> tuple[str, str]:
    """What names a distribution whose metadata has no ``Name`` (a hand-made ``.dist-info``
    holding only ``entry_points.txt``, a damaged install), and the key it is told apart by.

    Keyed by one placeholder name, every such distribution after the first lost its entry
    points, unsaid; ``importlib.metadata`` keys it by its folder's stem
    (``local_alpha-1.0.dist-info``: ``local_alpha``), and so does this, and names the folder.
    """
    path = getattr(dist, "_path", None)  # a PathDistribution's; other finders have none
    if path is None:
        return "<unnamed distribution>", f"\0{id(dist)}"  # told apart from every other
    folder = os.path.basename(str(path))
    stem, ext = os.path.splitext(folder)
    key = stem.partition("-")[0] if ext in (".dist-info", ".egg-info") else ""
    return f"<unnamed {folder}>", key or f"\0{path}"


def entry_points(group: str) -> tuple[EntryPointInfo, ...]:
    """Every entry point of ``group`` across installed distributions, in ``sys.path`` order."""
    seeded = _seeded.get(group)
    if seeded is not None:
        return seeded
    return _scanned().get(group, ())


def groups() -> frozenset[str]:
    """Every entry-point group some installed distribution declares (the launcher's typo check)."""
    return frozenset(_scanned())


def _scanned() -> dict[str, tuple[EntryPointInfo, ...]]:
    """The scan of what is installed now (redone when ``sys.path``'s fingerprint changed)."""
    return _scanned_all()[0]


def _scanned_all() -> _Scan:
    global _cache, _cache_fingerprint
    fingerprint = path_fingerprint()
    with _lock:
        if _cache is None or _cache_fingerprint != fingerprint:
            _cache = _scan()
            _cache_fingerprint = fingerprint
        return _cache


def clear_cache() -> None:
    """Forget the scan, so distributions written since are seen (tests, forked children)."""
    global _cache
    with _lock:
        _cache = None
        _seeded.clear()
    importlib.invalidate_caches()


_META_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")
_DirState = tuple[int, tuple[tuple[str, int], ...], int, tuple[tuple[str, str], ...]]
_dir_state: dict[str, _DirState] = {}
"""Per ``sys.path`` directory: its mtime, its metadata entries with theirs, the newest of all,
and the ``entry_points.txt`` files among them (stated at every look)."""


_look = threading.local()  # .depth: one_look() blocks open; .seen: (sys.path, fingerprint)


@contextlib.contextmanager
def one_look() -> Iterator[None]:
    """One decision, one look at what is installed: inside the block, this thread's
    ``path_fingerprint()`` stats ``sys.path`` once and answers the same while ``sys.path``
    is unchanged.

    A launch asks it six times (the platform table, plugin selection, the rows for the spec,
    the environment check, the warm server's key), ~40 ``stat`` calls on the path to its first
    worker.  Only for the span of one call: a distribution installed between two launches
    is seen by the next one, as before.
    """
    _look.depth = getattr(_look, "depth", 0) + 1
    try:
        yield
    finally:
        _look.depth -= 1
        if not _look.depth:
            _look.seen = None


def path_fingerprint() -> Fingerprint:
    """What is installed on ``sys.path``: each directory's metadata entries and their mtimes.

    A directory is listed again when its own mtime moved or while it is still settling
    (``_SETTLING_NS``); otherwise one ``stat`` per entry, and one per ``entry_points.txt``
    in its metadata folders: a file rewritten in place (setuptools' ``egg_info``, ``setup.py
    develop``, an editor) moves neither the folder's mtime nor the directory's, and a
    long-lived launcher kept the plugins it had first read.  An entry that is a file (a zip,
    an ``.egg``) counts by its own mtime and size: nothing in it can be listed that cheaply.
    """
    if getattr(_look, "depth", 0):
        seen = getattr(_look, "seen", None)
        path = tuple(sys.path)
        if seen is None or seen[0] != path:
            seen = _look.seen = (path, _fingerprint())
        return seen[1]
    return _fingerprint()


#: How long after its last change a directory's listing is not trusted: an installer creates
#: a ``.dist-info`` (the directory's mtime moves), then writes the files inside it (only the
#: ``.dist-info``'s own mtime moves).  A look in between, trusted, would have kept every later
#: look on a plugin without its entry points: installed, and silently never loaded.
_SETTLING_NS = 2_000_000_000


def _fingerprint() -> Fingerprint:
    out: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    settled = time.time_ns() - _SETTLING_NS  # mtimes are on the wall clock
    for entry in sys.path:
        path = entry or "."
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            # A zip (or ``.egg`` file) lists nothing here: replaced in place, only its own
            # stat moves, and a long-lived launcher kept the plugins it had first read.
            out.append((entry, (("<file>", st.st_mtime_ns), ("<size>", st.st_size))))
            continue
        mtime = st.st_mtime_ns
        state = _dir_state.get(path)
        if state is None or state[0] != mtime or state[2] > settled:
            entries = _meta_entries(path)
            newest = max([mtime, *(m for _, m in entries)])
            files = _entry_point_files(path, entries)
            state = _dir_state[path] = (mtime, entries, newest, files)
        out.append((entry, state[1] + _file_times(state[3])))
    return tuple(out)


def _entry_point_files(
    path: str, entries: tuple[tuple[str, int], ...]
) -> tuple[tuple[str, str], ...]:
    """The ``entry_points.txt`` files of a directory's metadata folders, when it is listed.

    Only those: what the scan reads that decides which plugins exist (``METADATA`` gives
    names and versions, which an edit in place rarely changes), one ``stat`` each per look;
    none in the interpreter's own trees (site-packages), which change only by installing,
    and an installer writes a new folder (a ``stat`` each there cost 0.3 ms a launch at 200).
    """
    if os.path.join(os.path.abspath(path), "").startswith(_installed_roots()):
        return ()
    found = []
    for name, _mtime in entries:
        if name.endswith((".dist-info", ".egg-info")) or name.lower() == "egg-info":
            file = os.path.join(path, name, "entry_points.txt")
            if os.path.isfile(file):
                found.append((f"{name}/entry_points.txt", file))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """The interpreter's and the environment's trees, where only an installer writes."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    user_site = getattr(sys.modules.get("site"), "USER_SITE", None)
    if isinstance(user_site, str):
        roots.add(user_site)
    return tuple(os.path.join(os.path.abspath(r), "") for r in roots if r)


def _file_times(files: tuple[tuple[str, str], ...]) -> tuple[tuple[str, int], ...]:
    times = []
    stat = os.stat
    for name, file in files:
        try:
            times.append((name, stat(file).st_mtime_ns))
        except OSError:
            times.append((name, -1))  # removed since: a change too
    return tuple(times)


def _meta_entries(path: str) -> tuple[tuple[str, int], ...]:
    """The directory's metadata entries with their mtimes.

    An unzipped ``.egg`` directory on ``sys.path`` keeps its metadata in ``EGG-INFO``, which
    ``importlib.metadata`` reads there (and only there): unlisted, an edit of its
    ``entry_points.txt`` was never seen.
    """
    try:
        names = os.listdir(path)
    except OSError:  # an unreadable directory
        return ()
    egg = os.path.basename(path).lower().endswith(".egg")
    found: list[tuple[str, int]] = []
    for name in names:
        if name.endswith(_META_SUFFIXES) or (egg and name.lower() == "egg-info"):
            try:
                found.append((name, os.stat(os.path.join(path, name)).st_mtime_ns))
            except OSError:
                continue
    return tuple(sorted(found))


def snapshot(groups: Iterable[str]) -> tuple[EntryPointRow, ...]:
    """The entry points of ``groups`` as plain tuples, for a spec (rescanned if stale)."""
    rows: list[EntryPointRow] = []
    for group in dict.fromkeys(groups):
        rows.extend((e.name, e.value, e.group, e.dist, e.version) for e in entry_points(group))
    return tuple(rows)


def seed(groups: Iterable[str], rows: Iterable[EntryPointRow]) -> None:
    """Answer ``entry_points(g)`` for each of ``groups`` from ``rows``, empty groups included."""
    grouped: dict[str, list[EntryPointInfo]] = {g: [] for g in groups}
    for row in rows:
        if row[2] in grouped:
            grouped[row[2]].append(EntryPointInfo(*row))
    with _lock:
        _seeded.update({g: tuple(eps) for g, eps in grouped.items()})


def load_entry_point(ep: EntryPointInfo) -> Any:
    """Import the entry point's module and walk its attribute path; callers wrap errors."""
    obj: Any = importlib.import_module(ep.module)
    for part in filter(None, ep.attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _after_fork() -> None:
    global _cache
    _cache = None
    _seeded.clear()


os.register_at_fork(after_in_child=_after_fork)
