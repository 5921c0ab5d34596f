"""In-process hook tests that cannot change the next test: isolation plus a leak check.

``HookRegistry.isolated()`` undoes the isolated registries' patches, but a test may patch through
another registry (a namespace's ``ns.hooks``), and a later test then fails far away.  So the
fixture fails the *leaking* test.  A leak is:

1. a target a non-isolated registry patched, or a module it provided (``provide_module()``),
   during the test and still patched (in ``sys.modules``) when the body returns (such a
   registry with nothing applied, waiting or provided before is unapplied; otherwise it is
   named).  Not an ``on_import`` registration armed before the test that applied as the test
   imported its module: the suite's baseline arriving late (``_leftover.Patches.arrived``);
2. a target of an isolated registry still holding the patched object after the restore;
3. a registration (hook, ``provide_module()``) the test made through a registry it did not
   isolate, left neither applied nor removed (``_leftover.registered_since``; a plugin module
   imported whose decorators register on another namespace): a later test's apply of that
   registry ran it, unsaid.  The fixture removes it at teardown.

The phase flags, isolated namespaces' plugin-loading state and their ``bootstrap_here()``
record (``launch._here``) are restored too; and a module an isolated registry provided after
the test's code had missed it is named (``_provisions``).  An ``on_import`` hook armed before
the test on an isolated registry whose module the test imported is applied once its state is
back (:meth:`HookIsolation.apply_arrived`): the finder told only the test's empty state.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spawnkit import _reference
from spawnkit.spec._namespace_config import DEFAULT_NAMESPACE_NAME
from spawnkit.testing._leftover import (
    Patches,
    declared_note,
    declared_since,
    forget_registered,
    patches,
    registered_since,
)
from spawnkit.testing._provisions import TriedImports, message

if TYPE_CHECKING:
    from spawnkit.hooks.registry import HookRegistry
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["HookIsolation", "HookLeak", "format_leaks", "reset_plugins"]

_ABSENT: Any = object()


@dataclass(frozen=True)
class HookLeak:
    """One leaked patch: where, through which registry, and by whom."""

    registry: str
    target: str
    sources: tuple[str, ...] = ()
    reason: str = ""
    restored: bool | None = False  # None: not yet, the fixture restores it at teardown
    what: str = "patched"  # or "registered": left registered, not applied

    def describe(self) -> str:
        by = f" by {', '.join(self.sources)}" if self.sources else ""
        if self.what != "patched" and self.sources:
            by = f" ({'; '.join(self.sources)})"
        if self.restored is None:
            fixed = " (the fixture restores it at teardown)"
        elif self.restored:
            fixed = " (restored by the fixture)"
        else:
            fixed = (
                " (NOT restored: that registry had patches, or on_import hooks armed, before the "
                "test, which unapplying it would undo too)"
            )
        if self.what != "patched" and self.restored is not False:
            fixed = (
                " (the fixture removes them at teardown)"
                if self.restored is None
                else (" (removed by the fixture)")
            )
        head = f"{self.target!r} {self.what} through registry {self.registry!r}{by}"
        return f"{head}: {self.reason}{fixed}"


@dataclass
class _Installed:
    target: str
    owner: Any
    attr: str
    raw: Any
    bindings: list[tuple[str, str]] = field(default_factory=list)


def _registries() -> dict[int, HookRegistry]:
    from spawnkit.hooks.registry import HookRegistry
    from spawnkit.namespace import Namespace

    found: dict[int, HookRegistry] = {}
    default = HookRegistry.default()
    found[id(default)] = default
    for ns in list(Namespace._registry.values()):
        registry = ns._hooks
        if registry is not None:
            found[id(registry)] = registry
    return found


def _owner_of(module: str, qualname: str) -> tuple[Any, str] | None:
    """(object holding the attribute, attribute name) without importing anything."""
    mod = sys.modules.get(module)
    if mod is None:
        return None
    path, _, attr = qualname.rpartition(".")
    try:
        return _reference.walk(mod, path, module), attr
    except _reference.MissingAttribute:
        return None


def _raw(owner: Any, attr: str) -> Any:
    try:
        return vars(owner).get(attr, _ABSENT)
    except TypeError:
        return getattr(owner, attr, _ABSENT)


def _imported_waits(registry: HookRegistry) -> list[str]:
    """The imported modules that ``registry``'s waiting ``on_import`` targets watch."""
    from spawnkit.hooks import _resolve

    with registry._lock:
        st = registry._state
        paths = [st.paths[key] for key in st.waiting]
    names = (name for path in paths for name in _resolve.watch_names(path))
    return [name for name in dict.fromkeys(names) if name in sys.modules]


def reset_plugins(ns: Namespace) -> None:
    manager = ns._plugins
    if manager is None and ns.name == DEFAULT_NAMESPACE_NAME:
        from spawnkit.hooks.plugins import PluginManager

        manager = PluginManager.default()  # the module-level API's, used before ns.plugins was
    if manager is not None:
        manager.reset_for_tests()


@dataclass
class _Isolated:
    namespace: Namespace
    registry: HookRegistry
    cm: Any
    here: Any = None  # the namespace's bootstrap_here() record before the test (launch._here)


class HookIsolation:
    """One isolated hook test: :meth:`start`, :meth:`isolate`, :meth:`leaks`, :meth:`finish`."""

    def __init__(self) -> None:
        self._isolated: list[_Isolated] = []
        self._begun = False
        self._baseline: dict[int, set[str]] = {}
        self._before = Patches()  # what was applied and armed as the test began
        self._phase: tuple[bool, bool, Any] = (False, False, None)
        self._tried = TriedImports()
        self._restored: list[HookRegistry] = []  # for apply_arrived(), after finish()
        self.reported: list[HookLeak] = []

    @property
    def registry(self) -> HookRegistry | None:
        """The first isolated registry (the default one for :meth:`start`), if any."""
        return self._isolated[0].registry if self._isolated else None

    @property
    def registries(self) -> list[HookRegistry]:
        return [i.registry for i in self._isolated]

    def begin(self) -> None:
        """Record what is patched now: anything patched later outside isolation is a leak."""
        from spawnkit.spec import _phase

        if self._begun:
            return
        self._begun = True
        self._phase = _phase.snapshot()
        self._baseline = {
            key: {t.target for t in reg.applied_targets()} for key, reg in _registries().items()
        }
        self._before = patches()
        self._tried.arm()  # which imports missed a module provided later (_provisions)

    def isolate(self, namespace: Namespace | NamespaceConfig | str | None = None) -> HookRegistry:
        """A clean registry for ``namespace`` (``None``: default) until :meth:`finish`."""
        from spawnkit.namespace import get_namespace

        self.begin()
        ns = get_namespace(namespace)
        for done in self._isolated:
            if done.namespace is ns:
                return done.registry
        from spawnkit.launch import _here

        reset_plugins(ns)
        cm = ns.hooks.isolated()
        registry = cm.__enter__()
        self._isolated.append(_Isolated(ns, registry, cm, _here.applied_here(ns)))
        return registry

    def start(self) -> HookRegistry:
        return self.isolate(None)

    def _outside_leaks(self) -> list[tuple[HookRegistry, list[HookLeak]]]:
        out: list[tuple[HookRegistry, list[HookLeak]]] = []
        isolated = {id(r) for r in self.registries}
        now = patches()
        for key, reg in _registries().items():
            if key in isolated:
                continue
            before = self._baseline.get(key, set())
            new = [
                t
                for t in reg.applied_targets()
                if t.target not in before and not self._arrived(reg.name, t.target, now)
            ]
            restored = None if not self._had_any(reg) else False
            leaks = [
                HookLeak(
                    reg.name,
                    t.target,
                    tuple(str(s) for s in t.sources),
                    "applied outside the isolated registry and still patched at the end of "
                    "the test",
                    restored,
                )
                for t in new
            ]
            leaks += [
                HookLeak(
                    reg.name,
                    name,
                    (by.removeprefix(" by "),),
                    "a module provide_module() placed outside the isolated registry, still in "
                    "sys.modules at the end of the test: every later test imports it",
                    restored,
                )
                for (registry, name), by in now.provided.items()
                if registry == reg.name and (registry, name) not in self._before.provided
            ]
            if leaks:
                out.append((reg, leaks))
        return out

    def _arrived(self, registry: str, target: str, now: Patches) -> bool:
        """An on_import registration armed before the test, applied as the test imported its
        module: the suite's baseline (or an earlier test's leftover, named at that test)."""
        key = (registry, target)
        return key in now.applied and self._before.arrived(key, now.applied[key][1], now)

    def _had_any(self, reg: HookRegistry) -> bool:
        """The registry had patches applied, or on_import hooks armed, as the test began."""
        return bool(self._baseline.get(id(reg))) or any(
            name == reg.name for name, _ in [*self._before.waiting, *self._before.provided]
        )

    def missed_provisions(self) -> list[tuple[str, str]]:
        """``(guard policy, message)`` per isolated namespace with a module ``provide_module()``
        placed after the test's code had missed it (``_provisions``); the policy as a worker's."""
        from spawnkit.bootstrap import guard

        found: list[tuple[str, str]] = []
        for iso in self._isolated:
            missed = self._tried.missed(iso.registry)
            if missed:
                cfg = iso.namespace.config
                env = os.environ.get(cfg.guard_var)
                policy = guard.resolve_policy(cfg.guard_policy, env, var=cfg.guard_var)
                if policy != "off":
                    found.append((policy, message(missed, cfg.guard_var)))
        return found

    def leaks(self) -> list[HookLeak]:
        """Patches that would outlive the test if it ended now (rule 1 of the module docstring)."""
        found = [leak for _, leaks in self._outside_leaks() for leak in leaks]
        return found + self._registered_leaks(None)

    def _registered_leaks(self, restored: bool | None) -> list[HookLeak]:
        """Registrations the test made through a registry it did not isolate and left neither
        applied nor removed (rule 3): the next apply of that registry, in a later test, runs
        them; on a namespace the test declared itself, a later ``Namespace()`` of its name too."""
        left = registered_since(self._before, frozenset(r.name for r in self.registries))
        declared = set(declared_since(self._before, left))
        return [
            HookLeak(
                key[0],
                key[1],
                tuple(what),
                "left registered (not applied) on a registry this test did not isolate: a later "
                "test's apply of that registry (apply_hooks(), bootstrap_here()) runs it beside "
                "its own; reset() that registry, or isolate it too"
                + (f". {declared_note([key[0]])}" if key[0] in declared else ""),
                restored,
                "registered",
            )
            for key, what in left.items()
        ]

    def finish(self) -> list[HookLeak]:
        """Restore everything; return every leak found (rule 1 and rule 2)."""
        from spawnkit.errors import HookError
        from spawnkit.spec import _phase

        self._tried.disarm()
        found = self._registered_leaks(True)
        forget_registered(self._before, frozenset(r.name for r in self.registries))
        isolated, self._isolated = self._isolated, []
        self._restored = [iso.registry for iso in isolated]
        for iso in reversed(isolated):
            found.extend(self._restore(iso))
        for reg, leaks in self._outside_leaks():
            fixed = False
            if not self._had_any(reg):
                try:
                    reg.unapply()
                    fixed = True
                except HookError:
                    fixed = False
            found.extend(
                HookLeak(leak.registry, leak.target, leak.sources, leak.reason, fixed)
                for leak in leaks
            )
        _phase.restore(self._phase)
        from spawnkit.launch import _here

        for iso in isolated:
            reset_plugins(iso.namespace)
            # A bootstrap_here() in the test applied through the isolated registry, whose
            # patches are undone now: its record would have a later call return "applied".
            _here.put_back(iso.namespace, iso.here)
        return found

    def apply_arrived(self) -> None:
        """Apply the restored registries' ``on_import`` hooks whose module the test imported.

        The import finder told the registry while the test's empty state was in place, which
        waited for nothing, and no later import tells the restored one: the suite's hook (armed
        in a ``conftest.py``) would wait for good, ``status()`` "pending", and every later test
        would run that module unhooked.  Applied as the finder would have (a strict failure
        raises, as it would have in the ``import``); a module gone from ``sys.modules`` again
        is left to its next import.
        """
        restored, self._restored = self._restored, []
        for registry in restored:
            for name in _imported_waits(registry):
                registry._module_imported(name)  # the finder's call after a first import

    @staticmethod
    def _restore(iso: _Isolated) -> list[HookLeak]:
        """Leave one isolated registry; rule 2 leaks of it (and a failed restore)."""
        from spawnkit.errors import HookError

        found: list[HookLeak] = []
        installed: list[_Installed] = []
        registry = iso.registry
        for t in registry.applied_targets():
            where = _owner_of(t.module, t.qualname)
            if where is None:
                continue
            owner, attr = where
            installed.append(
                _Installed(t.target, owner, attr, _raw(owner, attr), list(t.propagated_to))
            )
        restore_error: BaseException | None = None
        try:
            iso.cm.__exit__(None, None, None)
        except HookError as exc:
            restore_error = exc
        for item in installed:
            still = _raw(item.owner, item.attr) is item.raw and item.raw is not _ABSENT
            stale = [
                f"{m}.{n}"
                for m, n in item.bindings
                if item.raw is not _ABSENT
                and m in sys.modules
                and vars(sys.modules[m]).get(n, _ABSENT) is item.raw
            ]
            if still or stale:
                bound = f" (still bound at {', '.join(stale)})" if stale else ""
                found.append(
                    HookLeak(
                        registry.name,
                        item.target,
                        (),
                        "still holds the patched object after the isolated registry was "
                        f"restored{bound}"
                        + (f"; restore failed: {restore_error}" if restore_error else ""),
                    )
                )
        if restore_error is not None and not found:
            found.append(
                HookLeak(registry.name, "<unapply>", (), f"restore failed: {restore_error}")
            )
        return found


def format_leaks(leaks: list[HookLeak], *, when: str) -> str:
    """The failure message: what leaked, why it matters, how to fix it."""
    lines = [f"isolated_hooks: {len(leaks)} hook patch(es) leaked {when}:"]
    lines.extend(f"  - {leak.describe()}" for leak in leaks)
    lines.append(
        "A leaked patch changes every later test in this process. Patch through the registry "
        "the fixture yields (isolated_hooks.register(...); isolated_hooks.apply_hooks()), "
        "isolate that namespace too (isolated_hooks_for(namespace)), or call unapply() on the "
        "other registry (e.g. namespace.hooks.unapply()) before the test ends."
        + (
            " A registration left: reset() that registry before the test ends (unapply() keeps "
            "registrations)."
            if any(leak.what == "registered" for leak in leaks)
            else ""
        )
    )
    return "\n".join(lines)
