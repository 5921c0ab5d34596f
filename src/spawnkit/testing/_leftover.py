"""Hook patches a test made without ``isolated_hooks`` and left applied for every later test.

A test that calls ``bootstrap_here()``, ``apply_plugin_hooks()`` or ``apply_hooks()`` itself
patches the process for good: every later test runs the hooked code, and an ``isolated_hooks``
test took such a patch for its baseline ("patched before the test"), so it ran hooked code while
its registry read empty, and which tests ran hooked depended on their order.  So the plugin
compares, for each test without the fixture, what is patched as its setup begins and after its
teardown, warns at the test that left a patch, and fails a later isolated test at setup, naming
the test that left it.  Its function-scoped fixtures are the test's (taken after them, a fixture
that applied and never undid was the baseline, unsaid).  Patches made outside any test (a
``conftest.py``, a module- or session-scoped fixture, :meth:`Patches.taking_in`) are the suite's
own and stay the baseline.

An ``on_import=True`` registration armed before the body (the suite's, waiting for its module)
that applies as the body imports the module is that baseline arriving late, not the test's
patch: only registrations and applies the body made count (:meth:`Patches.arrived`).  One the
body armed and left waiting is the body's, reported at that test (it patches whichever later
test imports the module), and blamed on it when it applies later.

A suite that never applies a hook pays one ``sys.modules`` look per test; one that does, one
look per namespace registry.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HookLeakWarning", "Leftovers", "Patches", "here_records", "patches"]

Key = tuple[str, str]  # (registry name, target)


class HookLeakWarning(UserWarning):
    """A test (without ``isolated_hooks``) applied hooks and left them applied: every later
    test in the process runs the hooked code."""


HookLeakWarning.__module__ = "spawnkit.testing"


@dataclass(frozen=True)
class Patches:
    """What the hook registries hold at one moment (as a test's setup begins, after its teardown).

    ``applied``: patched targets, with who hooked them and the newest registration's ``seq``;
    ``waiting``: ``on_import`` targets armed and waiting for their module, with who hooked them;
    ``marks``: per registry holding either, its state object and its ``seq`` counter then (a
    registration made later has a higher ``seq`` in the same state; ``reset()`` starts a new one).
    """

    applied: dict[Key, tuple[str, int]] = field(default_factory=dict)
    waiting: dict[Key, str] = field(default_factory=dict)
    marks: dict[str, tuple[Any, int]] = field(default_factory=dict)

    def _same_state(self, key: Key, now: Patches) -> bool:
        mark, later = self.marks.get(key[0]), now.marks.get(key[0])
        return mark is not None and later is not None and mark[0] is later[0]

    def arrived(self, key: Key, newest_seq: int, now: Patches) -> bool:
        """Whether ``key``, applied in ``now``, is a registration armed here arriving as its
        module was imported: waiting here, and none of its hooks registered since."""
        return (
            key in self.waiting
            and self._same_state(key, now)
            and newest_seq <= self.marks[key[0]][1]
        )

    def taking_in(self, ahead: Patches, after: Patches) -> Patches:
        """This baseline with what was applied or armed between ``ahead`` and ``after`` (a
        module- or session-scoped fixture set up for the test: the suite's, not the test's)."""
        applied = {
            **self.applied,
            **{k: v for k, v in after.applied.items() if k not in ahead.applied},
        }
        waiting = {
            **self.waiting,
            **{k: v for k, v in after.waiting.items() if k not in ahead.waiting},
        }
        marks = {**self.marks, **{k: v for k, v in after.marks.items() if ahead.marks.get(k) != v}}
        return Patches(applied, waiting, marks)

    def armed_since(self, now: Patches) -> dict[Key, str]:
        """The ``on_import`` targets waiting in ``now`` that were not waiting here."""
        return {
            k: by
            for k, by in now.waiting.items()
            if k not in self.waiting or not self._same_state(k, now)
        }


_NOTHING = Patches()


def _by(regs: Any) -> str:
    sources = dict.fromkeys(str(r.source) for r in regs)
    return f" by {', '.join(sources)}" if sources else ""


def patches() -> Patches:
    """Every target patched or waiting through the default or a namespace's registry.

    Run twice per test: modules are taken from ``sys.modules`` (none imported, nothing patched)
    and a registry with nothing applied or waiting costs two truth tests."""
    modules = sys.modules
    registry_module: Any = modules.get("spawnkit.hooks.registry")
    if registry_module is None:  # no hook engine imported: nothing can be patched
        return _NOTHING
    namespace_module: Any = modules.get("spawnkit.namespace")
    registries = [registry_module.HookRegistry._default]
    if namespace_module is not None:
        registries += [ns._hooks for ns in list(namespace_module.Namespace._registry.values())]
    found = Patches()
    for reg in registries:
        if reg is None or not (reg._state.applied or reg._state.waiting):
            continue
        with reg._lock:
            st = reg._state
            found.marks[reg.name] = (st, st.seq)
            for rec in st.applied.values():
                newest = max((r.seq for r in rec.regs), default=0)
                found.applied[(reg.name, rec.display)] = (_by(rec.regs), newest)
            for key in st.waiting:
                found.waiting[(reg.name, st.display[key])] = _by(st.regs.get(key, ()))
    return found


def here_records() -> dict[str, Any]:
    """This process's ``bootstrap_here()`` records by namespace (``launch._here``), if any."""
    here: Any = sys.modules.get("spawnkit.launch._here")
    return dict(here._applied) if here is not None else {}


def _line(key: Key, by: str) -> str:
    return f"{key[1]!r} patched through registry {key[0]!r}{by}"


def _armed_line(key: Key, by: str) -> str:
    return (
        f"{key[1]!r} registered with on_import=True through registry {key[0]!r}{by}, armed and "
        "waiting: it patches the target when its module is first imported, in whichever later "
        "test imports it"
    )


_FIX = (
    "Fix: request isolated_hooks in this test (isolated_hooks_for(namespace) for an engine's own "
    "namespace): its teardown undoes what bootstrap_here(), apply_plugin_hooks() or "
    "apply_hooks() applied or armed in the test; or call reset() on that registry before the "
    "test ends (for a fixture of the test that applies hooks: in its teardown, after its yield; "
    "unapply() keeps the registrations, which a later bootstrap_here() or apply_hooks() applies "
    "again), and the test's bootstrap_here() is forgotten: a later test's call loads its "
    "plugins afresh."
)


class Leftovers:
    """The patches earlier test bodies left applied (or armed), each with the test that left it."""

    def __init__(self) -> None:
        self.left: dict[Key, str] = {}
        self.armed: dict[Key, str] = {}  # on_import targets a body armed, still waiting

    def after_test(self, nodeid: str, before: Patches) -> str | None:
        """The warning for what the test ``nodeid`` applied or armed and left (None: nothing)."""
        now = patches()
        # an earlier test's armed registration that applied since: still that test's
        fired = {
            k: f"{who} (registered there with on_import=True, applied as its module was "
            "imported later)"
            for k, who in self.armed.items()
            if k in now.applied
        }
        self.armed = {k: who for k, who in self.armed.items() if k in now.waiting}
        self.left = {k: who for k, who in self.left.items() if k in now.applied}  # undone: gone
        self.left.update(fired)
        new = {
            k: by
            for k, (by, newest) in now.applied.items()
            if k not in before.applied and not before.arrived(k, newest, now)
        }
        armed = before.armed_since(now)
        if not new and not armed:
            return None
        self.left.update(dict.fromkeys(new, nodeid))
        self.armed.update(dict.fromkeys(armed, nodeid))
        return _warning(nodeid, new, armed)

    def left_by(self, nodeid: str) -> set[str]:
        """The registries through which the test ``nodeid`` left a patch applied or armed."""
        return {k[0] for k, who in [*self.left.items(), *self.armed.items()] if who == nodeid}

    def inherited(self) -> str | None:
        """The failure of an isolated test that starts with an earlier test's patches applied."""
        if not self.left and not self.armed:
            return None
        now = patches().applied
        found = [(k, now[k][0], who) for k, who in self.left.items() if k in now]
        found += [
            (k, now[k][0], f"{who} (registered there with on_import=True, applied later)")
            for k, who in self.armed.items()
            if k in now and k not in self.left
        ]
        if not found:
            return None
        lines = [
            f"isolated_hooks: {len(found)} hook patch(es) an earlier test applied are still "
            "applied as this test starts:",
            *(f"  - {_line(k, by)}, left by {who}" for k, by, who in found),
            "This test would run the hooked code while its registry reads empty, and pass or "
            "fail by which tests ran before it. Fix: request isolated_hooks in the test named "
            "(isolated_hooks_for(namespace) for an engine's own namespace): its teardown undoes "
            "what it applied; or call reset() on that registry before that test ends (unapply() "
            "keeps the registrations, which a later apply applies again).",
        ]
        return "\n".join(lines)


def _warning(nodeid: str, new: dict[Key, str], armed: dict[Key, str]) -> str:
    lines = []
    if new:
        lines += [
            f"{nodeid} applied {len(new)} hook patch(es) and left them applied (it does not use "
            "isolated_hooks):",
            *(f"  - {_line(k, by)}" for k, by in new.items()),
        ]
    if armed:
        lines += [
            f"{nodeid} armed {len(armed)} on_import hook(s) and left them waiting (it does not "
            "use isolated_hooks):",
            *(f"  - {_armed_line(k, by)}" for k, by in armed.items()),
        ]
    lines.append(
        "Every later test in this process runs the hooked code (an armed hook's once a test "
        "imports its module), so which tests pass depends on their order, and a later "
        "isolated_hooks test fails at setup. " + _FIX
    )
    return "\n".join(lines)
