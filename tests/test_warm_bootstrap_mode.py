"""``SPAWNKIT_WARM_BOOTSTRAP=worker``: each warm worker runs the plugins itself, wherever it is set.

The mode exists for a plugin that decides at load from its process's own spec (the README's
rank-0-only plugin): in a server that bootstraps once it gets None and decides for every rank.
It was read from the launcher's ``os.environ`` only, and by ``spawn_with_plugins`` only: given
in ``env=``, or exported for ``get_context("forkserver")``, the server still ran the plugins
once, while the WarmServerWarning advised setting it.  Real distributions, real warm servers
(stopped after each test), real workers that say in which process ``register()`` ran.
"""

from __future__ import annotations

import importlib
import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from _launcher_support import gone
from spawnkit import _metadata, get_context, spawn_with_plugins
from spawnkit.errors import ConfigError, WarmServerWarning
from spawnkit.namespace import Namespace
from spawnkit.protocol import warm
from spawnkit.testing import write_distribution

_PLUGIN = """
import os
from spawnkit.bootstrap import current_spec
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

LOADED_IN = None

def hooked():
    return "hooked"

def register():
    global LOADED_IN
    LOADED_IN = os.getpid()
    spec = current_spec()
    if spec is not None and spec.rank == 0:  # rank 0 only, decided at load
        get_namespace({ns!r}).hooks.register("{pkg}.target.f", hooked, HookType.REPLACE)
"""

_ENTRY = """
import os

def run():
    from {pkg} import plugin
    from {pkg}.target import f
    return [f(), plugin.LOADED_IN == os.getpid()]

def cfg():
    from {pkg} import cfg
    return [cfg.HOME, os.environ.get("WM_HOME"), os.environ.get("TRACEPARENT"), os.getppid()]
"""

# an engine's envs.py, huggingface_hub's constants: a variable read once, at import
_CFG = "import os\nHOME = os.environ.get('WM_HOME', 'unset')\n"


class _Site:
    def __init__(self, root: Path) -> None:
        tag = f"wm{uuid.uuid4().hex[:10]}"
        self.ns = Namespace(tag, env_prefix=tag.upper())
        self.pkg = f"{tag}_pkg"
        write_distribution(
            root,
            f"{tag}-dist",
            "1.0",
            entry_points={self.ns.config.plugin_group: {"rankzero": f"{self.pkg}.plugin:register"}},
            modules={
                f"{self.pkg}/__init__.py": "",
                f"{self.pkg}.plugin": _PLUGIN.format(ns=tag, pkg=self.pkg),
                f"{self.pkg}.target": "def f():\n    return 'orig'\n",
                f"{self.pkg}.entry": _ENTRY.format(pkg=self.pkg),
                f"{self.pkg}.cfg": _CFG,
            },
        )
        _metadata.clear_cache()

    @property
    def entry(self) -> str:
        return f"{self.pkg}.entry:run"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Site]:
    monkeypatch.delenv(warm.MODE_VAR, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield _Site(tmp_path)
    warm.shutdown_forkservers()  # every server a test started, stopped


def _launch(site: _Site, env: dict[str, str]) -> tuple[list[Any], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with spawn_with_plugins(
            site.entry, namespace=site.ns, nprocs=2, start_method="forkserver", env=env,
            ready_timeout=60, join_timeout=60,
        ) as group:  # fmt: skip
            results = list(group.results(timeout=60))
    said = [str(w.message) for w in caught if issubclass(w.category, WarmServerWarning)]
    return results, said


def test_worker_mode_in_env_runs_the_plugins_in_each_worker(site: _Site) -> None:
    results, said = _launch(site, {warm.MODE_VAR: "worker"})
    # each rank ran register() itself, with its own spec: the hook on rank 0 only
    assert results == [["hooked", True], ["orig", True]], results
    assert said == []


def test_env_wins_over_the_launchers_mode(site: _Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """As for a namespace's variables: ``env=`` is what the workers see."""
    monkeypatch.setenv(warm.MODE_VAR, "worker")
    results, said = _launch(site, {warm.MODE_VAR: "server"})
    assert results == [["orig", False], ["orig", False]], results  # the server ran it once
    (line,) = said
    assert f"set {warm.MODE_VAR}=worker" in line, line  # where the advice applies, it is given


def test_a_bad_mode_in_env_is_refused_before_a_server_starts(site: _Site) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError) as info:
        _launch(site, {warm.MODE_VAR: "workers"})
    assert info.value.setting == warm.MODE_VAR
    assert f"{warm.MODE_VAR}='workers' (in env=)" in str(info.value)
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not [p for p in started if not gone(p)], "a server started before the refusal"


def test_get_context_forkserver_honours_the_exported_mode(
    site: _Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm.MODE_VAR, "worker")
    run = importlib.import_module(f"{site.pkg}.entry").run
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = get_context("forkserver", namespace=site.ns)
        with ctx.Pool(1) as pool:
            # the child ran register() itself, with its own spec (a context's: rank 0)
            assert pool.apply(run) == ["hooked", True]
            assert pool.apply(os.getppid) != os.getpid()  # forked from a warm server
    assert not [w for w in caught if issubclass(w.category, WarmServerWarning)]


def test_get_context_refuses_a_bad_mode_before_a_server_starts(
    site: _Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm.MODE_VAR, "per-worker")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError, match=f"{warm.MODE_VAR}='per-worker': use") as info:
        get_context("forkserver", namespace=site.ns)
    assert info.value.setting == warm.MODE_VAR
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not [p for p in started if not gone(p)], "a server started before the refusal"


def _launch_cfg(site: _Site, env: dict[str, str]) -> list[Any]:
    with warnings.catch_warnings():  # the rank-0 plugin in a server: not this test's concern
        warnings.simplefilter("ignore", WarmServerWarning)
        with spawn_with_plugins(
            f"{site.pkg}.entry:cfg", namespace=site.ns, nprocs=2, start_method="forkserver",
            preload=(f"{site.pkg}.cfg",), env=env, ready_timeout=60, join_timeout=60,
        ) as group:  # fmt: skip
            return list(group.results(timeout=60))


@pytest.mark.parametrize("mode", ["server", "worker"])
def test_a_preload_reads_env_at_import_in_either_mode(site: _Site, mode: str) -> None:
    """Under ``worker`` the server ran no bootstrap, so it imported its preloads without
    ``env=``: a constant read at import (``HF_HOME``, an engine's ``envs.py``, torch's
    ``OMP_NUM_THREADS``) was the launcher's in every warm worker, while ``os.environ`` there,
    server mode and spawned workers had ``env=``'s."""
    results = _launch_cfg(site, {warm.MODE_VAR: mode, "WM_HOME": "/data/one"})
    assert [r[:2] for r in results] == [["/data/one", "/data/one"]] * 2, results
    # another env= is another server (its preloads read it), as in server mode
    again = _launch_cfg(site, {warm.MODE_VAR: mode, "WM_HOME": "/data/two"})
    assert [r[:2] for r in again] == [["/data/two", "/data/two"]] * 2, again
    assert again[0][3] != results[0][3]


def test_worker_mode_keeps_one_server_for_launches_differing_per_launch_only(
    site: _Site,
) -> None:
    """Started with ``env=`` under ``worker``, the server is not keyed on what differs every
    launch (the run's id, a W3C trace context): each launch forks from the same server, and
    each worker sets its own launch's value."""
    parents, seen = set(), []
    for i in (1, 2):
        parent = f"00-{i:032x}-{i:016x}-01"
        env = {warm.MODE_VAR: "worker", "WM_HOME": "/data/one", "TRACEPARENT": parent}
        results = _launch_cfg(site, env)
        parents |= {r[3] for r in results}
        seen += [(r[0], r[2]) for r in results]
    assert len(parents) == 1, parents
    expected = [("/data/one", f"00-{i:032x}-{i:016x}-01") for i in (1, 1, 2, 2)]
    assert seen == expected, seen
