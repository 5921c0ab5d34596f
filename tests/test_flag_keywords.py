"""A keyword documented as on/off takes ``True`` or ``False`` (or None where documented).

Each was read by its truth value, so a string turned it on whatever it said:
``spawn_with_plugins(prefix_output="no")`` prefixed every worker line,
``use_cpu_engine("no")`` set the CPU-engine variable to ``1``, ``register(...,
optional="false")`` made a hook optional, ``Payload.capture(obj, by_value="yes")`` took
the automatic choice (by reference).  Each is now a typed error naming the argument.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from _launcher_support import Site, make_site
from spawnkit import Payload, spawn_with_plugins
from spawnkit.errors import ConfigError, HookRegistrationError
from spawnkit.hooks.registry import HookRegistry
from spawnkit.namespace import Namespace
from spawnkit.testing import make_venv, write_distribution
from spawnkit.testing._env import PlatformSelection

WRONG = ["no", "false", "0", 1, 0.0, b"", [False]]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("value", WRONG, ids=repr)
@pytest.mark.parametrize("name", ["prefix_output", "bootstrap_parent"])
def test_a_launch_flag_that_is_no_bool_is_refused_before_any_worker(
    site: Site, name: str, value: Any
) -> None:
    before = _children()
    with pytest.raises(ConfigError) as info:
        spawn_with_plugins(site.entry("quick"), namespace=site.ns, **{name: value})
    assert info.value.setting == name
    assert f"spawn_with_plugins({name}={value!r}): must be True or False" in str(info.value)
    assert _children() - before == set(), "a worker was started before the refusal"


@pytest.mark.parametrize("call", ["spawn_on_ray", "spawn_spec_on_ray"])
def test_the_ray_launchers_refuse_a_prefix_output_that_is_no_bool(site: Site, call: str) -> None:
    from spawnkit import build_spec
    from spawnkit.ray import spawn_on_ray, spawn_spec_on_ray

    with pytest.raises(ConfigError, match=rf"{call}\(prefix_output='no'\)"):
        if call == "spawn_on_ray":
            spawn_on_ray(site.entry("quick"), namespace=site.ns, nprocs=1, prefix_output="no")
        else:
            template = build_spec(site.entry("quick"), namespace=site.ns)
            spawn_spec_on_ray(template, nprocs=1, prefix_output="no")


def test_a_hook_option_that_is_no_bool_is_refused_at_registration() -> None:
    reg = HookRegistry(name=f"flags-{uuid.uuid4().hex[:8]}")
    for option in ("optional", "on_import"):
        with pytest.raises(HookRegistrationError, match=rf"{option}='false'\): must be True"):
            reg.register("json.dumps", lambda result, *a, **k: result, **{option: "false"})
    assert not reg.registrations()  # nothing was recorded
    with pytest.raises(ConfigError, match=r"apply_hooks\(strict='no'\)"):
        reg.apply_hooks(strict="no")


def test_the_plugin_managers_flags_are_refused_unless_bools() -> None:
    tag = f"flg{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigError, match=r"strict_plugins='no'\): must be True or False"):
        Namespace(tag, tag.upper(), strict_plugins="no")
    plugins = Namespace(tag, tag.upper()).plugins
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("select(lenient='0')", lambda: plugins.select(lenient="0")),
        ("load(lenient='0')", lambda: plugins.load(lenient="0")),
        ("load(apply_deferred='no')", lambda: plugins.load(apply_deferred="no")),
        ("apply(strict='no')", lambda: plugins.apply(strict="no")),
    ]
    for shown, call in calls:
        with pytest.raises(ConfigError) as info:
            call()
        assert f"{shown}: must be True or False" in str(info.value), info.value
    assert plugins.report is None or not plugins.report.loaded  # nothing was loaded


def test_payload_capture_refuses_a_by_value_that_is_no_bool() -> None:
    with pytest.raises(ConfigError, match=r"by_value='yes'\): must be True or False, or None"):
        Payload.capture({"a": 1}, by_value="yes")
    assert Payload.capture({"a": 1}, by_value=None).by_value is False  # the documented None


def test_the_testing_helpers_refuse_flags_that_are_no_bools(tmp_path: Path) -> None:
    tag = f"flh{uuid.uuid4().hex[:8]}"
    ns = Namespace(tag, tag.upper())
    selection = PlatformSelection(ns)
    try:
        with pytest.raises(ConfigError, match=r"use_cpu_engine\(enabled='no'\)"):
            selection.use_cpu_engine("no")
        assert ns.config.cpu_engine_var not in os.environ  # before: set to "1"
    finally:
        selection.undo()
    for name in ("add_to_sys_path", "validate"):
        with pytest.raises(ConfigError, match=rf"write_distribution\({name}='no'\)"):
            write_distribution(tmp_path / name, "flag-dist", **{name: "no"})
        assert not (tmp_path / name).exists()  # nothing written
    with pytest.raises(ConfigError, match=r"make_venv\(inherit='no'\)"):
        make_venv(tmp_path / "venv", inherit="no")
    assert not (tmp_path / "venv").exists()


def test_spawnkit_run_main_refuses_a_restartable_that_is_no_bool() -> None:
    from spawnkit.run import main

    with pytest.raises(ConfigError, match=r"main\(restartable='no'\)"):
        main(["--spec", "/nonexistent"], restartable="no")


@pytest.mark.parametrize("policy", ["ERROR", "errors", "Ignore", "strict", None])
def test_apply_hooks_refuses_a_conflict_policy_it_would_read_as_warn(policy: Any) -> None:
    """``apply_hooks(conflicts="ERROR")`` warned and applied both REPLACE hooks: every value
    but ``"error"``/``"ignore"`` was read as ``"warn"``."""
    import json
    import warnings

    from spawnkit.errors import HookConflictError
    from spawnkit.hooks.types import HookType

    reg = HookRegistry(name=f"flags-{uuid.uuid4().hex[:8]}")
    reg.register("json.dumps", lambda *a, **k: "one", HookType.REPLACE)
    reg.register("json.dumps", lambda *a, **k: "two", HookType.REPLACE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: HookConflictWarning, then applied
        with pytest.raises(ConfigError, match=rf"apply_hooks\(conflicts={policy!r}\)"):
            reg.apply_hooks(conflicts=policy)
    assert json.dumps(1) == "1"  # nothing was applied
    # the control: "error" refuses the conflict, naming the argument (before: "because =error")
    with pytest.raises(HookConflictError, match=r"refused because conflicts='error'") as info:
        reg.apply_hooks(conflicts="error")
    assert "pass conflicts='warn' to run with them" in str(info.value)
    assert json.dumps(1) == "1"


def test_apply_hooks_refuses_one_clean_module_name_as_a_string() -> None:
    reg = HookRegistry(name=f"flags-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ConfigError, match=r"clean_modules='engine'\): one string.*\('engine',\)"):
        reg.apply_hooks(clean_modules="engine")
