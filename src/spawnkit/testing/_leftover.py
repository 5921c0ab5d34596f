"""Hook patches a test made without ``isolated_hooks`` and left applied for every later test.

A test that calls ``bootstrap_here()``, ``apply_plugin_hooks()`` or ``apply_hooks()`` itself
patches the process for good: every later test runs the hooked code, and an ``isolated_hooks``
test took such a patch for its baseline ("patched before the test"), so it ran hooked code while
its registry read empty, and which tests ran hooked depended on their order.  So the plugin
compares, for each test without the fixture, what is patched before its body and after its
teardown, warns at the test that left a patch, and fails a later isolated test at setup, naming
the test that left it.  Patches made outside any test body (a ``conftest.py``, a session fixture)
are the suite's own and stay the baseline.

A suite that never applies a hook pays one ``sys.modules`` look per test; one that does, one
look per namespace registry.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["HookLeakWarning", "Leftovers", "applied_now"]

Key = tuple[str, str]  # (registry name, target)


class HookLeakWarning(UserWarning):
    """A test (without ``isolated_hooks``) applied hooks and left them applied: every later
    test in the process runs the hooked code."""


HookLeakWarning.__module__ = "spawnkit.testing"


def applied_now() -> dict[Key, str]:
    """Every target patched through the default or a namespace's registry, with who hooked it.

    Run twice per test: modules are taken from ``sys.modules`` (none imported, nothing patched)
    and a registry with nothing applied costs one truth test."""
    modules = sys.modules
    registry_module: Any = modules.get("spawnkit.hooks.registry")
    if registry_module is None:  # no hook engine imported: nothing can be patched
        return {}
    namespace_module: Any = modules.get("spawnkit.namespace")
    registries = [registry_module.HookRegistry._default]
    if namespace_module is not None:
        registries += [ns._hooks for ns in list(namespace_module.Namespace._registry.values())]
    found: dict[Key, str] = {}
    for reg in registries:
        if reg is None or not reg._state.applied:
            continue
        for t in reg.applied_targets():
            by = ", ".join(str(s) for s in t.sources)
            found[(reg.name, t.target)] = f" by {by}" if by else ""
    return found


def _line(key: Key, by: str) -> str:
    return f"{key[1]!r} patched through registry {key[0]!r}{by}"


class Leftovers:
    """The patches earlier test bodies left applied, each with the test that left it."""

    def __init__(self) -> None:
        self.left: dict[Key, str] = {}

    def after_test(self, nodeid: str, before: set[Key]) -> str | None:
        """The warning for what the test ``nodeid`` applied and left (None: nothing)."""
        now = applied_now()
        self.left = {k: by for k, by in self.left.items() if k in now}  # undone since: gone
        new = {k: by for k, by in now.items() if k not in before}
        if not new:
            return None
        self.left.update(dict.fromkeys(new, nodeid))
        lines = [
            f"{nodeid} applied {len(new)} hook patch(es) and left them applied (it does not use "
            "isolated_hooks):",
            *(f"  - {_line(k, by)}" for k, by in new.items()),
            "Every later test in this process runs the hooked code, so which tests pass depends "
            "on their order, and a later isolated_hooks test fails at setup. Fix: request "
            "isolated_hooks in this test (isolated_hooks_for(namespace) for an engine's own "
            "namespace): its teardown undoes what bootstrap_here(), apply_plugin_hooks() or "
            "apply_hooks() applied in the test; or call unapply() on that registry before the "
            "test ends.",
        ]
        return "\n".join(lines)

    def inherited(self) -> str | None:
        """The failure of an isolated test that starts with an earlier test's patches applied."""
        if not self.left:
            return None
        now = applied_now()
        found = [(k, now[k], nodeid) for k, nodeid in self.left.items() if k in now]
        if not found:
            return None
        lines = [
            f"isolated_hooks: {len(found)} hook patch(es) an earlier test applied are still "
            "applied as this test starts:",
            *(f"  - {_line(k, by)}, left by {nodeid}" for k, by, nodeid in found),
            "This test would run the hooked code while its registry reads empty, and pass or "
            "fail by which tests ran before it. Fix: request isolated_hooks in the test named "
            "(isolated_hooks_for(namespace) for an engine's own namespace): its teardown undoes "
            "what it applied; or call unapply() on that registry before that test ends.",
        ]
        return "\n".join(lines)
