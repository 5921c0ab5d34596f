"""The decision table and every validation error, with real distributions on sys.path."""

from __future__ import annotations

import json
import multiprocessing
import sys
import threading
from typing import Any

import pytest

from _platform_dists import PLATFORM_CLASS, PluginSite
from spawnkit._once import OnceState
from spawnkit.errors import (
    HookRegistrationError,
    PlatformConflictError,
    PlatformContractError,
    PlatformError,
    PlatformNotFoundError,
    PlatformPluginError,
    PlatformUnavailableError,
)
from spawnkit.platforms import Platform
from spawnkit.platforms._probes import Probe
from spawnkit.platforms.builtin import CpuPlatform, CudaPlatform, RocmPlatform, XpuPlatform


def _simulate(site: PluginSite, **available: bool) -> None:
    """Pretend accelerators exist: this machine has none, and probes are the only way to say so."""
    for name, value in available.items():
        site.pm._probes[name] = lambda value=value, name=name: Probe(value, f"test: {name}")


# ------------------------------------------------------------ selected by name
def test_selected_name_not_found_lists_available_and_how_to_install(site: PluginSite) -> None:
    site.add_platform("alpha", dist="alpha-dist", version="2.1")
    site.monkeypatch.setenv(site.var, "alpah")
    with pytest.raises(PlatformNotFoundError) as info:
        site.pm.current()
    text = str(info.value)
    assert "'alpah'" in text
    assert "alpha (alpha-dist 2.1)" in text
    assert "cpu (built-in)" in text
    assert "Did you mean 'alpha'" in text
    assert "pip install" in text and site.group in text
    assert not site.imported(site.mod("alpha"))
    assert text.count("no platform named 'alpah'") == 1  # the message, not a second copy


def test_a_platform_entry_point_with_extras_is_selected(site: PluginSite) -> None:
    """Its ``[extras]`` are no part of the attribute (they once failed it as "no attribute")."""
    pkg = site.mod("alpha")
    site.add(
        "alpha-dist",
        {"alpha": f"{pkg}:activate [cuda12]"},
        {
            f"{pkg}.__init__": f"def activate():\n    return {pkg + '.platform.Plat'!r}\n",
            f"{pkg}.platform": PLATFORM_CLASS.format(
                cls="Plat", base="Platform", enum="OOT", device="alpha"
            ),
        },
    )
    site.monkeypatch.setenv(site.var, "alpha")
    sel = site.pm.select()
    assert (sel.name, sel.kind, sel.qualname) == ("alpha", "plugin", f"{pkg}.platform.Plat")
    assert type(site.pm.current()).__module__ == f"{pkg}.platform"


def test_a_pinned_selection_is_explained_in_the_users_terms(site: PluginSite) -> None:
    site.add_platform("alpha", dist="alpha-dist")
    site.pm.set_selection("alpha", by="the launcher")
    site.pm.select()
    path = " -> ".join(site.pm.explain().path)
    assert "'alpha' chosen by the launcher" in path
    assert "set_selection" not in path


def test_selected_plugin_returning_none_is_unavailable(site: PluginSite) -> None:
    site.add_platform("alpha", activate="return None", dist="alpha-dist", version="3.0")
    site.monkeypatch.setenv(site.var, "alpha")
    with pytest.raises(PlatformUnavailableError) as info:
        site.pm.select()
    text = str(info.value)
    assert "installed" in text and "returned None" in text
    assert "alpha-dist 3.0" in text and f"{site.mod('alpha')}:activate" in text


def test_selected_plugin_loads_only_that_plugin(site: PluginSite) -> None:
    chosen = site.add_platform("alpha")
    # Importing the other plugin would fail loudly; front-loading must never touch it.
    other = site.add_platform("beta", extra="raise RuntimeError('beta must not be imported')")
    site.monkeypatch.setenv(site.var, "alpha")
    platform = site.pm.current()
    assert type(platform).__module__ == f"{chosen}.platform"
    assert site.imported(chosen)
    assert not site.imported(other)
    assert not site.imported(f"{other}.platform")
    sel = site.pm.select()
    assert (sel.name, sel.kind, sel.qualname) == ("alpha", "plugin", f"{chosen}.platform.Plat")
    outcomes = {c.name: c.outcome for c in site.pm.explain().candidates}
    assert outcomes == {"alpha": "activated", "beta": "skipped"}


@pytest.mark.parametrize("name", ["cpu", "CPU", " cpu "])
def test_selected_builtin_cpu(site: PluginSite, name: str) -> None:
    site.add_platform("alpha", extra="raise RuntimeError('not imported')")
    site.monkeypatch.setenv(site.var, name)
    platform = site.pm.current()
    assert type(platform) is CpuPlatform
    assert site.pm.select().kind == "builtin"
    assert not site.imported(site.mod("alpha"))


def test_selected_base(site: PluginSite) -> None:
    site.pm.set_selection("base")
    assert type(site.pm.current()) is Platform
    assert site.pm.select().kind == "base"


@pytest.mark.parametrize("name", ["cuda", "rocm", "xpu"])
def test_selected_builtin_is_checked_against_hardware(site: PluginSite, name: str) -> None:
    _simulate(site, **{name: False})
    site.monkeypatch.setenv(site.var, name)
    with pytest.raises(PlatformUnavailableError) as info:
        site.pm.select()
    assert f"built-in {name!r}" in str(info.value) and f"test: {name}" in str(info.value)


@pytest.mark.parametrize(
    ("name", "cls"), [("cuda", CudaPlatform), ("rocm", RocmPlatform), ("xpu", XpuPlatform)]
)
def test_selected_builtin_present(site: PluginSite, name: str, cls: type) -> None:
    _simulate(site, **{name: True})
    site.monkeypatch.setenv(site.var, name)
    assert type(site.pm.current()) is cls


def test_real_cuda_probe_without_gpu(site: PluginSite) -> None:
    from spawnkit.platforms._probes import cuda_available

    if cuda_available():
        pytest.skip("this machine has a CUDA GPU")
    site.monkeypatch.setenv(site.var, "cuda")
    with pytest.raises(PlatformUnavailableError, match="not available"):
        site.pm.select()


# ----------------------------------------------------------------- auto mode
def test_auto_zero_activated_cpu_engine(site: PluginSite) -> None:
    site.add_platform("alpha", activate="return None")
    _simulate(site, cuda=True)  # the CPU engine wins even over a present GPU
    site.monkeypatch.setenv(site.cpu_var, "1")
    assert type(site.pm.current()) is CpuPlatform
    assert site.pm.explain().probes == []  # no probe ran


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        ({"cuda": True, "rocm": True, "xpu": True}, CudaPlatform),
        ({"cuda": False, "rocm": True, "xpu": True}, RocmPlatform),
        ({"cuda": False, "rocm": False, "xpu": True}, XpuPlatform),
        ({"cuda": False, "rocm": False, "xpu": False}, Platform),
    ],
)
def test_auto_zero_activated_probe_order(
    site: PluginSite, present: dict[str, bool], expected: type
) -> None:
    site.add_platform("alpha", activate="return None")
    _simulate(site, **present)
    site.monkeypatch.setenv(site.cpu_var, "0")
    assert type(site.pm.current()) is expected
    probed = [p.name for p in site.pm.explain().probes]
    order = ["cuda", "rocm", "xpu"]
    stop = order.index(expected.device_name) + 1 if expected is not Platform else 3
    assert probed == order[:stop]  # later probes do not run once one succeeds


def test_auto_one_activated_wins_over_cpu_engine(site: PluginSite) -> None:
    pkg = site.add_platform("alpha", dist="alpha-dist", version="1.2")
    site.add_platform("beta", activate="return None")
    site.monkeypatch.setenv(site.cpu_var, "1")
    platform = site.pm.current()
    assert type(platform).__module__ == f"{pkg}.platform"
    assert platform.is_out_of_tree()
    assert site.pm.selected_dist() == "alpha-dist"
    sel = site.pm.select()
    assert (sel.dist, sel.version, sel.kind) == ("alpha-dist", "1.2", "plugin")


def test_auto_many_activated_is_a_conflict(site: PluginSite) -> None:
    site.add_platform("alpha", dist="alpha-dist", version="1.0")
    site.add_platform("beta", dist="beta-dist", version="2.0")
    with pytest.raises(PlatformConflictError) as info:
        site.pm.select()
    text = str(info.value)
    assert "2 platform plugins activated" in text
    assert "'alpha'" in text and "alpha-dist 1.0" in text
    assert "'beta'" in text and "beta-dist 2.0" in text
    assert site.var in text


# ---------------------------------------------------------------- validation
def test_duplicate_entry_point_names(site: PluginSite) -> None:
    site.add_platform("alpha", dist="one-dist", version="1.0")
    site.add("two-dist", {"alpha": f"{site.mod('two')}:activate"}, {site.mod("two"): ""}, "2.0")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    text = str(info.value)
    assert "named 'alpha'" in text and "one-dist 1.0" in text and "two-dist 2.0" in text
    assert f"{site.mod('two')}:activate" in text
    assert not site.imported(site.mod("two"))  # metadata only
    site.pm.reset_for_tests()
    site.monkeypatch.setenv(site.var, "alpha")
    with pytest.raises(PlatformPluginError, match="named 'alpha'"):
        site.pm.select()


@pytest.mark.parametrize("selected", ["cpu", "gamma", "auto"])
def test_a_duplicate_name_is_refused_whichever_platform_is_selected(
    site: PluginSite, selected: str
) -> None:
    """README: duplicate names are each a PlatformPluginError. With another platform selected
    (a built-in, or a third plugin) the duplicate was not looked at: the run went on, and the
    platform rule left out the general plugins of only one of the two distributions."""
    site.add_platform("dup", dist="chipa-dist", version="1.0")
    site.add("chipb-dist", {"dup": f"{site.mod('chipb')}:activate"}, {site.mod("chipb"): ""}, "2.0")
    gamma = site.add_platform("gamma", dist="gamma-dist")
    if selected != "auto":
        site.monkeypatch.setenv(site.var, selected)
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    text = str(info.value)
    assert "2 platform entry points are named 'dup'" in text
    assert "chipa-dist 1.0" in text and "chipb-dist 2.0" in text
    assert f"whichever platform {site.var} selects" in text
    assert "Uninstall one of the distributions or rename its entry point" in text
    assert not site.imported(site.mod("chipb"))  # metadata only
    if selected != "auto":
        assert not site.imported(gamma)  # refused before the selected plugin is imported


def test_a_unique_name_beside_another_selection_is_not_refused(site: PluginSite) -> None:
    """Control: two distributions, two names, a built-in selected."""
    site.add_platform("dup", dist="chipa-dist")
    site.add_platform("other", dist="chipb-dist")
    site.monkeypatch.setenv(site.var, "cpu")
    assert site.pm.select().name == "cpu"


@pytest.mark.parametrize("reserved", ["cuda", "cpu", "base", "Xpu"])
def test_reserved_entry_point_names(site: PluginSite, reserved: str) -> None:
    site.add_platform(reserved, dist="sneaky-dist", version="0.3")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    text = str(info.value)
    assert "reserved" in text and "sneaky-dist 0.3" in text and f"{reserved!r}" in text
    site.pm.reset_for_tests()
    site.monkeypatch.setenv(site.var, reserved)
    with pytest.raises(PlatformPluginError, match="reserved"):
        site.pm.select()


@pytest.mark.parametrize("value", ["42", "''", "'   '", "['a.B']", "True"])
@pytest.mark.parametrize("selected", [False, True])
def test_activate_returning_a_non_string(site: PluginSite, value: str, selected: bool) -> None:
    site.add_platform("alpha", activate=f"return {value}", dist="alpha-dist", version="1.1")
    if selected:
        site.monkeypatch.setenv(site.var, "alpha")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    text = str(info.value)
    assert "non-empty class qualname" in text and "alpha-dist 1.1" in text
    assert f"{site.mod('alpha')}:activate" in text


@pytest.mark.parametrize("selected", [False, True])
def test_activate_raising_is_chained_and_never_falls_back(site: PluginSite, selected: bool) -> None:
    site.add_platform("alpha", activate="raise OSError('driver exploded')", dist="alpha-dist")
    site.add_platform("beta", activate="return None")
    site.monkeypatch.setenv(site.cpu_var, "1")  # a fallback would be available
    if selected:
        site.monkeypatch.setenv(site.var, "alpha")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.current()
    assert isinstance(info.value.__cause__, OSError)
    assert "driver exploded" in str(info.value) and "alpha-dist 1.0" in str(info.value)
    if not selected:
        assert "wrong hardware" in str(info.value)


def test_entry_point_module_import_error(site: PluginSite) -> None:
    site.add("broken-dist", {"alpha": f"{site.mod('nope')}:activate"}, {}, "0.9")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert "broken-dist 0.9" in str(info.value)


def test_entry_point_not_callable(site: PluginSite) -> None:
    site.add(
        "odd-dist", {"alpha": f"{site.mod('odd')}:activate"}, {site.mod("odd"): "activate = 3"}
    )
    with pytest.raises(PlatformPluginError, match="not a callable"):
        site.pm.select()


def test_qualname_that_does_not_resolve(site: PluginSite) -> None:
    site.add_platform("alpha", activate="return 'nowhere_pkg_zz.platform.Plat'")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    assert "does not resolve" in str(info.value)
    assert "'nowhere_pkg_zz.platform.Plat'" in str(info.value)
    assert info.value.__cause__ is not None


def test_class_not_subclassing_the_namespace_base(site: PluginSite) -> None:
    site.add_platform("alpha", cls_body="class Plat:\n    device_name = 'x'\n")
    with pytest.raises(PlatformPluginError, match="not a subclass"):
        site.pm.select()


def test_out_of_tree_class_without_oot_enum(site: PluginSite) -> None:
    site.add_platform("alpha", enum="CUDA", dist="alpha-dist", version="4.0")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    assert "PlatformEnum.OOT" in str(info.value) and "alpha-dist 4.0" in str(info.value)


def test_plugin_class_needs_device_names(site: PluginSite) -> None:
    body = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_type = 'x'\n"
    )
    site.add_platform("alpha", cls_body=body)
    with pytest.raises(PlatformPluginError, match="device_name"):
        site.pm.select()


def test_contract_violation_in_plugin_module_is_reported_with_plugin(site: PluginSite) -> None:
    body = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'x'\n"
        "    device_type = 'x'\n    def get_devce_name(self, device_id=0):\n        return 'x'\n"
    )
    site.add_platform("alpha", cls_body=body, dist="alpha-dist")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    assert "get_devce_name" in str(info.value) and "alpha-dist" in str(info.value)
    assert "breaks the platform interface" in str(info.value)
    assert isinstance(info.value.__cause__, PlatformContractError)


_PLAIN_MIXIN = """
from spawnkit.platforms.interface import Platform, PlatformEnum

class NpuCommon:  # the vendor's helpers, shared by its platform classes: no platform class
    def get_default_attention_backed(self):  # misspelt
        return "ascend_attn"

    def support_cuda_graphs(self):  # misspelt (plural)
        return True

    def get_torch_distributed_backend_str(self, group):  # callers never pass group
        return "hccl"

class Plat(NpuCommon, Platform):
    _enum = PlatformEnum.OOT
    device_name = "npu"
    device_type = "npu"
"""

_PLAIN_MIXIN_OK = """
import abc
from spawnkit.platforms.interface import Platform, PlatformEnum

class NpuCommon(abc.ABC):  # interface names spelt right, private helpers
    def get_default_attention_backend(self):
        return self._attn()

    def _attn(self):
        return "ascend_attn"

class Gen1(NpuCommon, Platform):
    _enum = PlatformEnum.OOT
    device_name = "npu"
    device_type = "npu"

class Plat(Gen1):  # NpuCommon comes through a platform class, checked there
    pass
"""


def test_a_plain_mixins_names_are_checked_as_the_class_own(site: PluginSite) -> None:
    """A vendor's plain helper base (no platform class) was never checked: a misspelt method or
    an incompatible signature there was accepted and the interface's default ran."""
    site.add_platform("npu", cls_body=_PLAIN_MIXIN, dist="npu-dist")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    text = str(info.value)
    assert isinstance(info.value.__cause__, PlatformContractError) and "npu-dist" in text
    assert "breaks the platform interface in 3 places" in text, text
    assert ".Plat.get_default_attention_backed (in " in text and ".NpuCommon)" in text
    assert "Did you mean 'get_default_attention_backend'" in text
    assert "Did you mean 'support_cuda_graph'" in text
    assert "get_torch_distributed_backend_str(self, group) (in " in text
    assert "extra parameter 'group' has no default" in text


def test_a_plain_mixin_with_interface_methods_and_helpers_is_accepted(site: PluginSite) -> None:
    """Control: interface names spelt right and private helpers in a plain base (an ``abc.ABC``
    one too) are fine, and a class deriving from a checked platform class is not re-checked."""
    site.add_platform("npu", cls_body=_PLAIN_MIXIN_OK)
    platform = site.pm.current()
    assert platform.get_default_attention_backend() == "ascend_attn"


@pytest.mark.parametrize("between", [False, True], ids=["the class", "its vendor base"])
def test_a_plugin_class_declared_contract_true_is_refused(
    site: PluginSite, between: bool
) -> None:
    """``contract=True`` (the contract error's hint once suggested it) made every public name
    a new interface name: a misspelt override was accepted and the interface's method ran."""
    body = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        + ("class Vendor(Platform, contract=True):\n" if between else "")
        + ("class Plat(Platform, contract=True):\n" if not between else "")
        + "    def get_default_attention_backed(self):\n        return 'x_attn'\n"
        + ("class Plat(Vendor):\n" if between else "")
        + "    _enum = PlatformEnum.OOT\n    device_name = 'x'\n    device_type = 'x'\n"
    )
    site.add_platform("alpha", cls_body=body, dist="alpha-dist")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    text = str(info.value)
    assert "is declared `contract=True`" in text and "alpha-dist" in text
    assert "get_default_attention_backed (did you mean 'get_default_attention_backend'?)" in text
    assert "remove contract=True" in text


_REGISTERS = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace
get_namespace({tag!r}).hooks.register("json.dumps", "json:loads", HookType.REPLACE)
"""


@pytest.mark.parametrize("selected", [False, True])
def test_a_general_plugin_declared_in_the_platform_group_is_refused_naming_the_group(
    site: PluginSite, selected: bool
) -> None:
    # Before: called as activate() in the launcher, its hooks registered there and returning
    # None ("no hardware"): no worker ever applied them, with nothing said.
    site.add_platform("shims", activate=_REGISTERS.format(tag=site.tag) + "return None")
    if selected:
        site.monkeypatch.setenv(site.var, "shims")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.current()
    text = str(info.value)
    assert "platform plugin 'shims'" in text and "registered it from its activate()" in text
    assert f"general plugin group {site.ns.config.plugin_group!r}" in text, text
    assert "target 'json.dumps'" in text and "None.." not in text
    assert isinstance(info.value.__cause__, HookRegistrationError)
    assert site.ns.hooks.registered_targets() == []


_PROVIDES = """
import types
from spawnkit.namespace import get_namespace
get_namespace({tag!r}).hooks.provide_module("fastkern_{tag}", factory=types.ModuleType)
"""


def test_a_general_plugin_providing_a_module_from_the_platform_group_is_refused(
    site: PluginSite,
) -> None:
    # Before: provide_module() from activate() was kept in the launcher's registry and its
    # None read as "no hardware": no worker ever placed the module, with nothing said.
    site.add_platform("shim", activate=_PROVIDES.format(tag=site.tag) + "return None")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.current()
    text = str(info.value)
    assert "platform plugin 'shim'" in text and "called it from its activate()" in text, text
    assert f"cannot provide_module('fastkern_{site.tag}')" in text, text
    assert "the module would never be provided in a worker" in text
    assert f"general plugin group {site.ns.config.plugin_group!r}" in text, text
    assert isinstance(info.value.__cause__, HookRegistrationError)
    assert site.ns.hooks.status() == []


def test_a_platform_package_providing_a_module_as_it_is_imported_is_not_refused(
    site: PluginSite,
) -> None:
    site.add_platform("dev", extra=_PROVIDES.format(tag=site.tag), activate="return None")
    assert site.pm.current().device_name == ""
    assert [row.target for row in site.ns.hooks.status()] == [f"fastkern_{site.tag}"]


@pytest.mark.parametrize("answer", ["None", "class"])
def test_a_platform_package_registering_hooks_as_it_is_imported_is_not_refused(
    site: PluginSite, answer: str
) -> None:
    """Its worker imports the package again to build the platform, registering them there."""
    pkg = site.mod("dev")
    body = f"return {pkg + '.platform.Plat'!r}" if answer == "class" else "return None"
    site.add_platform("dev", extra=_REGISTERS.format(tag=site.tag), activate=body)
    assert site.pm.current().device_name == ("dev" if answer == "class" else "")
    assert site.ns.hooks.registered_targets() == ["json.dumps"]


# ----------------------------------------------------------------- lifecycle
def test_resolution_once_and_thread_safe(site: PluginSite) -> None:
    extra = "import time\nCALLS = []\n"
    pkg = site.add_platform(
        "alpha",
        extra=extra,
        activate=f"CALLS.append(1)\ntime.sleep(0.2)\nreturn '{site.mod('alpha')}.platform.Plat'",
    )
    results: list[Platform] = []
    threads = [threading.Thread(target=lambda: results.append(site.pm.current())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert sys.modules[pkg].CALLS == [1]
    assert site.pm.current() is results[0]


def test_resolution_failure_is_final(site: PluginSite) -> None:
    site.add_platform("alpha")
    site.add_platform("beta")
    with pytest.raises(PlatformConflictError) as first:
        site.pm.current()
    with pytest.raises(PlatformError) as again:
        site.pm.current()
    assert again.value.__cause__ is first.value and again.value.kind == "init"
    assert "previously failed" in str(again.value) and "alpha" in str(again.value)
    with pytest.raises(PlatformError):
        site.pm.initialize()


def test_initialize_runs_init_backend_once(site: PluginSite) -> None:
    body = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "INITS = []\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'x'\n"
        "    device_type = 'x'\n    def init_backend(self):\n        INITS.append(self)\n"
    )
    pkg = site.add_platform("alpha", cls_body=body)
    p1 = site.pm.initialize()
    p2 = site.pm.initialize()
    assert p1 is p2 is site.pm.current()
    assert [p1] == sys.modules[f"{pkg}.platform"].INITS


def test_init_backend_failure_is_final_and_chained(site: PluginSite) -> None:
    body = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'x'\n"
        "    device_type = 'x'\n    def init_backend(self):\n"
        "        raise RuntimeError('runtime missing')\n"
    )
    site.add_platform("alpha", cls_body=body, dist="alpha-dist", version="5.5")
    with pytest.raises(PlatformError) as first:
        site.pm.initialize()
    assert isinstance(first.value.__cause__, RuntimeError) and first.value.kind == "init"
    assert "runtime missing" in str(first.value) and "alpha-dist 5.5" in str(first.value)
    with pytest.raises(PlatformError) as again:
        site.pm.initialize()
    assert again.value.__cause__ is first.value
    assert site.pm._init_once.state is OnceState.FAILED
    assert site.pm.current() is not None  # resolution itself succeeded


def test_constructor_failure(site: PluginSite) -> None:
    body = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class Plat(Platform):\n    _enum = PlatformEnum.OOT\n    device_name = 'x'\n"
        "    device_type = 'x'\n    def __init__(self):\n        raise ValueError('no')\n"
    )
    site.add_platform("alpha", cls_body=body, dist="alpha-dist")
    with pytest.raises(PlatformError, match="alpha-dist") as info:
        site.pm.current()
    assert isinstance(info.value.__cause__, ValueError)


def test_reentrant_resolution_from_activate_is_an_error(site: PluginSite) -> None:
    extra = f"from spawnkit.namespace import get_namespace\nNS = {site.tag!r}\n"
    site.add_platform("alpha", extra=extra, activate="get_namespace(NS).platforms.current()")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.current()
    assert isinstance(info.value.__cause__, PlatformError)
    assert "being" in str(info.value.__cause__)


def test_set_selection_pins_over_env_and_is_refused_late(site: PluginSite) -> None:
    site.add_platform("alpha")
    site.monkeypatch.setenv(site.var, "alpha")
    site.pm.set_selection("cpu")
    assert type(site.pm.current()) is CpuPlatform
    site.pm.set_selection("cpu")  # same decision: fine
    with pytest.raises(PlatformError, match="already resolved"):
        site.pm.set_selection("alpha")
    with pytest.raises(PlatformError):
        site.pm.set_selection("")


def test_set_selection_rechecks_hardware(site: PluginSite) -> None:
    site.add_platform("alpha", activate="return None")
    site.pm.set_selection("alpha")
    with pytest.raises(PlatformUnavailableError, match="set_selection"):
        site.pm.current()


def test_select_by_argument_does_not_change_current(site: PluginSite) -> None:
    _simulate(site, cuda=False, rocm=False, xpu=False)  # the same answer on a GPU machine
    site.add_platform("alpha", activate="return None")
    assert site.pm.select("cpu").name == "cpu"
    assert type(site.pm.current()) is Platform
    assert site.pm.selected_dist() is None


def test_platform_dists_is_metadata_only(site: PluginSite) -> None:
    a = site.add_platform("alpha", dist="alpha-dist", extra="raise RuntimeError('no import')")
    site.add_platform("beta", dist="beta-dist")
    assert site.pm.platform_dists() == {"alpha": "alpha-dist", "beta": "beta-dist"}
    assert not site.imported(a)


def test_explain_records_candidates_probes_path_and_winner(site: PluginSite) -> None:
    site.add_platform("alpha", activate="return None", dist="alpha-dist", version="1.0")
    _simulate(site, cuda=False, rocm=False, xpu=False)
    expl = site.pm.explain()  # runs discovery when nothing ran yet
    assert expl.winner is not None and expl.winner.kind == "base"
    assert [(c.name, c.outcome) for c in expl.candidates] == [("alpha", "none")]
    assert [p.name for p in expl.probes] == ["cuda", "rocm", "xpu"]
    assert expl.path[0] == "auto-discovery" and expl.path[-1] == "base platform"
    text = str(expl)
    assert "activate() returned None" in text and "alpha-dist 1.0" in text
    assert "winner: base" in text and site.var in text
    json.dumps(expl.to_dict())
    assert type(site.pm.current()) is Platform


def test_errors_carry_the_explanation(site: PluginSite) -> None:
    site.add_platform("alpha", dist="alpha-dist")
    site.add_platform("beta", activate="raise KeyError('k')", dist="beta-dist")
    with pytest.raises(PlatformPluginError) as info:
        site.pm.select()
    expl = site.pm.explain()
    outcomes = {c.name: c.outcome for c in expl.candidates}
    assert outcomes == {"alpha": "activated", "beta": "error"}
    # The error's own message is its first line; the explanation does not repeat it.
    assert info.value.explanation == expl.render(error=False)
    assert str(info.value).count("failed during auto-discovery") == 1
    assert "Platform discovery for namespace" in str(info.value)
    assert "KeyError" in (expl.error or "")


def test_str_of_current_platform_names_how_it_was_chosen(site: PluginSite) -> None:
    site.monkeypatch.setenv(site.cpu_var, "1")
    text = str(site.pm.current())
    assert "CpuPlatform" in text and f"{site.cpu_var}=1" in text and "builtin 'cpu'" in text


# ------------------------------------------------- parent decides, child pins
def _child_pins(config: Any, name: str, env: dict[str, str], other: str, q: Any) -> None:
    import os

    from spawnkit.namespace import Namespace

    os.environ.update(env)
    pm = Namespace.from_config(config).platforms
    try:
        pm.set_selection(name)
        p = pm.initialize()
        q.put(("ok", type(p).__module__, other in sys.modules))
    except Exception as exc:
        q.put(("error", type(exc).__name__, str(exc)))


def _run_child(site: PluginSite, name: str, env: dict[str, str], other: str) -> tuple[Any, ...]:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child_pins, args=(site.ns.config, name, env, other, q))
    proc.start()
    try:
        return tuple(q.get(timeout=60))
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)


@pytest.mark.timeout(120)
def test_spawned_child_pins_the_parents_selection(site: PluginSite) -> None:
    gate = "import os\n"
    chosen = site.add_platform(
        "alpha",
        extra=gate,
        activate=f"return '{site.mod('alpha')}.platform.Plat' "
        "if os.environ.get('ALPHA_HW') == '1' else None",
    )
    other = site.add_platform("beta", activate="return None")
    site.monkeypatch.setenv("ALPHA_HW", "1")
    selection = site.pm.select()  # the launcher's decision, in the parent
    assert selection.name == "alpha"
    status, module, other_imported = _run_child(site, selection.name, {}, other)
    assert (status, module, other_imported) == ("ok", f"{chosen}.platform", False)
    # The child re-checks the hardware instead of trusting the parent blindly.
    status, err_type, message = _run_child(site, selection.name, {"ALPHA_HW": "0"}, other)
    assert (status, err_type) == ("error", "PlatformUnavailableError")
    assert "set_selection('alpha')" in message
