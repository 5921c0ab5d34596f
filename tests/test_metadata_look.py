"""One launch, one look at what is installed (``_metadata.one_look``); between launches, a
new look each time, so a distribution installed in between is seen.

Real distributions written into a directory on ``sys.path``; the directory's mtime is moved
explicitly after each write, as the fingerprint keys on it (a write within the same coarse
timestamp tick would otherwise leave it where it was).
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from pathlib import Path

import pytest

from spawnkit import _metadata
from spawnkit.testing import write_distribution


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    _metadata.clear_cache()
    yield tmp_path
    _metadata.clear_cache()


def _install(site: Path, group: str, name: str) -> None:
    write_distribution(site, f"look-{name}", "1.0", entry_points={group: {name: "os:getcwd"}})
    later = site.stat().st_mtime_ns + 1_000_000_000 * (len(os.listdir(site)) + 1)
    os.utime(site, ns=(later, later))


def _names(group: str) -> list[str]:
    return [ep.name for ep in _metadata.entry_points(group)]


def test_a_distribution_installed_between_two_looks_is_seen_by_the_second(site: Path) -> None:
    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    _install(site, group, "first")
    assert _names(group) == ["first"]
    _install(site, group, "second")
    assert sorted(_names(group)) == ["first", "second"]


def test_inside_one_look_the_installed_set_is_read_once(site: Path) -> None:
    # At the fingerprint, the decision's view: write_distribution itself drops the scan cache
    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    _install(site, group, "first")
    with _metadata.one_look():
        view = _metadata.path_fingerprint()
        _install(site, group, "second")
        # the same decision keeps one view: what it selected and what it sends agree
        assert _metadata.path_fingerprint() is view
        with _metadata.one_look():  # nested: the outer view holds
            assert _metadata.path_fingerprint() is view
        assert _metadata.path_fingerprint() is view
    after = _metadata.path_fingerprint()  # the next decision looks again
    assert after != view
    folders = [n for n, _ in dict(view)[str(site)] if "/" not in n]  # not entry_points.txt
    now = [n for n, _ in dict(after)[str(site)] if "/" not in n]
    assert now == [*folders, "look_second-1.0.dist-info"]


def test_a_path_entry_added_inside_one_look_is_looked_at(
    site: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    other = tmp_path_factory.mktemp("other-site")
    _install(other, group, "elsewhere")
    with _metadata.one_look():
        assert _names(group) == []
        sys.path.insert(0, str(other))
        try:
            assert _names(group) == ["elsewhere"]
        finally:
            sys.path.remove(str(other))


def test_one_look_is_this_threads_own(site: Path) -> None:
    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    _install(site, group, "first")
    seen: list[object] = []
    with _metadata.one_look():
        view = _metadata.path_fingerprint()
        _install(site, group, "second")
        worker = threading.Thread(target=lambda: seen.append(_metadata.path_fingerprint()))
        worker.start()
        worker.join(30)
    assert len(seen) == 1 and seen[0] != view


def test_a_look_taken_while_an_install_still_writes_does_not_hide_what_it_writes_next(
    site: Path,
) -> None:
    # An installer creates the .dist-info directory (the site directory's mtime moves), then
    # writes the files inside it (only the .dist-info's own mtime moves).  A launch looking
    # in between must not leave every later launch on what it saw: the plugin would be
    # installed and silently never loaded.  Written by hand: write_distribution drops the
    # scan cache itself, which would hide the case.
    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    info = site / "look_mid-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: look-mid\nVersion: 1.0\n")
    assert _names(group) == []  # the look in the middle of the install
    (info / "entry_points.txt").write_text(f"[{group}]\nmid = os:getcwd\n")
    assert _names(group) == ["mid"]


def test_an_entry_points_file_rewritten_in_place_is_seen_by_the_next_look(site: Path) -> None:
    # setuptools' egg_info (``setup.py develop``) or an editor rewrites the file of an existing
    # .egg-info: neither the folder's mtime nor the directory's moves.  Before: a long-lived
    # launcher kept the plugin names it had first read; an allow-list naming the new one was
    # refused as unknown, the plugin never loaded.
    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    info = site / "look_dev.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: look-dev\nVersion: 1.0\n")
    eps = info / "entry_points.txt"
    eps.write_text(f"[{group}]\nold_name = os:getcwd\n")
    settled = site.stat().st_mtime_ns - 10_000_000_000  # past the settling window
    for path in (eps, info, site):
        os.utime(path, ns=(settled, settled))
    assert _names(group) == ["old_name"]
    with open(eps, "w", encoding="utf-8") as f:  # in place: the folders' mtimes stay
        f.write(f"[{group}]\nnew_name = os:getcwd\n")
    os.utime(eps, ns=(settled + 1_000_000_000,) * 2)
    os.utime(info, ns=(settled, settled))
    assert _names(group) == ["new_name"]


def _zip_of(path: Path, group: str, names: list[str]) -> None:
    """A zip of plugin distributions, written beside ``path`` and moved over it, as a
    packager or ``zipapp`` replaces one: by hand, with no scan cache dropped (no installer
    drops spawnkit's)."""
    import zipfile

    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for name in names:
            info = f"zip_{name}-1.0.dist-info"
            z.writestr(
                f"{info}/METADATA", f"Metadata-Version: 2.1\nName: zip-{name}\nVersion: 1.0\n"
            )
            z.writestr(f"{info}/entry_points.txt", f"[{group}]\n{name} = os:getcwd\n")
    os.replace(tmp, path)


def test_a_zip_on_sys_path_replaced_in_place_is_seen_by_the_next_look(site: Path) -> None:
    # Before: a zip lists nothing (listdir fails) and its own mtime was not in the fingerprint,
    # so a long-lived launcher kept the plugins it first read from it: importlib.metadata
    # listed the new one, discover() and every later launch did not.
    import importlib.metadata as md

    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    archive = site / "plugins.zip"
    _zip_of(archive, group, ["zipa"])
    sys.path.insert(0, str(archive))
    try:
        assert _names(group) == ["zipa"]
        first = _metadata._scanned()
        assert _metadata._scanned() is first  # unchanged: the scan is kept, not redone
        stamp = archive.stat().st_mtime_ns
        _zip_of(archive, group, ["zipa", "zipb"])
        os.utime(archive, ns=(stamp + 1_000_000_000,) * 2)
        assert sorted(ep.name for ep in md.entry_points(group=group)) == ["zipa", "zipb"]
        assert sorted(_names(group)) == ["zipa", "zipb"]
    finally:
        sys.path.remove(str(archive))


def test_an_unzipped_eggs_entry_points_file_edited_in_place_is_seen_by_the_next_look(
    site: Path,
) -> None:
    # An .egg directory on sys.path (easy_install, a rebuilt egg) keeps its metadata in
    # EGG-INFO, which importlib.metadata reads.  Before: EGG-INFO matched none of the metadata
    # suffixes, so its entry_points.txt was never stat'ed and an edit in place went unseen.
    import importlib.metadata as md

    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    egg = site / "look_egg-1.0-py3.11.egg"
    info = egg / "EGG-INFO"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: look-egg\nVersion: 1.0\n")
    eps = info / "entry_points.txt"
    eps.write_text(f"[{group}]\nold_name = os:getcwd\n")
    settled = site.stat().st_mtime_ns - 10_000_000_000  # past the settling window
    for path in (eps, info, egg):
        os.utime(path, ns=(settled, settled))
    sys.path.insert(0, str(egg))
    try:
        assert _names(group) == ["old_name"]
        with open(eps, "w", encoding="utf-8") as f:  # in place: the folders' mtimes stay
            f.write(f"[{group}]\nold_name = os:getcwd\nnew_name = os:getcwd\n")
        os.utime(eps, ns=(settled + 1_000_000_000,) * 2)
        for path in (info, egg):
            os.utime(path, ns=(settled, settled))
        assert sorted(ep.name for ep in md.entry_points(group=group)) == ["new_name", "old_name"]
        assert sorted(_names(group)) == ["new_name", "old_name"]
    finally:
        sys.path.remove(str(egg))


def _nameless(site: Path, folder: str, group: str, name: str) -> None:
    """A hand-made ``.dist-info`` with only ``entry_points.txt``: no ``Name`` anywhere."""
    (site / folder).mkdir(parents=True)
    (site / folder / "entry_points.txt").write_text(f"[{group}]\n{name} = os:getcwd\n")
    _metadata.clear_cache()


def test_distributions_without_a_name_keep_their_entry_points_apart(
    site: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Before: every one was "<unknown>", one name: only the first kept its entry points.
    import importlib.metadata as md

    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    _nameless(site, "local_alpha-1.0.dist-info", group, "alpha")
    _nameless(site, "local_beta-1.0.dist-info", group, "beta")
    found = {ep.name: ep.dist for ep in _metadata.entry_points(group)}
    assert found == {
        "alpha": "<unnamed local_alpha-1.0.dist-info>",
        "beta": "<unnamed local_beta-1.0.dist-info>",
    }
    assert sorted(found) == sorted(ep.name for ep in md.entry_points(group=group))
    # one of the same folder stem further down sys.path is shadowed, as importlib has it
    later = tmp_path_factory.mktemp("later")
    sys.path.insert(sys.path.index(str(site)) + 1, str(later))
    try:
        _nameless(later, "local_alpha-2.0.dist-info", group, "alpha_two")
        assert sorted(_names(group)) == ["alpha", "beta"]
        assert sorted(ep.name for ep in md.entry_points(group=group)) == ["alpha", "beta"]
    finally:
        sys.path.remove(str(later))


def test_write_distribution_again_replaces_the_earlier_version_as_pips_upgrade_does(
    site: Path,
) -> None:
    # Before: both folders stayed, importlib.metadata read the one listdir gave first: a
    # test "upgrading" a plugin ran the 2.0 code under the 1.0 entry points and version.
    import importlib.metadata as md

    group = f"look{uuid.uuid4().hex[:8]}.plugins"
    write_distribution(site, "look-up", "1.0", entry_points={group: {"old": "os:getcwd"}})
    write_distribution(site, "Look.Up", "2.0", entry_points={group: {"new": "os:getcwd"}})
    assert sorted(p.name for p in site.glob("*.dist-info")) == ["Look_Up-2.0.dist-info"]
    assert md.version("look-up") == "2.0"
    assert [(ep.name, ep.version) for ep in _metadata.entry_points(group)] == [("new", "2.0")]
    # another distribution's folder, and one whose name only starts the same, stay
    write_distribution(site, "look-up-extra", "1.0")
    write_distribution(site, "look-up", "3.0")
    assert sorted(p.name for p in site.glob("*.dist-info")) == [
        "look_up-3.0.dist-info",
        "look_up_extra-1.0.dist-info",
    ]
