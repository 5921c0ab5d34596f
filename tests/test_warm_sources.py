"""A plugin or hook target edited between two warm launches runs as edited, as a spawned one does.

A warm-start server imports its plugins and hook targets once; a spawned worker imports them
at every launch.  A long-lived launcher (a notebook, an engine that relaunches its workers)
whose plugin file was edited in place between two launches ran the old code in every warm
worker and the new code in every spawned one, with nothing said: the server's key reads
directories, and an edit in place changes only the file.  The server now lists the files it
imported from outside the installed trees; a launch that finds one changed lets that server
go (its running workers finish) and starts a new one.  Real launcher processes, a real
installed plugin distribution, real edits.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from _plugin_app import run_script, write_app
from spawnkit.protocol import _sources

_LAUNCHER = """
import json, os, pathlib, sys, time
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
PLUGIN = pathlib.Path({site!r}) / "{pkg}" / "plugin.py"
GATE = pathlib.Path(sys.argv[1])

def start(method, payload=None):
    return spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", payload, namespace=NS, start_method=method,
        ready_timeout=120, join_timeout=120,
    )

def launch(method):
    with start(method) as group:
        return group.results(timeout=120)[0]

def edit(old, new):
    PLUGIN.write_text(PLUGIN.read_text().replace(old, new))  # in place: same directory

if __name__ == "__main__":
    out = {{"first": launch("forkserver"), "again": launch("forkserver")}}
    # A group that keeps running on the first server while the plugin changes under it.
    with start("forkserver", str(GATE)) as running:
        running.wait_ready(timeout=120)
        # A longer text: an edit of the same size within the second of the last write leaves
        # Python's own bytecode cache (source mtime in whole seconds, and size) looking
        # current, and every process, spawned or not, would import the old code.
        edit(":v1", ":second")
        out["edited"] = launch("forkserver")
        out["spawned"] = launch("spawn")
        GATE.write_text("go")
        out["running"] = running.results(timeout=120)[0]
    from spawnkit.protocol import warm

    deadline = time.monotonic() + 30
    while warm._retired and time.monotonic() < deadline:  # reaped by the next launch's look
        out["after"] = launch("forkserver")
    out["retired_left"] = len(warm._retired)
    print("OUT", json.dumps(out))
"""

_PLUGIN = """
from spawnkit.hooks import HookType
import spawnkit

def register():
    spawnkit.Namespace({tag!r}).hooks.register(
        "{pkg}.engine.answer", lambda result: result + ":v1", HookType.AFTER
    )
"""

_ENGINE = """
import os, pathlib, time

def answer():
    return "engine"

def main(gate=None):
    if gate is not None:  # hold this worker until the launcher opens the gate
        deadline = time.monotonic() + 60
        while not pathlib.Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return [answer(), os.getppid()]
"""


def _run(tmp_path: Path, launcher: str, plugin: str, *args: str) -> Any:
    """The launcher beside an installed plugin and ``engine``; what it printed after OUT."""
    app = write_app(
        tmp_path, "wsrc", launcher, plugins={"edits": "plugin:register"},
        modules={"plugin": plugin, "engine": _ENGINE},
    )  # fmt: skip
    proc = run_script(app.script, *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.split("OUT ", 1)[1])


def test_an_edited_plugin_takes_effect_in_the_next_warm_launch(tmp_path: Path) -> None:
    out = _run(tmp_path, _LAUNCHER, _PLUGIN, str(tmp_path / "gate"))
    (first, server), (again, same) = out["first"], out["again"]
    assert first == again == "engine:v1"
    assert same == server, "an unchanged plugin must keep its warm server"
    edited, new_server = out["edited"]
    # Before the fix: 'engine:v1' from the first server, while the spawned worker said second.
    assert edited == out["spawned"][0] == "engine:second"
    assert new_server != server
    # The group that was running on the first server finished there, with its code.
    assert out["running"] == ["engine:v1", server]
    assert out["retired_left"] == 0, "the server let go must exit and be reaped"


_RACE_LAUNCHER = """
import sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def launch():
    with spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", namespace=NS, start_method="forkserver",
        preload=("{pkg}.editor",), ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)[0][0]

if __name__ == "__main__":
    print("OUT", launch(), launch(), launch())
"""

# A preload that edits the plugin the server has just loaded, as an editor saving while the
# server starts would: once (the second server finds it edited and leaves it).
_EDITOR = """
import pathlib
plugin = pathlib.Path(__file__).with_name("plugin.py")
text = plugin.read_text()
if ":v1" in text:
    plugin.write_text(text.replace(":v1", ":second"))  # longer: see the other test's edit
"""


def test_a_plugin_edited_while_its_server_started_is_run_as_edited_from_the_next_launch(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path,
        "wrace",
        _RACE_LAUNCHER,
        plugins={"edits": "plugin:register"},
        modules={"plugin": _PLUGIN, "engine": _ENGINE, "editor": _EDITOR},
    )
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stderr
    # The first server imported v1 before the edit; its snapshot, taken after, must not
    # pass the edited file for what it ran (before the fix: v1 at every launch).
    said = proc.stdout.split("OUT ", 1)[1].split()
    assert said == ["engine:v1", "engine:second", "engine:second"]


def test_sources_lists_own_files_and_sees_an_edit_and_a_removal(tmp_path: Path) -> None:
    path = tmp_path / "wsrc_mod_a.py"
    path.write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        __import__("wsrc_mod_a")
        found = {p for p, *_ in _sources.snapshot(time.time_ns())}
        assert str(path) in found
        # The standard library, site-packages and spawnkit's own files are never listed.
        assert os.__file__ not in found
        assert _sources.__file__ not in found
        before = [s for s in _sources.snapshot(time.time_ns()) if s[0] == str(path)]
        assert _sources.changed(before) == []
        path.write_text("VALUE = 2\n")  # same size: the mtime (or the inode) tells
        os.utime(path, ns=(before[0][1] + 10**9, before[0][1] + 10**9))
        assert _sources.changed(before) == [str(path)]
        path.unlink()
        assert _sources.changed(before) == [str(path)]
        # Changed after the server started: listed as changed already.  Dated in the future
        # (a clock that disagrees with the file system's): listed as it is, or every launch
        # would start a new server.
        path.write_text("VALUE = 3\n")
        now = time.time_ns()
        os.utime(path, ns=(now - 10**9, now - 10**9))
        (meanwhile,) = [s for s in _sources.snapshot(now - 2 * 10**9) if s[0] == str(path)]
        assert meanwhile[1] == -1 and _sources.changed([meanwhile]) == [str(path)]
        os.utime(path, ns=(now + 3600 * 10**9, now + 3600 * 10**9))
        (future,) = [s for s in _sources.snapshot(now - 2 * 10**9) if s[0] == str(path)]
        assert future[1] == now + 3600 * 10**9 and _sources.changed([future]) == []
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("wsrc_mod_a", None)


#: One warm or spawned launch of the engine, its first rank's result: for the launchers below
_LAUNCH = """
def launch(method):
    with spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", namespace=NS, start_method=method,
        ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)[0]
"""

_CONFIG_LAUNCHER = """
import json, pathlib, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
CONFIG = pathlib.Path({site!r}) / "{pkg}" / "config.json"
""" + _LAUNCH + """
if __name__ == "__main__":
    CONFIG.write_text(json.dumps({{"suffix": ":v1"}}))
    out = {{"first": launch("forkserver"), "again": launch("forkserver")}}
    CONFIG.write_text(json.dumps({{"suffix": ":second"}}))  # longer: another size
    out["edited"] = launch("forkserver")
    out["spawned"] = launch("spawn")
    print("OUT", json.dumps(out))
"""

# Reads its configuration as it loads, and a kernel file (changed at every look: not listed).
_CONFIG_PLUGIN = """
import json, pathlib
from spawnkit.hooks import HookType
import spawnkit

SUFFIX = json.loads(pathlib.Path(__file__).with_name("config.json").read_text())["suffix"]
with open("/proc/self/status") as status:
    status.read()

def register():
    spawnkit.Namespace({tag!r}).hooks.register(
        "{pkg}.engine.answer", lambda result: result + SUFFIX, HookType.AFTER
    )
"""


def test_a_configuration_file_edited_between_warm_launches_is_read_again(tmp_path: Path) -> None:
    out = _run(tmp_path, _CONFIG_LAUNCHER, _CONFIG_PLUGIN)
    (first, server), (again, same) = out["first"], out["again"]
    assert first == again == "engine:v1"
    assert same == server, "an unchanged configuration (and /proc) must keep the warm server"
    # Before: 'engine:v1' from the first server, while the spawned worker read ':second'.
    edited, new_server = out["edited"]
    assert edited == out["spawned"][0] == "engine:second" and new_server != server


def test_reads_notes_files_opened_to_read_and_puts_open_back(tmp_path: Path) -> None:
    import builtins
    import io

    opened = builtins.open
    data, out, updated = tmp_path / "data.json", tmp_path / "out.txt", tmp_path / "db"
    data.write_text("{}")
    updated.write_text("")
    with _sources.Reads() as reads:
        data.read_text()  # pathlib: io.open
        with open(out, "w") as f, open(updated, "r+"):
            f.write("x")
        with open(os.open(data, os.O_RDONLY), closefd=True):  # a descriptor: no path
            pass
    assert reads.paths == {str(data)}
    assert builtins.open is opened and io.open is opened
    assert [s[0] for s in _sources.snapshot(time.time_ns(), reads.paths)].count(str(data)) == 1


def test_an_open_kept_as_a_class_attribute_meanwhile_still_opens_and_notes_nothing_after(
    tmp_path: Path,
) -> None:
    # Python 3.10's pathlib, imported during a server's bootstrap, kept the stand-in as
    # ``_NormalAccessor.open``: a function there became a method and took the path for the mode.
    import io

    data = tmp_path / "data.json"
    data.write_text("{}")
    with _sources.Reads() as reads:

        class Accessor:  # what pathlib 3.10 does at import
            open = io.open

        with Accessor().open(data, "r") as f:
            assert f.read() == "{}"
        kept = io.open
    assert reads.paths == {str(data)}
    with kept(data) as f:  # a copy kept meanwhile opens as the real one, noting nothing
        assert f.read() == "{}"
    assert reads.paths == {str(data)}


_LIB_LAUNCHER = """
import glob, json, math, os, pathlib, shutil, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
LIB = pathlib.Path({site!r}) / "{pkg}" / "libkern.so"
BUILDS = sorted(glob.glob(os.path.join(os.path.dirname(math.__file__), "*.so")))
""" + _LAUNCH + """
def build(n):  # a "rebuild": another shared library put in place by rename, as a linker does
    shutil.copy(BUILDS[n], str(LIB) + ".tmp")
    os.replace(str(LIB) + ".tmp", LIB)
    return os.stat(LIB).st_ino

if __name__ == "__main__":
    out = {{"built": [build(0)]}}
    out["first"], out["again"] = launch("forkserver"), launch("forkserver")
    out["built"].append(build(1))
    out["rebuilt"] = launch("forkserver")
    print("OUT", json.dumps(out))
"""

# Loads its kernel by path, as custom-op plugins do (ctypes.CDLL, torch.ops.load_library).
_LIB_PLUGIN = """
import ctypes, pathlib

KERNEL = ctypes.CDLL(str(pathlib.Path(__file__).with_name("libkern.so")))

def register():
    pass
"""

_LIB_ENGINE = """
import os

def main():  # the inode of the kernel this worker has mapped
    with open("/proc/self/maps") as maps:
        found = [line.split()[4] for line in maps if line.rstrip().endswith("libkern.so")]
    return [int(found[0]) if found else None, os.getppid()]
"""


def test_a_kernel_a_plugin_loaded_by_path_and_rebuilt_gets_a_new_warm_server(
    tmp_path: Path,
) -> None:
    """``ctypes.CDLL(".../libkern.so")`` in a plugin, the library rebuilt between two launches:
    the server ran on with the old one mapped, no module and no ``open`` had seen it."""
    import math

    if not getattr(math, "__file__", "").endswith(".so"):
        pytest.skip("this Python has no extension modules to stand in for a built kernel")
    app = write_app(
        tmp_path, "wlib", _LIB_LAUNCHER, plugins={"kern": "plugin:register"},
        modules={"plugin": _LIB_PLUGIN, "engine": _LIB_ENGINE},
    )  # fmt: skip
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    (first, server), (again, same) = out["first"], out["again"]
    rebuilt, new_server = out["rebuilt"]
    assert first == again == out["built"][0] and same == server  # unchanged: the server kept
    assert rebuilt == out["built"][1] and new_server != server


_OPTIONAL_LAUNCHER = """
import json, pathlib, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
CONFIG = pathlib.Path({site!r}) / "{pkg}" / "config.json"
""" + _LAUNCH + """
if __name__ == "__main__":
    out = {{"first": launch("forkserver"), "again": launch("forkserver")}}
    CONFIG.write_text(json.dumps({{"suffix": ":tuned"}}))  # the user adds the optional file
    out["created"] = launch("forkserver")
    out["spawned"] = launch("spawn")
    print("OUT", json.dumps(out))
"""

# An optional configuration: its defaults where it is missing.
_OPTIONAL_PLUGIN = """
import json, pathlib
from spawnkit.hooks import HookType
import spawnkit

try:
    with open(pathlib.Path(__file__).with_name("config.json")) as f:
        SUFFIX = json.load(f)["suffix"]
except FileNotFoundError:
    SUFFIX = ":default"

def register():
    spawnkit.Namespace({tag!r}).hooks.register(
        "{pkg}.engine.answer", lambda result: result + SUFFIX, HookType.AFTER
    )
"""


def test_an_optional_configuration_created_between_warm_launches_is_read(tmp_path: Path) -> None:
    """The plugin found no file and took its defaults: the server noted nothing (only files
    it opened), so warm workers kept the defaults after the user created it."""
    out = _run(tmp_path, _OPTIONAL_LAUNCHER, _OPTIONAL_PLUGIN)
    (first, server), (again, same) = out["first"], out["again"]
    assert first == again == "engine:default" and same == server  # still missing: kept
    created, new_server = out["created"]
    assert created == out["spawned"][0] == "engine:tuned" and new_server != server


_CONTEXT_LAUNCHER = """
import json, os, pathlib, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
PLUGIN = pathlib.Path({site!r}) / "{pkg}" / "plugin.py"

def child(ctx):
    from {pkg}.engine import put
    queue = ctx.Queue()
    proc = ctx.Process(target=put, args=(queue,))
    proc.start()
    said = queue.get(timeout=120)
    proc.join(60)
    return said

def pool(ctx):
    from {pkg}.engine import main
    with ctx.Pool(1, maxtasksperchild=1) as workers:
        return workers.apply_async(main).get(120)

def edit(old, new):
    PLUGIN.write_text(PLUGIN.read_text().replace(old, new))  # each longer: see the first test

if __name__ == "__main__":
    warm = spawnkit.get_context("forkserver", namespace=NS)
    cold = spawnkit.get_context("spawn", namespace=NS)
    out = {{"first": child(warm), "again": child(warm), "pooled": pool(warm)}}
    edit(":v1", ":second")
    out["edited"], out["spawned"] = child(warm), child(cold)[0]
    out["pooled_edited"] = pool(warm)
    edit(":second", ":third-edit")
    # A launch meets the edit first and lets the context's server go: the context's next
    # child must not fail for it (ForkServerError "was shut down" before).
    with spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", namespace=NS, start_method="forkserver", ready_timeout=120,
    ) as group:
        out["launched"] = group.results(timeout=120)[0]
    try:
        out["after_launch"] = child(warm)
    except Exception as exc:
        out["after_launch"] = [type(exc).__name__, str(exc)]
    print("OUT", json.dumps(out))
"""

_CONTEXT_ENGINE = _ENGINE + """
def put(queue):
    queue.put(main())
"""


def test_a_forkserver_context_runs_an_edited_plugin_in_its_next_child(tmp_path: Path) -> None:
    """A context keeps its warm server for its life: a plugin edited between two of its
    children ran as it was in the second (a spawn context's ran the edit), unsaid; and once a
    launch had let that server go for the edit, the context's next child failed."""
    app = write_app(
        tmp_path, "wctx", _CONTEXT_LAUNCHER, plugins={"edits": "plugin:register"},
        modules={"plugin": _PLUGIN, "engine": _CONTEXT_ENGINE},
    )  # fmt: skip
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    (first, server), (again, same) = out["first"], out["again"]
    assert first == again == out["pooled"][0] == "engine:v1"
    assert same == server == out["pooled"][1], "an unchanged plugin keeps the context's server"
    edited, new_server = out["edited"]
    # Before the fix: 'engine:v1' from the context's first server.
    assert edited == out["spawned"] == out["pooled_edited"][0] == "engine:second"
    assert new_server != server and out["pooled_edited"][1] == new_server
    assert out["launched"][0] == out["after_launch"][0] == "engine:third-edit"
    assert out["after_launch"][1] == out["launched"][1], "the launch's new server is shared"


#: A package's first ``__pycache__``, written as the server imports it, moves its directory's
#: mtime once (one server more, then it settles): these tests look at one change at a time.
_NO_PYC = {"PYTHONDONTWRITEBYTECODE": "1"}

_LISTING_LAUNCHER = """
import json, os, pathlib, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
MODELS = pathlib.Path({site!r}) / "{pkg}" / "models"

def launch(method):
    with spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", namespace=NS, start_method=method,
        ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)[0]

if __name__ == "__main__":
    out = {{"first": launch("forkserver")}}
    # What a launcher writes beside its script and in its working directory (both on
    # sys.path, listed by importlib.metadata as the plugins load) keeps its warm server.
    pathlib.Path(sys.argv[0]).with_name("log.txt").write_text("launched")
    pathlib.Path("out.json").write_text("{{}}")
    out["again"] = launch("forkserver")
    (MODELS / "qwen.py").write_text("NAME = 'qwen'")  # a developer adds a model
    out["added"], out["spawned"] = launch("forkserver"), launch("spawn")
    print("OUT", json.dumps(out))
"""

# A registry built as its module is imported, from the modules its package's directory lists
# (SGLang's model registry: pkgutil.iter_modules of its models package), hooked by the plugin.
_REGISTRY = """
import importlib, os, pkgutil
from {pkg} import models

def answer():
    return "+".join(
        importlib.import_module(f"{pkg}.models.{{m.name}}").NAME
        for m in pkgutil.iter_modules(models.__path__)
    )

MODELS = answer()

def registered():
    return MODELS
"""

_LISTING_ENGINE = """
import os

def main():
    from {pkg}.registry import registered
    return [registered(), os.getppid()]
"""

_LISTING_PLUGIN = """
import importlib.metadata
from spawnkit.hooks import HookType
import spawnkit

def register():
    # importlib.metadata lists every sys.path directory, the launcher's own among them
    assert importlib.metadata.entry_points(group="{tag}.plugins", name="lists")
    spawnkit.Namespace({tag!r}).hooks.register(
        "{pkg}.registry.registered", lambda result: result + ":hooked", HookType.AFTER
    )
"""


def test_a_module_added_to_a_directory_listed_at_import_is_found_by_the_next_warm_launch(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path, "wlist", _LISTING_LAUNCHER, plugins={"lists": "plugin:register"},
        modules={
            "plugin": _LISTING_PLUGIN, "registry": _REGISTRY, "engine": _LISTING_ENGINE,
            "models.__init__": "", "models.llama": "NAME = 'llama'",
        },
    )  # fmt: skip
    proc = run_script(app.script, env=_NO_PYC)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    (first, server), (again, same) = out["first"], out["again"]
    assert first == again == "llama:hooked"
    assert same == server, "files written on sys.path directories must keep the warm server"
    # Before: 'llama:hooked' from the server's own listing, while a spawned worker found qwen.
    added, new_server = out["added"]
    assert added == out["spawned"][0] == "llama+qwen:hooked" and new_server != server


def test_reads_notes_directories_listed_and_puts_the_listings_back(tmp_path: Path) -> None:
    import glob
    import pkgutil

    listdir, scandir = os.listdir, os.scandir
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    with _sources.Reads() as reads:
        list(pkgutil.iter_modules([str(tmp_path / "a")]))
        glob.glob(str(tmp_path / "b" / "*.json"))
        list((tmp_path / "c").iterdir())
        with os.scandir(os.open(tmp_path, os.O_RDONLY)):  # a descriptor: no path
            pass
        kept = os.listdir
        # what shutil's import asks: an rmtree imported meanwhile keeps its safe, fd-based way
        assert os.scandir in os.supports_fd and os.listdir in os.supports_fd
    assert reads.listed == {str(tmp_path / d) for d in "abc"}
    assert os.listdir is listdir and os.scandir is scandir
    assert kept not in os.supports_fd and scandir in os.supports_fd
    assert kept(tmp_path) and reads.listed == {str(tmp_path / d) for d in "abc"}
    sys.path.insert(0, str(tmp_path / "c"))  # a sys.path directory: the key's, not listed
    try:
        listed = [s[0] for s in _sources.snapshot(time.time_ns(), (), reads.listed)]
    finally:
        sys.path.remove(str(tmp_path / "c"))
    assert str(tmp_path / "a") in listed and str(tmp_path / "b") in listed
    assert str(tmp_path / "c") not in listed
    a = str(tmp_path / "a")
    sources = [s for s in _sources.snapshot(time.time_ns(), (), {a}) if s[0] == a]
    assert len(sources) == 1 and _sources.changed(sources) == []
    time.sleep(0.01)
    (tmp_path / "a" / "new.py").write_text("")  # an entry comes: the directory's mtime moves
    assert _sources.changed(sources) == [a]


_BUILT_LAUNCHER = """
import json, pathlib, sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})
PACKAGE = pathlib.Path({site!r}) / "{pkg}"

def launch(method):
    with spawnkit.spawn_with_plugins(
        "{pkg}.engine:main", namespace=NS, start_method=method,
        ready_timeout=120, join_timeout=120,
    ) as group:
        return group.results(timeout=120)[0]

if __name__ == "__main__":
    out = {{"first": launch("forkserver")}}
    pathlib.Path(sys.argv[0]).with_name("log.txt").write_text("launched")
    out["again"] = launch("forkserver")
    (PACKAGE / "_fast.py").write_text("")  # an in-place build (build_ext --inplace) is done
    out["built"], out["spawned"] = launch("forkserver"), launch("spawn")
    print("OUT", json.dumps(out))
"""

# A hook target with an optional compiled part, as engines import theirs.
_BUILT_ENGINE = """
import os
try:
    from {pkg} import _fast
    FAST = True
except ImportError:
    FAST = False

def answer():
    return "fast" if FAST else "slow"

def main():
    return [answer(), os.getppid()]
"""


def test_a_submodule_a_warm_server_failed_to_import_is_imported_once_it_is_there(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path, "wopt", _BUILT_LAUNCHER, plugins={"edits": "plugin:register"},
        modules={"plugin": _PLUGIN, "engine": _BUILT_ENGINE},
    )  # fmt: skip
    proc = run_script(app.script, env=_NO_PYC)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    (first, server), (again, same) = out["first"], out["again"]
    assert first == again == "slow:v1"
    assert same == server, "a file written beside the launching script keeps the warm server"
    # Before: 'slow:v1' from the server's failed import, while a spawned worker ran fast.
    built, new_server = out["built"]
    assert built == out["spawned"][0] == "fast:v1" and new_server != server


def test_reads_notes_where_a_submodule_was_missed_and_leaves_meta_path_as_it_was(
    tmp_path: Path,
) -> None:
    import importlib

    package = tmp_path / "wopt_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    finders = list(sys.meta_path)
    sys.path.insert(0, str(tmp_path))
    try:
        with _sources.Reads() as reads:
            importlib.import_module("wopt_probe_pkg")
            with pytest.raises(ImportError):
                importlib.import_module("wopt_probe_pkg._fast")
            with pytest.raises(ImportError):
                importlib.import_module("wopt_probe_top_level_missing")  # sys.path: the key's
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("wopt_probe")]:
            del sys.modules[name]
    assert reads.listed == {str(package)}
    assert sys.meta_path == finders
