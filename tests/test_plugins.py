"""Plugin loading per namespace, with real distributions on sys.path (no patched metadata)."""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from _bootstrap_helpers import World, isolated_imports, make_world
from spawnkit.errors import PlatformPluginError, PluginError
from spawnkit.hooks.plugins import PluginSelectionWarning, apply_plugin_hooks, load_plugins
from spawnkit.hooks.types import HookSource, HookType
from spawnkit.namespace import get_namespace
from spawnkit.spec import _phase

RAISING_CALLBACK = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
        raise RuntimeError("callback exploded")
    """

BROKEN_IMPORT = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")
    NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
    import missing_dependency_{name}  # noqa

    def register():
        pass
    """

DECORATOR_AT_IMPORT = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    @NS.plugin_hook("{eng}.sched.Scheduler.run", type=HookType.AROUND)
    def around(original, self):
        return "decorated:" + original(self)

    def register():
        pass
    """

RECORDING = """
    from {eng}.events import EVENTS

    def register():
        EVENTS.append("{name}")
    """


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with isolated_imports():
        w = make_world(tmp_path)
        monkeypatch.delenv(w.ns.config.plugins_var, raising=False)
        monkeypatch.delenv(w.ns.config.lenient_var, raising=False)
        w.ns.platforms.set_selection("testdev")
        yield w
        w.ns.hooks.reset()  # unapplied and forgotten: its registrations are no later test's
        _phase.leave_worker()


def _events(world: World) -> list[object]:
    return list(sys.modules[f"{world.eng}.events"].EVENTS)


def test_discover_reads_metadata_only_and_reports_status(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = world.add_plugin("a"), world.add_plugin("b")
    monkeypatch.setenv(world.ns.config.plugins_var, "b")
    infos = world.ns.plugins.discover()
    assert [(i.name, i.status) for i in infos] == [("a", "not-selected"), ("b", "selected")]
    assert infos[0].dist == "eng-" + world.eng[4:] + "-plug-a" and infos[0].version == "1.0"
    assert a not in sys.modules and b not in sys.modules


def test_loads_in_name_order_registering_only(world: World) -> None:
    world.add_plugin("zeta", RECORDING)
    world.add_plugin("alpha", RECORDING)
    world.add_plugin("mid")  # the AROUND plugin
    loaded = load_plugins(world.ns)
    assert [p.name for p in loaded] == ["alpha", "mid", "zeta"]
    assert _events(world) == ["alpha", ("plugin mid", False), "zeta"]
    # registration only: the target module is not imported by this stage
    assert f"{world.eng}.sched" not in sys.modules
    assert world.ns.hooks.registered_targets() == [f"{world.eng}.sched.Scheduler.run"]
    mid = loaded[1]
    assert (mid.dist, mid.version, mid.registrations) == (
        f"{world.plugins['mid']}".replace("_", "-"),
        "1.0",
        1,
    )


MODULE_IS_THE_PLUGIN = """
    from {eng}.events import EVENTS
    EVENTS.append("imported {name}")
    """


def test_entry_points_with_extras_load_as_the_specification_allows(world: World) -> None:
    """``mod:register [gpu]`` is legal (older setuptools writes it); the extras are ignored."""
    import importlib.metadata as md

    callback = f"{world.eng}_plug_cb"
    module_only = f"{world.eng}_plug_mod"
    world.add_plugin("cb", RECORDING, value=f"{callback}:register [gpu, fast]")
    world.add_plugin("mod", MODULE_IS_THE_PLUGIN, value=f"{module_only} [gpu]")
    group = world.ns.config.plugin_group
    read = {ep.name: ep.extras for ep in md.entry_points(group=group)}
    assert read == {"cb": ["gpu", "fast"], "mod": ["gpu"]}  # the standard library's reading
    loaded = load_plugins(world.ns)
    assert [p.name for p in loaded] == ["cb", "mod"]
    assert _events(world) == ["cb", "imported mod"]


def test_import_time_decorators_are_attributed_to_the_plugin(world: World) -> None:
    mod = world.add_plugin("deco", DECORATOR_AT_IMPORT, dist="deco-dist", version="3.1")
    load_plugins(world.ns)
    (reg,) = world.ns.hooks.registrations()
    assert reg.source == HookSource("deco", "deco-dist", "3.1")
    assert reg.hook_type is HookType.AROUND
    apply_plugin_hooks(world.ns)
    sched = sys.modules[f"{world.eng}.sched"]
    assert sched.Scheduler().run() == "decorated:orig"
    assert mod in sys.modules


def test_module_entry_point_is_imported_not_called(world: World) -> None:
    world.add_plugin("modonly", DECORATOR_AT_IMPORT, value=f"{world.eng}_plug_modonly")
    (loaded,) = load_plugins(world.ns)
    assert loaded.name == "modonly" and loaded.registrations == 1


def test_entry_point_naming_a_submodule_attribute_is_imported_not_called(world: World) -> None:
    """``pkg:hooks`` where ``hooks`` is a module: importing it is the registration."""
    mod = world.add_plugin(
        "subonly",
        "from . import hooks  # noqa: F401\n",
        value=f"{world.eng}_plug_subonly:hooks",
        extra_modules={"{mod}.hooks": DECORATOR_AT_IMPORT},
    )
    (loaded,) = load_plugins(world.ns)
    assert loaded.value.endswith(":hooks") and loaded.registrations == 1
    assert f"{mod}.hooks" in sys.modules


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, ["a", "b"]), ("", []), ("b", ["b"]), (" a , b ", ["a", "b"])]
)
def test_env_var_selection(
    world: World, monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: list[str]
) -> None:
    world.add_plugin("a", RECORDING)
    world.add_plugin("b", RECORDING)
    if raw is not None:
        monkeypatch.setenv(world.ns.config.plugins_var, raw)
    assert [p.name for p in load_plugins(world.ns)] == expected


def test_unknown_selected_name_is_refused_listing_installed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process loading refuses a typo as the launcher does: no silent run without it."""
    world.add_plugin("alpha", RECORDING)
    monkeypatch.setenv(world.ns.config.plugins_var, "alpha,alpah")
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    text = str(info.value)
    assert "'alpah' (did you mean 'alpha'?)" in text and "installed: alpha" in text
    assert world.ns.config.lenient_var in text
    assert info.value.plugin == "alpah"
    assert f"{world.eng}.events" not in sys.modules  # refused before any plugin ran


def test_a_platform_plugin_selected_as_a_general_plugin_names_the_variable_to_use(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.add_plugin("alpha", RECORDING, platform_entry="mydevice")
    monkeypatch.setenv(world.ns.config.plugins_var, "alpha,mydevice")
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    cfg = world.ns.config
    assert f"'mydevice' (a platform plugin: select it with {cfg.platform_var})" in str(info.value)


def test_unknown_selected_name_is_one_warning_when_lenient(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    world.add_plugin("a", RECORDING)
    monkeypatch.setenv(world.ns.config.plugins_var, "a,typo")
    monkeypatch.setenv(world.ns.config.lenient_var, "1")
    with (
        pytest.warns(PluginSelectionWarning, match=r"'typo', but no installed plugin") as seen,
        caplog.at_level(logging.WARNING),
    ):
        loaded = load_plugins(world.ns)
    assert len(seen) == 1 and seen[0].filename == __file__
    assert not [r for r in caplog.records if "typo" in r.getMessage()]
    assert [p.name for p in loaded] == ["a"]
    assert world.ns.plugins.report.unknown_names == ["typo"]


def test_explicit_names_override_the_env_var(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.add_plugin("a", RECORDING)
    world.add_plugin("b", RECORDING)
    monkeypatch.setenv(world.ns.config.plugins_var, "a")
    assert [p.name for p in load_plugins(world.ns, names=("b",))] == ["b"]


def test_plugins_of_an_unselected_platform_dist_are_skipped_without_import(world: World) -> None:
    other = world.add_plugin("other", RECORDING, dist="other-device", platform_entry="otherdev")
    # The platform's own distribution (same name, shadowing it) also ships a general plugin.
    own = world.add_plugin(
        "own", RECORDING, dist=f"plat-{world.eng[4:]}", version="2.0", platform_entry="testdev"
    )
    loaded = load_plugins(world.ns)
    assert [p.name for p in loaded] == ["own"]
    assert other not in sys.modules and own in sys.modules
    (skipped,) = world.ns.plugins.report.skipped
    assert skipped.name == "other" and skipped.status == "excluded"
    assert "otherdev" in skipped.reason


def test_plugins_of_a_platform_name_two_distributions_declare_never_load(world: World) -> None:
    """chipa and chipb both declare platform 'dup' while testdev is selected: the rule kept one
    distribution per platform name (the first on sys.path, chipb), so chipa's general plugin
    was "selected" and loaded on testdev, unsaid. Both now stop at the duplicate name."""
    from spawnkit.testing import write_distribution

    kern = world.add_plugin("kern", RECORDING, dist="chipa", platform_entry="dup")
    chipb = world.root / "d_chipb"  # the platform only, ahead of chipa on sys.path
    group = world.ns.config.platform_group
    write_distribution(chipb, "chipb", "1.0", entry_points={group: {"dup": f"{world.plat}:x"}})
    sys.path.insert(0, str(chipb))
    with pytest.raises(PlatformPluginError, match="named 'dup'") as info:
        world.ns.plugins.discover(platform="cpu")
    assert "chipa 1.0" in str(info.value) and "chipb 1.0" in str(info.value)
    with pytest.raises(PlatformPluginError, match="named 'dup'"):
        load_plugins(world.ns)  # testdev, pinned by the fixture
    assert kern not in sys.modules


def test_a_plugin_named_on_purpose_that_the_platform_rule_leaves_out_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``<PREFIX>_PLUGINS=other`` on a machine whose platform is not other's: it was skipped,
    status "excluded", nothing said: the plugin the user asked for by name never loaded."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    other = world.add_plugin("other", RECORDING, dist="other-device", platform_entry="otherdev")
    world.add_plugin("plain", RECORDING)
    cfg = world.ns.config
    env = {cfg.platform_var: "testdev", cfg.plugins_var: "other,plain"}
    with pytest.raises(PluginError) as info:
        _parent_selection(world.ns, env)
    text = str(info.value)
    assert f"{cfg.plugins_var}='other,plain' (in env=) selects 'other', which will not be" in text
    assert "'other' (other-device 1.0): its distribution provides platform otherdev" in text
    assert cfg.platform_var in text and info.value.dist == "other-device"
    env[cfg.lenient_var] = "1"
    with pytest.warns(PluginSelectionWarning, match="selects 'other', which will not be loaded"):
        _, plugins, _ = _parent_selection(world.ns, env)
    assert plugins == ("plain",)
    monkeypatch.setenv(cfg.plugins_var, "other")  # in-process loading says it too
    with pytest.raises(PluginError, match="which will not be loaded"):
        load_plugins(world.ns)
    assert other not in sys.modules


@pytest.mark.parametrize("raw", ["mine", ""])
def test_an_allow_list_keeps_the_selected_platforms_own_plugin(
    world: World, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    """``<PREFIX>_PLUGINS=mine`` with a platform plugin selected: the platform distribution's own
    general plugin (its kernels) was "not-selected", so the device ran the native code, unsaid."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    own = world.add_plugin(
        "kernels", RECORDING, dist=f"plat-{world.eng[4:]}", version="2.0", platform_entry="testdev"
    )
    world.add_plugin("mine", RECORDING)
    world.add_plugin("other", RECORDING)
    cfg = world.ns.config
    expected = ["kernels", "mine"] if raw else ["kernels"]
    left_out = ["other"] if raw else ["mine", "other"]
    # the parent freezes it into the spec, with the platform given in env=
    env = {cfg.platform_var: "testdev", cfg.plugins_var: raw}
    assert list(_parent_selection(world.ns, env)[1]) == expected
    monkeypatch.setenv(cfg.plugins_var, raw)
    kept = {i.name: i for i in world.ns.plugins.discover()}["kernels"]
    assert kept.status == "selected"
    assert kept.reason.startswith(
        f"part of platform 'testdev' (distribution plat-{world.eng[4:]}), so "
        f"{cfg.plugins_var}={raw!r} does not leave it out"
    )
    assert [p.name for p in load_plugins(world.ns)] == expected  # in-process, from the variable
    assert own in sys.modules
    assert [i.name for i in world.ns.plugins.report.skipped] == left_out


def test_an_allow_list_leaves_out_plugins_of_a_distribution_without_the_selected_platform(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: only the selected platform's distribution is kept; another device's plugin and a
    plain plugin the allow-list does not name stay out."""
    world.add_plugin("kernels", RECORDING, dist="other-device", platform_entry="otherdev")
    world.add_plugin("mine", RECORDING)
    world.add_plugin("plain", RECORDING)
    monkeypatch.setenv(world.ns.config.plugins_var, "mine")
    assert [p.name for p in load_plugins(world.ns)] == ["mine"]
    assert {i.name: i.status for i in world.ns.plugins.report.skipped} == {
        "kernels": "not-selected",
        "plain": "not-selected",
    }


def test_failing_import_is_a_plugin_error_and_discards_partial_registrations(
    world: World,
) -> None:
    world.add_plugin("good", RECORDING)
    world.add_plugin("bad", BROKEN_IMPORT, dist="bad-dist", version="0.3")
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    err = info.value
    assert (err.plugin, err.dist, err.version) == ("bad", "bad-dist", "0.3")
    assert err.value == f"{world.eng}_plug_bad:register"
    assert "failed to import" in str(err) and "bad-dist 0.3" in str(err)
    assert isinstance(err.__cause__, ModuleNotFoundError)
    assert world.ns.hooks.registrations() == []
    # final: a later call re-raises the same failure, with its fields
    with pytest.raises(PluginError) as again:
        load_plugins(world.ns)
    assert again.value.plugin == "bad" and again.value.__cause__ is err
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.plugin, clone.value, clone.dist, clone.version) == (
        err.plugin,
        err.value,
        err.dist,
        err.version,
    )


def test_raising_callback_is_a_plugin_error(world: World) -> None:
    world.add_plugin("cb", RAISING_CALLBACK)
    with pytest.raises(
        PluginError, match="raised in its callback: RuntimeError: callback exploded"
    ):
        load_plugins(world.ns)
    assert world.ns.hooks.registrations() == []


@pytest.mark.parametrize("how", ["argument", "env"])
def test_lenient_mode_logs_and_continues(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    world.add_plugin("bad", RAISING_CALLBACK)
    world.add_plugin("good", RECORDING)
    kwargs = {"lenient": True} if how == "argument" else {}
    if how == "env":
        monkeypatch.setenv(world.ns.config.lenient_var, "1")
    with caplog.at_level(logging.WARNING, logger="spawnkit.hooks"):
        loaded = load_plugins(world.ns, **kwargs)
    assert [p.name for p in loaded] == ["good"]
    (failed,) = world.ns.plugins.report.failed
    assert failed.name == "bad" and "callback exploded" in failed.error
    assert "callback exploded" in caplog.text
    assert world.ns.hooks.registrations() == []
    # Alerting keyed on ERROR must see a plugin that is missing, with where it failed.
    (record,) = [r for r in caplog.records if "lenient plugin loading" in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "Traceback" in caplog.text and "in register" in caplog.text


def test_lenient_never_applies_to_the_selected_platform_dist(world: World) -> None:
    world.add_plugin(
        "platplug",
        RAISING_CALLBACK,
        dist=f"plat-{world.eng[4:]}",
        version="2.0",
        platform_entry="testdev",
    )
    with pytest.raises(PluginError, match="lenient mode does not apply"):
        load_plugins(world.ns, lenient=True)


def test_invalid_lenient_env_value_is_rejected(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.add_plugin("a", RECORDING)
    monkeypatch.setenv(world.ns.config.lenient_var, "perhaps")
    with pytest.raises(ValueError, match="not a boolean"):
        load_plugins(world.ns)


def test_duplicate_names_across_distributions(world: World) -> None:
    world.add_plugin("dup", RECORDING, dist="first-dist")
    # Same entry name, another distribution (written under another root).
    mod = f"{world.eng}_plug_dup2"
    from spawnkit.testing import write_distribution

    write_distribution(
        world.root / "d_dup2",
        "second-dist",
        entry_points={world.ns.config.plugin_group: {"dup": f"{mod}:register"}},
        modules={mod: "def register():\n    pass\n"},
    )
    sys.path.insert(0, str(world.root / "d_dup2"))
    with pytest.raises(PluginError, match=r"first-dist.*second-dist|second-dist.*first-dist"):
        load_plugins(world.ns)


def test_non_callable_entry_point_is_a_plugin_error(world: World) -> None:
    world.add_plugin("nc", "register = 42\n")
    with pytest.raises(PluginError, match="not a callable"):
        load_plugins(world.ns)


def test_reentrant_call_returns_and_threads_wait_for_one_run(world: World) -> None:
    world.add_plugin(
        "slow",
        """
        import time
        from spawnkit.hooks.plugins import load_plugins
        from spawnkit.namespace import Namespace
        from {eng}.events import EVENTS

        def register():
            EVENTS.append(("reentrant", load_plugins(Namespace("{ns}", "{PREFIX}"))))
            time.sleep(0.3)
        """,
    )
    results: list[list[str]] = []

    def call() -> None:
        results.append([p.name for p in load_plugins(world.ns)])

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert results == [["slow"]] * 3
    assert _events(world) == [("reentrant", [])]  # called once; the inner call returned


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_does_not_inherit_done(world: World) -> None:
    world.add_plugin("a", RECORDING)
    load_plugins(world.ns)
    assert world.ns.plugins.loaded
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os._exit(0 if not world.ns.plugins.loaded else 1)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("forked child did not exit")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


def test_apply_loads_first_if_needed_and_marks_hooks_applied(world: World) -> None:
    world.add_plugin("p")
    _phase.enter_worker()
    assert _phase.too_early()
    patched = apply_plugin_hooks(world.ns)
    assert patched == [f"{world.eng}.sched.Scheduler.run"]
    assert not _phase.too_early()
    assert sys.modules[f"{world.eng}.sched"].Scheduler().run() == "patched:orig"
    assert apply_plugin_hooks(world.ns) == patched  # once per process


def test_parent_selection_excludes_by_the_platform_given_in_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher decides with ``env=``'s platform variable, not a fresh auto-discovery."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    with isolated_imports():
        w = make_world(tmp_path)
        cfg = w.ns.config
        for var in (cfg.platform_var, cfg.plugins_var, cfg.lenient_var):
            monkeypatch.delenv(var, raising=False)
        # A second platform that also activates: auto-discovery alone would be a conflict.
        w.add_plugin("other", RECORDING, dist="other-device", platform_entry="otherdev")
        w.add_plugin("plain", RECORDING)
        platform, plugins, _ = _parent_selection(w.ns, {cfg.platform_var: "testdev"})
        assert platform == "testdev"
        assert plugins == ("plain",)  # 'other' ships the unselected platform 'otherdev'
        platform, plugins, _ = _parent_selection(w.ns, {cfg.platform_var: "otherdev"})
        assert (platform, plugins) == ("otherdev", ("other", "plain"))


def test_parent_selection_refuses_unknown_names(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent drops unknown names from the spec, so it is the one that must refuse."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    world.add_plugin("a", RECORDING)
    env = {world.ns.config.plugins_var: "a,typo"}
    with pytest.raises(PluginError, match=r"'typo', but no installed plugin"):
        _parent_selection(world.ns, env)
    env[world.ns.config.lenient_var] = "yes"
    with pytest.warns(PluginSelectionWarning, match=r"'typo', but no installed plugin"):
        _, plugins, _ = _parent_selection(world.ns, env)
    assert plugins == ("a",)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ("", "env="),
        ("  ", "env="),
        ("", "environ"),
        # only separators (X=${A},${B} with both unset) selected none as silently as '' did
        (",", "env="),
        (" , ", "env="),
        (",,", "env="),
        (",", "environ"),
    ],
)
def test_a_blank_allow_list_is_said_naming_the_plugins_it_leaves_out(
    world: World, monkeypatch: pytest.MonkeyPatch, raw: str, where: str
) -> None:
    """``<PREFIX>_PLUGINS=''`` (``X=${UNSET}``, a k8s ``value: ""``) means none here and all to
    SGLang's loader: the workers ran with no plugin while the launch said nothing."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    world.add_plugin("a", RECORDING)
    world.add_plugin("b", RECORDING)
    world.add_plugin("otherdev", RECORDING, dist="other-device", platform_entry="otherdev")
    var = world.ns.config.plugins_var
    env = {var: raw} if where == "env=" else {}
    if where == "environ":
        monkeypatch.setenv(var, raw)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _, plugins, _ = _parent_selection(world.ns, env)
        _parent_selection(world.ns, env)  # said at each launch
    assert plugins == ()  # the documented meaning stands: none
    said = [w for w in seen if issubclass(w.category, PluginSelectionWarning)]
    assert len(said) == 2 and said[0].filename == __file__  # at the launching line
    text = str(said[0].message)
    origin = f"{var}={raw!r}" + (" (in env=)" if where == "env=" else "")
    commas = f" (only separators: '{var}=${{A}},${{B}}' with both unset gives one)"
    assert text.startswith(f"{origin} is set but blank{commas if raw.strip() else ''}, so 'a' (")
    assert "'b' (" in text and "otherdev" not in text  # the platform rule leaves it out anyway
    assert f"Unset {var} to load every plugin" in text and f"({var}=a)" in text


def test_a_blank_allow_list_that_leaves_out_nothing_is_not_said(world: World) -> None:
    """Control: no plugin installed beside the selected platform's own, or a named selection."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    world.add_plugin("own", RECORDING, dist=f"plat-{world.eng[4:]}", platform_entry="testdev")
    var = world.ns.config.plugins_var
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _parent_selection(world.ns, {var: ""})[1] == ("own",)
        world.add_plugin("a", RECORDING)
        assert _parent_selection(world.ns, {var: "a"})[1] == ("a", "own")


DEFAULT_REGISTRY_PLUGIN = """
    from spawnkit.hooks import HookRegistry, HookType

    def around(original, self, *args, **kwargs):
        return original(self, *args, **kwargs)

    def register():
        # Written against the class-level API, which is spawnkit's *default* namespace.
        HookRegistry.register("{eng}.sched.Scheduler.run", around, HookType.AROUND)
    """


def test_hooks_put_on_the_default_registry_by_another_namespaces_plugin_are_refused(
    world: World,
) -> None:
    """They would load fine and never run in this namespace's workers: a plugin failure."""
    from spawnkit.hooks import HookRegistry

    world.add_plugin("stray", DEFAULT_REGISTRY_PLUGIN)
    with HookRegistry.isolated():
        with pytest.raises(PluginError, match="default registry") as info:
            load_plugins(world.ns)
        assert HookRegistry.registrations() == []  # discarded there too
    err = info.value
    assert err.plugin == "stray" and f"get_namespace({world.ns.name!r}).hooks" in str(err)
    assert world.ns.hooks.registrations() == []


OTHER_NAMESPACE_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace

    OTHER = Namespace("{ns}_other", "{PREFIX}_OTHER")  # the engine's second namespace

    def register():
        OTHER.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
    """


def test_hooks_put_on_another_namespaces_registry_are_said(world: World) -> None:
    """Only a process that bootstraps that namespace too applies them: a warning, not a refusal
    (an engine may bootstrap both)."""
    world.add_plugin("elsewhere", OTHER_NAMESPACE_PLUGIN, dist="else-plugin", version="0.2")
    with pytest.warns(PluginSelectionWarning) as caught:
        loaded = load_plugins(world.ns)
    assert [p.name for p in loaded] == ["elsewhere"]
    (w,) = [w for w in caught if "registry" in str(w.message)]
    text = str(w.message)
    ns = world.ns.name
    assert "plugin 'elsewhere'" in text and "else-plugin 0.2" in text, text
    assert f"loaded for namespace {ns!r} but registered 1 hook(s)" in text
    assert f"in namespace '{ns}_other''s registry" in text
    assert f"spawnkit.get_namespace({ns!r}).hooks" in text
    assert world.ns.hooks.registrations() == []
    get_namespace(f"{ns}_other").hooks.reset()  # the plugin's, on a namespace it declared


def test_apply_waiting_for_another_threads_loading_is_bounded(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung plugin in the loading thread cannot hang apply_plugin_hooks() elsewhere."""
    from spawnkit.hooks import plugins

    world.add_plugin(
        "slow",
        """
        import time

        def register():
            time.sleep(1.0)
        """,
    )
    loader = threading.Thread(target=load_plugins, args=(world.ns,), daemon=True)
    loader.start()
    deadline = time.monotonic() + 30
    while world.ns.plugins._load_once.state.value != "running":
        assert time.monotonic() < deadline, "loading never started"
        time.sleep(0.005)
    monkeypatch.setattr(plugins, "LOAD_WAIT_S", 0.05)
    with pytest.raises(PluginError, match=r"waited 0.05 s for load_plugins\(\), still running"):
        apply_plugin_hooks(world.ns)
    loader.join(timeout=30)
    assert not loader.is_alive()
    assert not world.ns.plugins.applied  # the refused call marked nothing done


def test_apply_after_a_failed_load_raises_instead_of_applying_part_of_the_plugins(
    world: World,
) -> None:
    world.add_plugin("a_good")  # loads first, registers its AROUND hook
    world.add_plugin("b_bad", RAISING_CALLBACK)
    with pytest.raises(PluginError, match="b_bad"):
        load_plugins(world.ns)
    with pytest.raises(PluginError, match="b_bad"):
        apply_plugin_hooks(world.ns)  # a caller that caught the first error
    assert not world.ns.plugins.applied
    assert f"{world.eng}.sched" not in sys.modules  # nothing was patched


PLATFORM_ACTIVATE = """
    def register():  # what a platform plugin's activate() is: the class when the device is here
        return "{mod}.platform:MyDevicePlatform"
    """

STATUS_WORD = """
    def register():  # a shim's status word (sglang-radeon-rdna3 style): not a platform answer
        return "applied"
    """


def test_a_platform_plugin_declared_as_a_general_plugin_is_refused_naming_the_group(
    world: World,
) -> None:
    # Before: called as a general plugin, its answer dropped: the workers ran on another
    # platform (the decision table never saw it), with nothing said.
    world.add_plugin("mydev", PLATFORM_ACTIVATE, dist="mydev-plugin", version="0.3")
    world.add_plugin("shims", STATUS_WORD)
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    text = str(info.value)
    assert "plugin 'mydev'" in text and "mydev-plugin 0.3" in text, text
    assert "is a platform plugin in the general plugin group" in text
    cfg = world.ns.config
    assert f"group {cfg.platform_group!r} instead of {cfg.plugin_group!r}" in text


def test_a_general_plugin_returning_a_status_word_loads(world: World) -> None:
    world.add_plugin("shims", STATUS_WORD)
    assert [p.name for p in load_plugins(world.ns)] == ["shims"]


NEVER_RUNS = {
    "async": """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    async def register():  # an async framework's habit: the body never runs
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
    """,
    "generator": """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        for target in ["{eng}.sched.Scheduler.run"]:
            yield NS.hooks.register(target, "{mod}:nope", HookType.AFTER)
    """,
}


@pytest.mark.parametrize("kind", sorted(NEVER_RUNS))
def test_a_callback_whose_body_never_runs_is_refused(
    world: World, kind: str, recwarn: pytest.WarningsRecorder
) -> None:
    # Before: "loaded", no hook registered, a RuntimeWarning at collection at best.
    world.add_plugin("lazy", NEVER_RUNS[kind], dist="lazy-plugin", version="0.1")
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    text = str(info.value)
    assert "plugin 'lazy'" in text and "lazy-plugin 0.1" in text, text
    assert "none of its code ran" in text and "Make it a plain def" in text
    assert ("async def" in text) == (kind == "async")
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


DROPPED = {
    # a factory: the entry point hands back the function that registers (never called)
    "factory": ("get_plugin", """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)

    def get_plugin():
        return register
    """),
    # a pluggy-style plugin object: the entry point names a class; loading made an instance
    "class": ("Plugin", """
    class Plugin:
        def register(self):
            raise AssertionError("never called")
    """),
    # a module: imported, never called (':register' left off the entry point)
    "module": ("", """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
    """),
}


@pytest.mark.parametrize("kind", sorted(DROPPED))
def test_a_plugin_that_registered_nothing_and_returned_what_nothing_calls_is_refused(
    world: World, kind: str
) -> None:
    # Before: "loaded", no hook registered, its object dropped, nothing said.
    attr, source = DROPPED[kind]
    mod = f"{world.eng}_plug_lazy"
    value = f"{mod}:{attr}" if attr else mod
    world.add_plugin("lazy", source, dist="lazy-plugin", version="0.1", value=value)
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    text = str(info.value)
    assert "plugin 'lazy'" in text and "lazy-plugin 0.1" in text, text
    if kind == "module":
        assert f"Point it at the function: '{mod}:register'" in text, text
        return
    assert "which nothing calls or reads, and no hook was registered" in text
    assert ("class Plugin" in text) == (kind == "class") and "'module:register'" in text


_REGISTERS = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def {fn}():
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
    """

_DECORATOR = """
    @NS.plugin_hook("{eng}.sched.Scheduler.run", type=HookType.AROUND)
    def around(original, self):
        return "decorated:" + original(self)
    """

#: Module entry points (':register' left off) whose register function was never called, with
#: the attribute the fix names; the package's own source and, if any, its hooks submodule's.
UNCALLED = {
    # the package re-exports it from a submodule: its __module__ is the submodule's
    "re-exported": ("register", "from .hooks import register  # noqa: F401\n", _REGISTERS),
    # the seed's diffusion plugin's name
    "register_hooks": ("register_hooks", _REGISTERS.replace("{fn}", "register_hooks"), ""),
    # a decorator registered one hook as the module was imported; register() adds the rest
    "with a decorator": ("register", _REGISTERS + _DECORATOR, ""),
    # ... and called only when run as a script, which importing it is not
    "called under __main__": (
        "register",
        _REGISTERS + _DECORATOR + '\n    if __name__ == "__main__":\n        register()\n',
        "",
    ),
}


@pytest.mark.parametrize("kind", sorted(UNCALLED))
def test_a_module_entry_point_whose_register_function_is_never_called_is_refused(
    world: World, kind: str
) -> None:
    # Before: only a register() defined in the module itself, when its import registered
    # nothing, was named; these loaded with their register function never called.
    attr, source, hooks = UNCALLED[kind]
    mod = f"{world.eng}_plug_lazy"
    extra = {"{mod}.hooks": hooks.replace("{fn}", attr)} if hooks else None
    world.add_plugin(
        "lazy", source.replace("{fn}", attr), dist="lazy-plugin", version="0.1", value=mod,
        extra_modules=extra,
    )  # fmt: skip
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    text = str(info.value)
    assert "plugin 'lazy'" in text and "lazy-plugin 0.1" in text, text
    assert f"Point it at the function: '{mod}:{attr}'" in text, text
    assert ("but never calls it" in text) == ("main" in kind or "decorator" in kind), text
    assert (f"from {mod}.hooks" in text) == (kind == "re-exported"), text
    assert not world.ns.hooks.registrations()  # discarded, the decorator's too


#: Module entry points that are right as they are: what they define is not a forgotten callback.
CALLED = {
    # the module calls its register() as it is imported
    "calls it": _REGISTERS.replace("{fn}", "register") + "\n    register()\n",
    # a stub beside the decorators (so that ':register' works too)
    "empty stub": _REGISTERS.replace("{fn}", "register_unused").split("    def ")[0]
    + _DECORATOR + "\n    def register():\n        pass\n",
    # a helper that takes the function to register: not what a loader calls
    "helper with an argument": _REGISTERS.split("    def ")[0] + _DECORATOR
    + "\n    def register_op(fn):\n        return NS.hooks.register('x.y', fn)\n",
}


@pytest.mark.parametrize("kind", sorted(CALLED))
def test_a_module_entry_point_that_registers_as_it_is_imported_loads(
    world: World, kind: str
) -> None:
    world.add_plugin("fine", CALLED[kind], value=f"{world.eng}_plug_fine")
    (loaded,) = load_plugins(world.ns)
    assert loaded.name == "fine" and loaded.registrations == 1


RETURNS_BUT_REGISTERED = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def nope(result, *args, **kwargs):
        return result

    def register():  # returns an undo function beside its hook: what it registered counts
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:nope", HookType.AFTER)
        return lambda: None
    """


@pytest.mark.parametrize("source", [RETURNS_BUT_REGISTERED, STATUS_WORD])
def test_a_plugin_that_registered_or_returned_data_loads(world: World, source: str) -> None:
    world.add_plugin("fine", source)
    assert [p.name for p in load_plugins(world.ns)] == ["fine"]


_RETURNS_HOOKS = """
    from spawnkit.hooks.types import HookType

    def after(result, *args, **kwargs):
        return result + "+x"

    def register():
        return {shape}
    """

#: Callbacks that hand their hooks back instead of registering them (another loader's protocol)
RETURNS_HOOKS = {
    "list of tuples": '[("{eng}.sched.Scheduler.run", after, HookType.AFTER)]',
    "dict": '{{"{eng}.sched.Scheduler.run": after}}',
    "tuple of types": '(("{eng}.sched.Scheduler.run", "{mod}:after", HookType.AFTER),)',
}


@pytest.mark.parametrize("kind", sorted(RETURNS_HOOKS))
def test_a_callback_that_returned_its_hooks_instead_of_registering_them_is_refused(
    world: World, kind: str
) -> None:
    # Before: "loaded" with 0 registrations, its hooks dropped, nothing said.
    source = _RETURNS_HOOKS.replace("{shape}", RETURNS_HOOKS[kind])
    world.add_plugin("lazy", source, dist="lazy-plugin", version="0.1")
    with pytest.raises(PluginError) as info:
        load_plugins(world.ns)
    text = str(info.value)
    assert "plugin 'lazy'" in text and "lazy-plugin 0.1" in text, text
    assert "returned hook data" in text and "registered no hook" in text, text
    assert "Register each one in the callback" in text, text


def test_a_callback_that_returned_its_hooks_is_logged_and_skipped_when_lenient(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(world.ns.config.lenient_var, "1")
    world.add_plugin("lazy", _RETURNS_HOOKS.replace("{shape}", RETURNS_HOOKS["list of tuples"]))
    world.add_plugin("fine", RETURNS_BUT_REGISTERED)
    with caplog.at_level(logging.ERROR, logger="spawnkit.hooks"):
        assert [p.name for p in load_plugins(world.ns)] == ["fine"]
    (failed,) = world.ns.plugins.report.failed
    assert failed.name == "lazy" and "returned hook data" in failed.error
    assert "returned hook data" in caplog.text


#: Callbacks that return data with no hook in it, or that registered what they return: quiet
RETURNS_DATA = {
    "config dict": '{{"enabled": True, "name": "x", "versions": ["1", "2"]}}',
    "registered and returned": (
        'NS.hooks.register("{eng}.sched.Scheduler.run", after, HookType.AFTER) or [after]'
    ),
}


@pytest.mark.parametrize("kind", sorted(RETURNS_DATA))
def test_a_callback_that_returned_data_or_registered_its_hooks_loads(
    world: World, kind: str
) -> None:
    source = _RETURNS_HOOKS.replace("{shape}", RETURNS_DATA[kind]).replace(
        "from spawnkit.hooks.types import HookType",
        "from spawnkit.hooks.types import HookType\n"
        '    from spawnkit.namespace import Namespace\n    NS = Namespace("{ns}", "{PREFIX}")',
    )
    world.add_plugin("fine", source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (loaded,) = load_plugins(world.ns)
    assert loaded.registrations == (kind != "config dict")


def test_hooks_the_launcher_registered_outside_any_plugin_and_never_applied_are_said(
    world: World,
) -> None:
    """``NS.hooks.register(...)`` in the launcher, then a launch: the workers apply only what
    their plugins register, the launcher applied nothing: the hook ran nowhere, unsaid."""
    from spawnkit.launch._selection import parent_selection as _parent_selection

    world.add_plugin("a", RECORDING)
    target = f"{world.eng}.sched.Scheduler.run"
    world.ns.hooks.register(target, lambda result, *args: result, HookType.AFTER)
    with pytest.warns(PluginSelectionWarning) as seen:
        _, plugins, _ = _parent_selection(world.ns, {})
    (message,) = [str(w.message) for w in seen]
    assert plugins == ("a",) and f"on {target!r}" in message, message
    assert "were never applied here, and no worker applies them" in message
    assert f"group {world.ns.config.plugin_group!r}" in message and seen[0].filename == __file__
    # applied here (the launcher hooks itself on purpose): nothing to say
    world.ns.hooks.apply_hooks()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginSelectionWarning)
        _parent_selection(world.ns, {})
