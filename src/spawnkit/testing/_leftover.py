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

A module ``provide_module()`` placed is a patch too (of ``sys.modules``): left by a test, an
engine's ``try: import fastkern.gemm`` in every later test finds the stub.  And so is a
registration the body made and left, neither applied nor removed (a plugin module imported,
whose decorators register; ``unapply()``, which keeps them): the next test that applies that
registry runs it beside its own (:func:`registered_since`, by the registry's state and ``seq``
as the setup began).

A suite that never applies a hook pays one ``sys.modules`` look per test; one that does, one
look per namespace registry.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HookLeakWarning",
    "Left",
    "Leftovers",
    "Patches",
    "declared_since",
    "forget_registered",
    "here_records",
    "own_namespace",
    "patches",
    "registered_since",
    "registries",
]

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
    ``provided``: modules ``provide_module()`` placed in ``sys.modules``, with who provided them;
    ``marks``: per registry, its state object and its ``seq`` counter then (a registration made
    later has a higher ``seq`` in the same state; ``reset()`` starts a new one; ``None``: a
    namespace's registry not created yet).
    """

    applied: dict[Key, tuple[str, int]] = field(default_factory=dict)
    waiting: dict[Key, str] = field(default_factory=dict)
    marks: dict[str, tuple[Any, int]] = field(default_factory=dict)
    provided: dict[Key, str] = field(default_factory=dict)

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
        provided = {
            **self.provided,
            **{k: v for k, v in after.provided.items() if k not in ahead.provided},
        }
        return Patches(applied, waiting, marks, provided)

    def armed_since(self, now: Patches) -> dict[Key, str]:
        """The ``on_import`` targets waiting in ``now`` that were not waiting here."""
        return {
            k: by
            for k, by in now.waiting.items()
            if k not in self.waiting or not self._same_state(k, now)
        }


def _by(regs: Any) -> str:
    sources = dict.fromkeys(str(r.source) for r in regs)
    return f" by {', '.join(sources)}" if sources else ""


def registries() -> list[Any]:
    """The default registry (if made) and every namespace's, with the namespaces whose
    registry is not made yet as their names (empty: the hook engine is not imported)."""
    modules = sys.modules
    registry_module: Any = modules.get("spawnkit.hooks.registry")
    if registry_module is None:  # no hook engine imported: nothing can be registered
        return []
    namespace_module: Any = modules.get("spawnkit.namespace")
    found: list[Any] = [registry_module.HookRegistry._default]
    if namespace_module is not None:
        found += [
            ns._hooks if ns._hooks is not None else ns.name
            for ns in list(namespace_module.Namespace._registry.values())
        ]
    # the default namespace's registry is the default one: each registry once
    return list({id(reg): reg for reg in found if reg is not None}.values())


def patches() -> Patches:
    """Every target patched or waiting, and module provided, through the default or a
    namespace's registry; and each registry's mark.

    Run twice per test: modules are taken from ``sys.modules`` (none imported, nothing patched)
    and a registry with nothing applied, waiting or provided costs three truth tests."""
    found = Patches()
    for reg in registries():
        if isinstance(reg, str):  # its namespace's registry is not made yet
            found.marks.setdefault(reg, (None, 0))
            continue
        st = reg._state
        found.marks[reg.name] = (st, st.seq)
        if not (st.applied or st.waiting or st.provided):
            continue
        with reg._lock:
            st = reg._state
            found.marks[reg.name] = (st, st.seq)
            for rec in st.applied.values():
                newest = max((r.seq for r in rec.regs), default=0)
                found.applied[(reg.name, rec.display)] = (_by(rec.regs), newest)
            for key in st.waiting:
                found.waiting[(reg.name, st.display[key])] = _by(st.regs.get(key, ()))
            for name, placed in st.provided.items():
                if placed.state == "provided":
                    found.provided[(reg.name, name)] = f" by {placed.provision.source}"
    return found


def own_namespace(name: str) -> None:
    """Note a namespace ``spawnkit_namespace`` made: a fresh name no later test declares, so
    what is left registered on it reaches no one."""
    _FRESH.add(name)


_FRESH: set[str] = set()


def _left_since(before: Patches, skip: frozenset[str]) -> Iterator[tuple[Any, Any, int]]:
    """``(registry, its state, seq then)`` per registry with registrations made since ``before``
    (the registry's lock held), but those named in ``skip`` and ``spawnkit_namespace``'s."""
    for reg in registries():
        if isinstance(reg, str) or reg.name in skip or reg.name in _FRESH:
            continue
        mark = before.marks.get(reg.name)
        with reg._lock:
            st = reg._state
            since = mark[1] if mark is not None and mark[0] is st else 0
            if st.seq > since:
                yield reg, st, since


def registered_since(before: Patches, skip: frozenset[str] = frozenset()) -> dict[Key, list[str]]:
    """The registrations (hooks, ``provide_module()`` calls) made since ``before`` and left
    neither applied, nor armed, nor removed: a later apply of that registry applies them.

    A namespace first declared since counts too: under a fixed name (``Namespace("myengine")``
    in the test) it stays declared, and a later test declaring that name gets it, these
    registrations included; not ``spawnkit_namespace``'s (a fresh name, :func:`own_namespace`).
    ``skip``: registry names not to read (an ``isolated_hooks`` test's own)."""
    found: dict[Key, list[str]] = {}
    for reg, st, since in _left_since(before, skip):
        for key, regs in st.regs.items():
            rec = st.applied.get(key)
            seqs = rec.seqs if rec is not None else ()
            left = [r.describe() for r in regs if r.seq > since and r.seq not in seqs]
            if left and key not in st.waiting:
                found.setdefault((reg.name, st.display[key]), []).extend(left)
        for name, prov in st.provides.items():
            if prov.seq > since and name not in st.provided:
                what = f"provide_module({name!r}) of {prov.what} from {prov.source}"
                found.setdefault((reg.name, name), []).append(what)
    return found


def forget_registered(before: Patches, skip: frozenset[str]) -> None:
    """Remove what :func:`registered_since` finds (an ``isolated_hooks`` test's leak through a
    registry it did not isolate), so no later apply of that registry runs it."""
    for _reg, st, since in _left_since(before, skip):
        st.touch()
        for key, regs in st.regs.items():
            rec = st.applied.get(key)
            seqs = rec.seqs if rec is not None else ()
            if key not in st.waiting:
                st.regs[key] = [r for r in regs if r.seq <= since or r.seq in seqs]
        for name in [n for n, p in st.provides.items() if p.seq > since]:
            if name not in st.provided:
                del st.provides[name]


def declared_since(before: Patches, keys: Iterable[Key]) -> list[str]:
    """The registries of ``keys`` whose namespace was first declared since ``before``."""
    return sorted({k[0] for k in keys if k[0] not in before.marks and k[0] != "spawnkit"})


def here_records() -> dict[str, Any]:
    """This process's ``bootstrap_here()`` records by namespace (``launch._here``), if any."""
    here: Any = sys.modules.get("spawnkit.launch._here")
    return dict(here._applied) if here is not None else {}


def _line(key: Key, by: str) -> str:
    return f"{key[1]!r} patched through registry {key[0]!r}{by}"


def _placed_line(key: Key, by: str) -> str:
    return (
        f"module {key[1]!r} placed in sys.modules by provide_module() through registry "
        f"{key[0]!r}{by}: every later test imports it (an engine's `try: import ...` takes "
        "the branch of a machine that has it)"
    )


def _armed_line(key: Key, by: str) -> str:
    return (
        f"{key[1]!r} registered with on_import=True through registry {key[0]!r}{by}, armed and "
        "waiting: it patches the target when its module is first imported, in whichever later "
        "test imports it"
    )


def _registered_line(key: Key, what: list[str]) -> str:
    return f"{key[1]!r} through registry {key[0]!r}: {'; '.join(what)}"


def declared_note(names: list[str]) -> str:
    """Why registrations on a namespace the test declared itself are left for later tests."""
    listed = ", ".join(repr(n) for n in names)
    return (
        f"Namespace {listed} was first declared in this test and stays declared for the "
        "process: a later test's Namespace() of that name returns this one, these registrations "
        "included (other settings there raise NamespaceError). For a namespace of the test's "
        "own, request the spawnkit_namespace fixture (a fresh name); an engine's namespace is "
        "declared in its module and isolated with isolated_hooks_for(namespace)."
    )


_FIX = (
    "Fix: request isolated_hooks in this test (isolated_hooks_for(namespace) for an engine's own "
    "namespace): its teardown undoes what bootstrap_here(), apply_plugin_hooks() or "
    "apply_hooks() applied, armed or provided in the test, and forgets what the test "
    "registered; or call reset() on that registry before the test ends (for a fixture of the "
    "test that applies hooks: in its teardown, after its yield; unapply() keeps the "
    "registrations, which a later bootstrap_here() or apply_hooks() applies again), and the "
    "test's bootstrap_here() is forgotten: a later test's call loads its plugins afresh."
)


class Left:
    """What one test left: patches applied, hooks armed, modules provided, registrations."""

    def __init__(
        self,
        applied: dict[Key, str],
        armed: dict[Key, str],
        provided: dict[Key, str],
        registered: dict[Key, list[str]],
        declared: Iterable[str] = (),
    ) -> None:
        self.applied, self.armed, self.provided = applied, armed, provided
        self.registered = registered
        self.declared = list(declared)  # registered on: namespaces first declared in the test

    def __bool__(self) -> bool:
        return bool(self.applied or self.armed or self.provided or self.registered)


class Leftovers:
    """The patches earlier test bodies left applied (or armed, or provided), each with the test
    that left it."""

    def __init__(self) -> None:
        self.left: dict[Key, str] = {}
        self.armed: dict[Key, str] = {}  # on_import targets a body armed, still waiting
        self.placed: dict[Key, str] = {}  # modules a body's provide_module() left in place

    def after_test(self, nodeid: str, before: Patches) -> str | None:
        """The warning for what the test ``nodeid`` applied, armed, provided or registered
        and left (None: nothing)."""
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
        self.placed = {k: who for k, who in self.placed.items() if k in now.provided}
        registered = registered_since(before)
        left = Left(
            {
                k: by
                for k, (by, newest) in now.applied.items()
                if k not in before.applied and not before.arrived(k, newest, now)
            },
            before.armed_since(now),
            {k: by for k, by in now.provided.items() if k not in before.provided},
            registered,
            declared_since(before, registered),
        )
        if not left:
            return None
        self.left.update(dict.fromkeys(left.applied, nodeid))
        self.armed.update(dict.fromkeys(left.armed, nodeid))
        self.placed.update(dict.fromkeys(left.provided, nodeid))
        return _warning(nodeid, left)

    def left_by(self, nodeid: str) -> set[str]:
        """The registries through which the test ``nodeid`` left a patch applied, armed or
        a module provided."""
        return {
            k[0]
            for k, who in [*self.left.items(), *self.armed.items(), *self.placed.items()]
            if who == nodeid
        }

    def inherited(self) -> str | None:
        """The failure of an isolated test that starts with an earlier test's patches applied
        (or modules provided)."""
        if not self.left and not self.armed and not self.placed:
            return None
        current = patches()
        now = current.applied
        found = [(_line(k, now[k][0]), who) for k, who in self.left.items() if k in now]
        found += [
            (_line(k, now[k][0]), f"{who} (registered there with on_import=True, applied later)")
            for k, who in self.armed.items()
            if k in now and k not in self.left
        ]
        found += [
            (_placed_line(k, current.provided[k]), who)
            for k, who in self.placed.items()
            if k in current.provided
        ]
        if not found:
            return None
        lines = [
            f"isolated_hooks: {len(found)} hook patch(es) an earlier test applied are still "
            "applied as this test starts:",
            *(f"  - {line}, left by {who}" for line, who in found),
            "This test would run the hooked code while its registry reads empty, and pass or "
            "fail by which tests ran before it. Fix: request isolated_hooks in the test named "
            "(isolated_hooks_for(namespace) for an engine's own namespace): its teardown undoes "
            "what it applied; or call reset() on that registry before that test ends (unapply() "
            "keeps the registrations, which a later apply applies again).",
        ]
        return "\n".join(lines)


def _warning(nodeid: str, left: Left) -> str:
    lines = []
    if left.applied:
        lines += [
            f"{nodeid} applied {len(left.applied)} hook patch(es) and left them applied (it "
            "does not use isolated_hooks):",
            *(f"  - {_line(k, by)}" for k, by in left.applied.items()),
        ]
    if left.armed:
        lines += [
            f"{nodeid} armed {len(left.armed)} on_import hook(s) and left them waiting (it does "
            "not use isolated_hooks):",
            *(f"  - {_armed_line(k, by)}" for k, by in left.armed.items()),
        ]
    if left.provided:
        lines += [
            f"{nodeid} provided {len(left.provided)} module(s) with provide_module() and left "
            "them in place (it does not use isolated_hooks):",
            *(f"  - {_placed_line(k, by)}" for k, by in left.provided.items()),
        ]
    if left.registered:
        lines += [
            f"{nodeid} registered {len(left.registered)} target(s)' hook(s) or module(s) and "
            "left them registered, not applied (it does not use isolated_hooks):",
            *(f"  - {_registered_line(k, what)}" for k, what in left.registered.items()),
            "A later test's bootstrap_here(), apply_plugin_hooks() or apply_hooks() of that "
            "registry applies them beside its own (a hook of a module purged since too): that "
            "test runs hooks it never registered.",
            *([declared_note(left.declared)] if left.declared else []),
        ]
    lines.append(
        "Every later test in this process runs what is left (an armed hook's once a test "
        "imports its module), so which tests pass depends on their order, and a later "
        "isolated_hooks test fails at setup on a patch or module left. " + _FIX
    )
    return "\n".join(lines)
