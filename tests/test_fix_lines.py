"""Issue 21 item 5: every error on the launch path names a knob its user can change.

A ``spawn_with_plugins`` (or CLI) user never calls ``apply_hooks(strict=False)``;
the fix must name the variable, the argument or the flag they do have.  Each
case below triggers its real path (real distributions, real spawned workers
where only the worker can know) and checks the message names that knob; for
``HookApplyError`` the knob is also shown to work.
"""

from __future__ import annotations

import textwrap
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spawnkit import _metadata, spawn_with_plugins
from spawnkit.errors import (
    ChildRaisedError,
    ConfigError,
    HookApplyError,
    PlatformConflictError,
    PlatformNotFoundError,
    PlatformUnavailableError,
    PluginError,
    SpawnkitError,
)
from spawnkit.namespace import Namespace
from spawnkit.protocol import warm as _warm_server
from spawnkit.testing import write_distribution

TIMEOUT = 120


class Case:
    """A namespace with real distributions on a private site directory."""

    def __init__(self, root: Path) -> None:
        self.tag = f"fx{uuid.uuid4().hex[:8]}"
        self.ns = Namespace(self.tag, env_prefix=self.tag.upper())
        self.root = root
        self.var = self.ns.config

    def plugin(self, name: str, body: str, dist: str | None = None) -> None:
        pkg = f"{self.tag}_{name}"
        write_distribution(
            self.root,
            dist or f"{pkg}-dist",
            "1.0",
            entry_points={self.ns.config.plugin_group: {name: f"{pkg}:register"}},
            modules={pkg: f"import spawnkit\n\ndef register():\n{textwrap.indent(body, '    ')}\n"},
        )
        _metadata.clear_cache()

    def platform(self, name: str, active: bool) -> None:
        pkg = f"{self.tag}_{name}"
        write_distribution(
            self.root,
            f"{pkg}-dist",
            "1.0",
            entry_points={self.ns.config.platform_group: {name: f"{pkg}:activate"}},
            modules={
                pkg: f"def activate():\n    return {f'{pkg}.p:P' if active else None!r}\n",
                f"{pkg}.p": (
                    "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
                    f"class P(Platform):\n    _enum = PlatformEnum.OOT\n"
                    f"    device_name = {name!r}\n    device_type = {name!r}\n"
                ),
            },
        )
        _metadata.clear_cache()

    def launch(self, **kwargs: Any) -> list[Any]:
        with spawn_with_plugins(
            "os:getpid",
            namespace=self.ns,
            ready_timeout=TIMEOUT,
            join_timeout=TIMEOUT,
            **kwargs,
        ) as group:
            return group.results(timeout=TIMEOUT)


@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    _metadata.clear_cache()
    yield Case(root)
    _metadata.clear_cache()
    _warm_server.shutdown_forkservers()


_BAD_TARGET = (
    "spawnkit.get_namespace({tag!r}).hooks.register('json.no_such_fn', lambda: 1, 'REPLACE')"
)


def _hook_apply(c: Case) -> tuple[BaseException, str]:
    c.plugin("bad", _BAD_TARGET.format(tag=c.tag))
    with pytest.raises(ChildRaisedError) as info:
        c.launch()
    assert isinstance(info.value.child_exception, HookApplyError)
    return info.value, f"{c.var.lenient_var}=1"


def _plugin_raised(c: Case) -> tuple[BaseException, str]:
    c.plugin("boom", "raise RuntimeError('boom')")
    with pytest.raises(ChildRaisedError) as info:
        c.launch()
    assert isinstance(info.value.child_exception, PluginError)
    return info.value, f"{c.var.lenient_var}=1"


def _unknown_plugin_name(c: Case) -> tuple[BaseException, str]:
    c.plugin("tracer", "pass")
    with pytest.raises(PluginError) as info:
        c.launch(env={c.var.plugins_var: "tracr"})
    return info.value, f"{c.var.lenient_var}=1"


def _duplicate_plugin_name(c: Case) -> tuple[BaseException, str]:
    c.plugin("dup", "pass", dist="dup-one")
    pkg = f"{c.tag}_dup2"
    write_distribution(
        c.root,
        "dup-two",
        "1.0",
        entry_points={c.ns.config.plugin_group: {"dup": f"{pkg}:register"}},
        modules={pkg: "def register():\n    pass\n"},
    )
    _metadata.clear_cache()
    with pytest.raises(PluginError) as info:
        c.launch()
    return info.value, f"{c.var.lenient_var}=1"


def _platform_not_found(c: Case) -> tuple[BaseException, str]:
    with pytest.raises(PlatformNotFoundError) as info:
        c.launch(env={c.var.platform_var: "nope"})
    return info.value, f"{c.var.platform_var}='nope' (in env=)"


def _platform_conflict(c: Case) -> tuple[BaseException, str]:
    c.platform("deva", True)
    c.platform("devb", True)
    with pytest.raises(PlatformConflictError) as info:
        c.launch()
    return info.value, f"Set {c.var.platform_var}"


def _platform_unavailable(c: Case) -> tuple[BaseException, str]:
    c.platform("devc", False)
    with pytest.raises(PlatformUnavailableError) as info:
        c.launch(env={c.var.platform_var: "devc"})
    return info.value, f"unset {c.var.platform_var}"


def _bad_guard_value(c: Case) -> tuple[BaseException, str]:
    with pytest.raises(ConfigError) as info:
        c.launch(env={c.var.guard_var: "warnn"})
    return info.value, c.var.guard_var


def _bad_conflict_policy(c: Case) -> tuple[BaseException, str]:
    with pytest.raises(ConfigError) as info:
        c.launch(env={c.var.hook_conflicts_var: "eror"})
    return info.value, c.var.hook_conflicts_var


def _hook_conflict(c: Case) -> tuple[BaseException, str]:
    body = (
        f"ns = spawnkit.get_namespace({c.tag!r})\n"
        "ns.hooks.register('json.dumps', lambda *a, **k: 1, 'REPLACE')\n"
        "ns.hooks.register('json.dumps', lambda *a, **k: 2, 'REPLACE')"
    )
    c.plugin("twice", body)
    with pytest.raises(ChildRaisedError) as info:
        c.launch(env={c.var.hook_conflicts_var: "error"})
    return info.value, f"{c.var.hook_conflicts_var}=warn"


def _strict_env(c: Case) -> tuple[BaseException, str]:
    with pytest.raises(ConfigError) as info:
        c.launch(env={c.var.strict_env_var: "1", f"{c.ns.env_prefix}_PLUGIN": "x"})
    return info.value, f"unset {c.var.strict_env_var}"


def _ready_timeout(c: Case) -> tuple[BaseException, str]:
    c.plugin("slow", "import time\ntime.sleep(60)")
    with pytest.raises(SpawnkitError) as info:  # noqa: SIM117
        with spawn_with_plugins("os:getpid", namespace=c.ns, ready_timeout=2) as group:
            group.wait_ready()
    return info.value, "ready_timeout= to spawn_with_plugins()"


PATHS: dict[str, Callable[[Case], tuple[BaseException, str]]] = {
    "HookApplyError in the worker": _hook_apply,
    "plugin raised in the worker": _plugin_raised,
    "unknown name in <PREFIX>_PLUGINS": _unknown_plugin_name,
    "two distributions, one plugin name": _duplicate_plugin_name,
    "unknown platform in env=": _platform_not_found,
    "two platforms activated": _platform_conflict,
    "named platform unavailable": _platform_unavailable,
    "bad <PREFIX>_IMPORT_GUARD": _bad_guard_value,
    "bad <PREFIX>_HOOK_CONFLICTS": _bad_conflict_policy,
    "hook conflict refused": _hook_conflict,
    "<PREFIX>_STRICT_ENV refusal": _strict_env,
    "ready_timeout": _ready_timeout,
}


@pytest.mark.parametrize("path", list(PATHS))
def test_the_error_names_a_knob_the_user_has(case: Case, path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the paths' own warnings are tested elsewhere
        err, knob = PATHS[path](case)
    assert knob in str(err), f"{path}: {knob!r} not in\n{err}"
    assert "apply_hooks(strict=False) to" not in str(err)  # never the knob alone


def test_the_lenient_knob_hook_apply_error_names_really_runs_the_worker(case: Case) -> None:
    case.plugin("bad", _BAD_TARGET.format(tag=case.tag))
    (pid,) = case.launch(env={case.var.lenient_var: "1"})
    assert isinstance(pid, int)
