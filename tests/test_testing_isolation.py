"""isolated_hooks and HookIsolation: patches restored, leaks detected, state put back."""

from __future__ import annotations

import importlib
import uuid

import pytest

from spawnkit.hooks import HookRegistry, HookType, plugin_hook
from spawnkit.namespace import default_namespace
from spawnkit.spec import _phase
from spawnkit.testing._isolation import HookIsolation, format_leaks

TARGET_SRC = """
def compute(x):
    return x + 1


class Engine:
    def step(self, n):
        return n * 10
"""


@pytest.fixture
def target(plugin_dist):
    """A real, freshly imported target module unique to the test."""
    name = f"tgt_{uuid.uuid4().hex[:8]}"
    plugin_dist(f"target-{name}".replace("_", "-"), modules={name: TARGET_SRC})
    return importlib.import_module(name)


def _plus_100(result, *args, **kwargs):
    return result + 100


def test_isolated_hooks_patches_and_is_the_default_registry(isolated_hooks, target):
    assert isolated_hooks is HookRegistry.default()
    assert isolated_hooks is default_namespace().hooks
    assert isolated_hooks.registrations() == []
    isolated_hooks.register(f"{target.__name__}.compute", _plus_100, HookType.AFTER)

    @plugin_hook(f"{target.__name__}.Engine.step", type=HookType.AROUND)
    def double(original, self, n):
        return original(self, n) * 2

    assert isolated_hooks.registered_targets() == [
        f"{target.__name__}.compute",
        f"{target.__name__}.Engine.step",
    ]
    isolated_hooks.apply_hooks()
    assert target.compute(1) == 102
    assert target.Engine().step(2) == 40
    # no unapply(): the fixture restores it


def test_isolation_restores_patches_and_the_outer_state(target):
    outer = HookRegistry.default()
    outer_target = f"{target.__name__}.Engine.step"
    outer.register(outer_target, _plus_100, HookType.AFTER)
    try:
        original = target.compute
        iso = HookIsolation()
        reg = iso.start()
        assert reg.registrations() == []  # the outer registration is hidden
        reg.register(f"{target.__name__}.compute", _plus_100)
        reg.apply_hooks()
        assert target.compute(1) == 102
        assert iso.leaks() == []
        assert iso.finish() == []
        assert target.compute is original
        assert target.compute(1) == 2
        assert [r.target for r in outer.registrations()] == [outer_target]
    finally:
        outer.reset()


def test_isolation_restores_phase_flags_and_default_plugin_state(target):
    before = (_phase._in_worker, _phase._hooks_applied)
    iso = HookIsolation()
    iso.start()
    default_namespace().apply_plugin_hooks()
    assert _phase._hooks_applied is True
    assert default_namespace().plugins.applied
    assert iso.finish() == []
    assert (_phase._in_worker, _phase._hooks_applied) == before
    assert not default_namespace().plugins.applied


def test_patch_through_another_registry_is_a_leak_and_is_restored(target, spawnkit_namespace):
    ns = spawnkit_namespace
    original = target.compute
    iso = HookIsolation()
    iso.start()
    ns.hooks.register(f"{target.__name__}.compute", _plus_100)
    ns.hooks.apply_hooks()
    assert target.compute(1) == 102
    leaks = iso.leaks()
    assert [(leak.registry, leak.target) for leak in leaks] == [
        (ns.name, f"{target.__name__}.compute")
    ]
    found = iso.finish()
    assert [(leak.target, leak.restored) for leak in found] == [
        (f"{target.__name__}.compute", True)
    ]
    assert target.compute is original
    message = format_leaks(found, when="by this test")
    assert ns.name in message and "compute" in message and "unapply()" in message
    ns.hooks.reset()


def test_registry_that_was_already_patched_is_named_not_unapplied(target, spawnkit_namespace):
    ns = spawnkit_namespace
    ns.hooks.register(f"{target.__name__}.compute", _plus_100)
    ns.hooks.apply_hooks()
    try:
        iso = HookIsolation()
        iso.start()
        assert iso.leaks() == []  # patched before the test: not this test's leak
        ns.hooks.register(f"{target.__name__}.Engine.step", _plus_100)
        ns.hooks.apply_hooks()
        found = iso.finish()
        assert [(leak.target, leak.restored) for leak in found] == [
            (f"{target.__name__}.Engine.step", False)
        ]
        assert "NOT restored" in found[0].describe()
    finally:
        ns.hooks.reset()


def test_a_target_left_patched_after_restore_is_a_leak(target, monkeypatch):
    iso = HookIsolation()
    reg = iso.start()
    reg.register(f"{target.__name__}.compute", _plus_100)
    reg.apply_hooks()
    patched = target.compute
    # Something outside the registry keeps re-installing the patched object: simulate it
    # by making unapply a no-op for this registry.
    monkeypatch.setattr(type(reg), "unapply", lambda self: None)
    found = iso.finish()
    monkeypatch.undo()
    assert [leak.target for leak in found] == [f"{target.__name__}.compute"]
    assert "still holds the patched object" in found[0].reason
    assert target.compute is patched
    HookRegistry.default().reset()
    reg.reset()
