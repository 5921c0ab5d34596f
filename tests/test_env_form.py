"""``env=`` given as something other than a mapping is one ``ConfigError`` naming ``env=``.

``env=os.environ.items()``, ``env=[("X", "1")]``: every launcher failed with a bare
``AttributeError: 'dict_items' object has no attribute 'items'`` (``run_entry``: ``... has no
attribute 'get'``), naming neither the argument nor the form it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from _launcher_support import Site, make_site
from spawnkit import build_spec, spawn_with_plugins, write_launch_spec
from spawnkit.errors import ConfigError
from spawnkit.testing import run_entry


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


FORMS = [{"SKENV_X": "1"}.items(), [("SKENV_X", "1")], (("SKENV_X", "1"),), "SKENV_X=1"]


@pytest.mark.parametrize("env", FORMS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(
    "how", ["spawn_with_plugins", "traced", "bootstrap_parent", "build_spec", "write_launch_spec",
            "run_entry", "spawn_on_ray"],
)  # fmt: skip
def test_an_env_that_is_no_mapping_is_refused_naming_env(
    site: Site, tmp_path: Path, how: str, env: Any
) -> None:
    entry = site.entry("quick")
    calls: dict[str, Callable[[], Any]] = {
        "spawn_with_plugins": lambda: spawn_with_plugins(entry, namespace=site.ns, env=env),
        "traced": lambda: spawn_with_plugins(
            entry, namespace=site.ns, env=env, trace=tmp_path / "t.json"
        ),
        "bootstrap_parent": lambda: spawn_with_plugins(
            entry, namespace=site.ns, env=env, bootstrap_parent=True
        ),
        "build_spec": lambda: build_spec(entry, namespace=site.ns, env=env),
        "write_launch_spec": lambda: write_launch_spec(
            tmp_path / "spec.bin", entry, key="k" * 32, namespace=site.ns, env=env
        ),
        "run_entry": lambda: run_entry(entry, namespace=site.ns, env=env, timeout=60),
        "spawn_on_ray": lambda: _spawn_on_ray(entry, site, env),
    }
    before = _children()
    with pytest.raises(ConfigError) as info:
        calls[how]()
    assert info.value.setting == "env"
    text = str(info.value)
    assert f"env= is a {type(env).__name__}, not a mapping" in text, text
    assert "dict(pairs)" in text, text
    assert _children() - before == set(), "a worker was started before the refusal"
    assert not (tmp_path / "spec.bin").exists()


def _spawn_on_ray(entry: str, site: Site, env: Any) -> Any:
    from spawnkit.ray import spawn_on_ray

    return spawn_on_ray(entry, namespace=site.ns, env=env, nprocs=1)


def test_a_mapping_that_is_no_dict_is_taken(site: Site) -> None:
    """The control: any mapping is the accepted form (``os.environ``-like, a MappingProxy)."""
    from types import MappingProxyType

    spec = build_spec(site.entry("quick"), namespace=site.ns, env=MappingProxyType({"A": "1"}))
    assert spec.env["A"] == "1"
