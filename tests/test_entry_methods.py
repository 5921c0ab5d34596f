"""Entries and payload callables that are bound methods: the worker runs what its hooks made.

A classmethod entry (``spawn_with_plugins(Engine.serve, ...)``, ``partial(Engine.serve)``)
and a method of a module-level instance (``ENGINE.run``) went by value, since a bound method
is a new object at each attribute read: cloudpickle copied the original function (and the
instance), so every worker ran it unhooked while ``status()`` said applied.
"""

from __future__ import annotations

import functools
import importlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spawnkit import _metadata, spawn_with_plugins
from spawnkit.launch.launcher import entry_reference
from spawnkit.namespace import Namespace
from spawnkit.protocol import warm as _warm_server
from spawnkit.spec import Payload
from spawnkit.testing import run_entry, write_distribution
from spawnkit.testing._run import by_reference_name

_SCHED = """
class Engine:
    @classmethod
    def serve(cls, payload=None):
        return "serve"

    def run(self, payload=None):
        return "run"

ENGINE = Engine()

def call(payload):
    return payload["fn"]()
"""

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def around(original, *args, **kwargs):
    return original(*args, **kwargs) + "+hooked"

def register():
    hooks = get_namespace({ns!r}).hooks
    hooks.register("{pkg}.sched.Engine.serve", around, HookType.AROUND)
    hooks.register("{pkg}.sched:ENGINE.run", around, HookType.AROUND)
"""


class _Site:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        tag = f"em{uuid.uuid4().hex[:10]}"
        self.ns = Namespace(tag, env_prefix=tag.upper())
        root = tmp_path / "site"
        root.mkdir()
        monkeypatch.syspath_prepend(str(root))
        self.pkg = f"{tag}_eng"
        write_distribution(
            root,
            f"{tag}-plug",
            "1.0",
            entry_points={self.ns.config.plugin_group: {"plug": f"{self.pkg}.plugin:register"}},
            modules={
                f"{self.pkg}/__init__.py": "",
                f"{self.pkg}.sched": _SCHED,
                f"{self.pkg}.plugin": _PLUGIN.format(ns=tag, pkg=self.pkg),
            },
        )
        _metadata.clear_cache()
        self.sched: Any = importlib.import_module(f"{self.pkg}.sched")

    def launch(self, entry: Any, payload: Any = None, method: str = "spawn") -> Any:
        with spawn_with_plugins(
            entry, payload, namespace=self.ns, start_method=method, ready_timeout=60
        ) as group:
            return group.results(timeout=60)[0]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Site]:
    yield _Site(tmp_path, monkeypatch)
    _warm_server.shutdown_forkservers()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_classmethod_entry_runs_hooked(site: _Site, method: str) -> None:
    assert site.launch(site.sched.Engine.serve, method=method) == "serve+hooked"


def test_a_classmethod_in_a_partial_entry_runs_hooked(site: _Site) -> None:
    assert site.launch(functools.partial(site.sched.Engine.serve)) == "serve+hooked"


def test_a_module_level_instances_method_as_entry_runs_hooked(site: _Site) -> None:
    assert site.launch(site.sched.ENGINE.run) == "run+hooked"


def test_a_classmethod_in_a_by_value_payload_runs_hooked(site: _Site) -> None:
    # the lambda makes the payload go by value (cloudpickle)
    payload = {"fn": site.sched.Engine.serve, "by_value": lambda: None}
    assert site.launch(f"{site.pkg}.sched:call", payload) == "serve+hooked"


def test_bound_methods_go_by_reference_others_stay_by_value(site: _Site) -> None:
    """Sent as names the worker resolves after its hooks; a method of an instance no module
    holds has no name and still goes by value (the control)."""
    eng = site.sched
    assert entry_reference(eng.Engine.serve) == (f"{site.pkg}.sched:Engine.serve", None)
    assert entry_reference(eng.ENGINE.run) == (f"{site.pkg}.sched:ENGINE.run", None)
    name, by_value = entry_reference(eng.Engine().run)
    assert name == "" and isinstance(by_value, Payload)


def test_a_local_instances_method_still_runs(site: _Site) -> None:
    """The control: by value, as before; its class is found by name, so its method is hooked
    at the class level only where a hook says so (here: none, the hook is ENGINE's own)."""
    assert site.launch(site.sched.Engine().run) == "run"


def test_run_entry_sends_a_bound_method_as_a_launch_does(site: _Site) -> None:
    """``spawnkit.testing.run_entry`` named entries by identity: a method of a module-level
    instance failed it and went by value, so the test saw the original (``"run"``) where a
    real launch of the same callable ran the hook; and a method of a local instance, which a
    launch sends by value, stays so (the control)."""
    eng = site.sched
    assert by_reference_name(eng.ENGINE.run) == f"{site.pkg}.sched:ENGINE.run"
    assert by_reference_name(eng.Engine.serve) == f"{site.pkg}.sched:Engine.serve"
    assert by_reference_name(eng.Engine().run) is None
    assert run_entry(eng.ENGINE.run, namespace=site.ns, timeout=60).result == "run+hooked"
    assert site.launch(eng.ENGINE.run) == "run+hooked"
