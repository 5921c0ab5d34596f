"""The pytest fixtures of spawnkit.testing: real distributions, selection variables, modes."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import multiprocessing
import os
import subprocess
import sys
import uuid
from multiprocessing.connection import Connection

import pytest

from spawnkit import _metadata
from spawnkit.namespace import Namespace
from spawnkit.testing import LAUNCH_MODES, DistSandbox, EnvOverlay, LaunchMode

TIMEOUT = 60


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ plugin_dist
def test_plugin_dist_is_discovered_like_an_installed_distribution(plugin_dist):
    group = _unique("grp")
    mod = _unique("plug")
    dist = plugin_dist(
        "my-plugin",
        "1.2.3",
        entry_points={group: {"mine": f"{mod}:register"}},
        modules={mod: "def register():\n    return 'registered'\n"},
    )
    assert dist.dist_info.is_dir()
    assert str(dist.root) in sys.path
    found = [ep for ep in md.entry_points(group=group)]
    assert [(ep.name, ep.value) for ep in found] == [("mine", f"{mod}:register")]
    assert found[0].dist is not None and found[0].dist.version == "1.2.3"
    infos = _metadata.entry_points(group)
    assert [(i.name, i.dist, i.version) for i in infos] == [("mine", "my-plugin", "1.2.3")]
    assert _metadata.load_entry_point(infos[0])() == "registered"


def test_plugin_dist_packages_and_several_distributions(plugin_dist):
    group = _unique("grp")
    pkg = _unique("pkg")
    plugin_dist(
        "first-dist",
        entry_points={group: {"a": f"{pkg}.sub.mod:f"}},
        modules={f"{pkg}.sub.mod": "def f():\n    return 1\n"},
    )
    plugin_dist("second-dist", "2.0", entry_points={group: {"b": f"{pkg}.sub.mod:f"}})
    names = sorted((i.name, i.dist) for i in _metadata.entry_points(group))
    assert names == [("a", "first-dist"), ("b", "second-dist")]
    assert importlib.import_module(f"{pkg}.sub.mod").f() == 1
    assert importlib.import_module(pkg).__file__.endswith("__init__.py")


def test_plugin_dist_is_visible_to_a_subprocess_child(plugin_dist):
    group = _unique("grp")
    mod = _unique("plug")
    plugin_dist(
        "sub-visible",
        entry_points={group: {"x": f"{mod}:VALUE"}},
        modules={mod: "VALUE = 41 + 1\n"},
    )
    code = (
        "import importlib.metadata as m, importlib\n"
        f"eps = list(m.entry_points(group={group!r}))\n"
        f"print(eps[0].name, eps[0].load(), importlib.import_module({mod!r}).VALUE)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True
    )
    assert out.stdout.split() == ["x", "42", "42"]


def _report_plugin(conn: Connection, group: str) -> None:
    from spawnkit import _metadata as meta

    infos = meta.entry_points(group)
    conn.send([(i.name, i.dist, i.version, meta.load_entry_point(i)) for i in infos])
    conn.close()


def test_plugin_dist_is_visible_to_a_spawned_child(plugin_dist):
    group = _unique("grp")
    mod = _unique("plug")
    plugin_dist(
        "spawn-visible",
        "3.1",
        entry_points={group: {"y": f"{mod}:VALUE"}},
        modules={mod: "VALUE = 'from the child'\n"},
    )
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_report_plugin, args=(send, group))
    proc.start()
    send.close()
    try:
        assert recv.poll(TIMEOUT), "spawned child did not answer in time"
        assert recv.recv() == [("y", "spawn-visible", "3.1", "from the child")]
    finally:
        proc.join(TIMEOUT)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    assert proc.exitcode == 0


def test_plugin_dist_writes_a_malformed_value_verbatim(plugin_dist):
    group = _unique("grp")
    dist = plugin_dist("broken-dist", entry_points={group: {"bad": "not a module:at all"}})
    text = (dist.dist_info / "entry_points.txt").read_text()
    assert "bad = not a module:at all" in text
    assert [i.value for i in _metadata.entry_points(group)] == ["not a module:at all"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "no spaces"}, "invalid distribution name"),
        ({"name": "ok", "entry_points": {"g": {"a=b": "m:f"}}}, "invalid entry-point name"),
        ({"name": "ok", "entry_points": {"g": {" a": "m:f"}}}, "invalid entry-point name"),
    ],
)
def test_plugin_dist_refuses_what_entry_points_txt_cannot_hold(plugin_dist, kwargs, message):
    with pytest.raises(ValueError, match=message):
        plugin_dist(**kwargs)


def test_plugin_dist_validate_true_refuses_malformed_values(plugin_dist):
    with pytest.raises(ValueError, match="invalid entry-point value"):
        plugin_dist("strict-dist", entry_points={"g": {"bad": "not a module"}}, validate=True)


def test_sandbox_close_removes_every_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/keep/me")
    group = _unique("grp")
    pkg = _unique("pkg")
    sandbox = DistSandbox(tmp_path / "dists")
    sandbox(
        "traced",
        entry_points={group: {"t": f"{pkg}.mod:f"}},
        modules={f"{pkg}.mod": "def f():\n    return 1\n"},
    )
    root = str(sandbox.root)
    assert os.environ["PYTHONPATH"] == root + os.pathsep + "/keep/me"
    importlib.import_module(f"{pkg}.mod")
    assert _metadata.entry_points(group)
    sandbox.close()
    assert root not in sys.path
    assert root not in sys.path_importer_cache
    assert pkg not in sys.modules and f"{pkg}.mod" not in sys.modules
    assert os.environ["PYTHONPATH"] == "/keep/me"
    assert _metadata.entry_points(group) == ()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(pkg)


def test_sandbox_close_unsets_pythonpath_that_was_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    sandbox = DistSandbox(tmp_path / "d")
    sandbox("unset-pp")
    assert os.environ["PYTHONPATH"] == str(sandbox.root)
    sandbox.close()
    assert "PYTHONPATH" not in os.environ


def test_sandbox_purge_modules_lets_a_test_reimport(plugin_dist):
    mod = _unique("plug")
    dist = plugin_dist("reimport", modules={mod: "X = 1\n"})
    assert importlib.import_module(mod).X == 1
    (dist.root / f"{mod}.py").write_text("X = 2\n")
    assert plugin_dist.purge_modules() == [mod]
    importlib.invalidate_caches()
    assert importlib.import_module(mod).X == 2


# ------------------------------------------------------- selection variables
def test_env_overlay_restores_set_and_absent_values(monkeypatch):
    a, b = _unique("SPAWNKIT_T_A").upper(), _unique("SPAWNKIT_T_B").upper()
    monkeypatch.setenv(a, "orig")
    monkeypatch.delenv(b, raising=False)
    env = EnvOverlay()
    env.set(a, "one")
    env.set(a, "two")
    env.set(b, "new")
    env.set(a, None)
    assert a not in os.environ and os.environ[b] == "new"
    assert env.changed == sorted([a, b])
    env.undo()
    assert os.environ[a] == "orig" and b not in os.environ


def test_platform_selection_sets_the_default_namespace_variable(platform_selection, monkeypatch):
    monkeypatch.delenv("SPAWNKIT_PLATFORM", raising=False)
    assert platform_selection("my_device") == "SPAWNKIT_PLATFORM"
    assert os.environ["SPAWNKIT_PLATFORM"] == "my_device"
    platform_selection.unset()
    assert "SPAWNKIT_PLATFORM" not in os.environ
    assert platform_selection.use_cpu_engine() == "SPAWNKIT_USE_CPU_ENGINE"
    assert os.environ["SPAWNKIT_USE_CPU_ENGINE"] == "1"


def test_platform_selection_accepts_a_namespace_and_undoes(platform_selection, spawnkit_namespace):
    ns = spawnkit_namespace
    var = ns.config.platform_var
    assert var not in os.environ
    assert platform_selection.set("cpu", namespace=ns) == var
    assert platform_selection.set("base", namespace=ns.name) == var
    assert os.environ[var] == "base"
    platform_selection.undo()
    assert var not in os.environ


def test_plugin_allowlist_forms(plugin_allowlist, spawnkit_namespace):
    ns = spawnkit_namespace
    var = ns.config.plugins_var
    plugin_allowlist(["a", "b"], namespace=ns)
    assert os.environ[var] == "a,b"
    plugin_allowlist.allow("c", namespace=ns)
    assert os.environ[var] == "c"
    plugin_allowlist("x, y", namespace=ns)
    assert os.environ[var] == "x,y"
    plugin_allowlist.none(namespace=ns)
    assert os.environ[var] == ""
    plugin_allowlist.all(namespace=ns)
    assert var not in os.environ
    with pytest.raises(ValueError, match="comma"):
        plugin_allowlist([" a,b"], namespace=ns)
    plugin_allowlist.allow("z", namespace=ns)
    plugin_allowlist.undo()
    assert var not in os.environ


def _read_env(conn: Connection, names: list[str]) -> None:
    conn.send({n: os.environ.get(n) for n in names})
    conn.close()


def test_selection_variables_reach_a_spawned_child(
    platform_selection, plugin_allowlist, spawnkit_namespace
):
    ns = spawnkit_namespace
    platform_selection("my_device", namespace=ns)
    plugin_allowlist.allow("p1", "p2", namespace=ns)
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    names = [ns.config.platform_var, ns.config.plugins_var]
    proc = ctx.Process(target=_read_env, args=(send, names))
    proc.start()
    send.close()
    try:
        assert recv.poll(TIMEOUT)
        assert recv.recv() == dict(zip(names, ["my_device", "p1,p2"], strict=True))
    finally:
        proc.join(TIMEOUT)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def test_unknown_namespace_name_is_the_namespace_error(platform_selection):
    from spawnkit.errors import NamespaceError

    with pytest.raises(NamespaceError, match="unknown namespace"):
        platform_selection.set("cpu", namespace=_unique("never_declared"))


def test_spawnkit_namespace_is_unique_per_test(spawnkit_namespace):
    assert isinstance(spawnkit_namespace, Namespace)
    assert spawnkit_namespace.name.startswith("t_")
    assert spawnkit_namespace.config.plugin_group == f"{spawnkit_namespace.name}.plugins"


# ----------------------------------------------------------------- launch modes
def _child_pid(conn: Connection) -> None:
    conn.send(os.getpid())
    conn.close()


def test_launch_mode_parametrizes_and_gives_a_working_context(launch_mode):
    assert isinstance(launch_mode, LaunchMode)
    assert launch_mode in LAUNCH_MODES
    assert launch_mode.kwargs() == {
        "start_method": launch_mode.start_method,
        "context": launch_mode.context,
    }
    ctx = launch_mode.get_context()
    assert ctx.get_start_method() == launch_mode.start_method
    assert type(ctx).__module__.split(".")[0] == launch_mode.context
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_pid, args=(send,))
    proc.start()
    send.close()
    try:
        assert recv.poll(TIMEOUT)
        assert recv.recv() == proc.pid != os.getpid()
    finally:
        proc.join(TIMEOUT)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


@pytest.mark.launch_modes("spawn-multiprocessing")
def test_launch_modes_marker_restricts_the_set(launch_mode):
    assert launch_mode.id == "spawn-multiprocessing"


def test_launch_mode_docstring_and_docs_name_exactly_the_modes_it_runs():
    """The fixture's docstring and docs/testing.md list the ids of LAUNCH_MODES, and no others."""
    import ast
    import re
    from pathlib import Path

    import spawnkit.testing.plugin as plugin

    mode_id = re.compile(r"\b(?:spawn|fork|forkserver)-multiprocess(?:ing)?\b")
    ids = {m.id for m in LAUNCH_MODES}
    tree = ast.parse(Path(plugin.__file__).read_text())
    (func,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "launch_mode"]
    docstring = ast.get_docstring(func) or ""
    assert set(mode_id.findall(docstring)) == ids, docstring
    docs = (Path(__file__).parents[1] / "docs" / "testing.md").read_text()
    (row,) = [line for line in docs.splitlines() if line.startswith("| `launch_mode` |")]
    assert set(mode_id.findall(row)) == ids, row


def test_launch_mode_reports_why_it_cannot_run():
    assert LaunchMode("nonsense").unavailable_reason() is not None
    assert "unknown multiprocessing package" in str(
        LaunchMode("spawn", "threads").unavailable_reason()
    )
    assert LaunchMode("spawn").unavailable_reason() is None
    assert [m.id for m in LAUNCH_MODES] == [
        "spawn-multiprocessing",
        "forkserver-multiprocessing",
        "spawn-multiprocess",
    ]
