"""In-process hook tests that cannot change the next test: isolation plus a leak check.

Why both: ``HookRegistry.isolated()`` gives a test a clean default registry
and undoes its patches, but a test can still patch through a registry the
isolation does not cover (an engine namespace's own ``ns.hooks``), and then
every later test in that worker runs against patched code; the failure
shows up far away, in a test that did nothing wrong.  So the fixture checks
and fails the *leaking* test instead.

What counts as a leak (precisely):

1. A target that a registry *other than* the isolated default registry
   (any namespace's registry) patched during the test and that is still
   patched when the test body returns.  The fixture unapplies such a
   registry on teardown when it had nothing applied before the test; a
   registry that already had patches is left alone and named in the failure.
2. A target patched through the isolated registry that still holds the
   patched object after the fixture restored it: something re-bound it, or
   the restore itself failed.

Patches made through the isolated registry are not leaks: restoring them is
the fixture's job, so a test never needs to call ``unapply()``.  The
bootstrap phase flags (``spawnkit.spec._phase``) and the default namespace's
plugin-loading state are restored too, since ``apply_plugin_hooks()`` in a
test flips them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spawnkit.hooks.registry import HookRegistry

__all__ = ["HookIsolation", "HookLeak", "format_leaks"]

_ABSENT: Any = object()


@dataclass(frozen=True)
class HookLeak:
    """One leaked patch: where, through which registry, and by whom."""

    registry: str
    target: str
    sources: tuple[str, ...] = ()
    reason: str = ""
    restored: bool | None = False  # None: not yet, the fixture restores it at teardown

    def describe(self) -> str:
        by = f" by {', '.join(self.sources)}" if self.sources else ""
        if self.restored is None:
            fixed = " (the fixture restores it at teardown)"
        elif self.restored:
            fixed = " (restored by the fixture)"
        else:
            fixed = " (NOT restored: that registry had patches before the test, so unapply it)"
        return f"{self.target!r} patched through registry {self.registry!r}{by}: {self.reason}" + (
            fixed
        )


@dataclass
class _Installed:
    target: str
    owner: Any
    attr: str
    raw: Any
    bindings: list[tuple[str, str]] = field(default_factory=list)


def _registries() -> dict[int, HookRegistry]:
    """Every registry reachable from a declared namespace, plus the default one."""
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
    parts = qualname.split(".")
    owner: Any = mod
    for part in parts[:-1]:
        owner = getattr(owner, part, _ABSENT)
        if owner is _ABSENT:
            return None
    return owner, parts[-1]


def _raw(owner: Any, attr: str) -> Any:
    try:
        return vars(owner).get(attr, _ABSENT)
    except TypeError:
        return getattr(owner, attr, _ABSENT)


def _reset_default_plugins() -> None:
    from spawnkit.namespace import default_namespace

    manager = default_namespace()._plugins
    if manager is not None:
        manager.reset_for_tests()


class HookIsolation:
    """Drives one isolated hook test: :meth:`start`, the test, :meth:`leaks`, :meth:`finish`."""

    def __init__(self) -> None:
        self.registry: HookRegistry | None = None
        self._cm: Any = None
        self._baseline: dict[int, set[str]] = {}
        self._phase: tuple[bool, bool, Any] = (False, False, None)
        self.reported: list[HookLeak] = []

    def start(self) -> HookRegistry:
        from spawnkit.hooks.registry import HookRegistry
        from spawnkit.spec import _phase

        self._phase = (_phase._in_worker, _phase._hooks_applied, _phase._worker_namespace)
        self._baseline = {
            key: {t.target for t in reg.applied_targets()} for key, reg in _registries().items()
        }
        _reset_default_plugins()
        self._cm = HookRegistry.default().isolated()
        self.registry = self._cm.__enter__()
        return self.registry

    def _outside_leaks(self) -> list[tuple[HookRegistry, list[HookLeak]]]:
        out: list[tuple[HookRegistry, list[HookLeak]]] = []
        for key, reg in _registries().items():
            if reg is self.registry:
                continue
            before = self._baseline.get(key, set())
            new = [t for t in reg.applied_targets() if t.target not in before]
            if new:
                leaks = [
                    HookLeak(
                        reg.name,
                        t.target,
                        tuple(str(s) for s in t.sources),
                        "applied outside the isolated registry and still patched at the end of "
                        "the test",
                        None if not before else False,
                    )
                    for t in new
                ]
                out.append((reg, leaks))
        return out

    def leaks(self) -> list[HookLeak]:
        """Patches that would outlive the test if it ended now (rule 1 of the module docstring)."""
        return [leak for _, leaks in self._outside_leaks() for leak in leaks]

    def finish(self) -> list[HookLeak]:
        """Restore everything; return every leak found (rule 1 and rule 2)."""
        from spawnkit.errors import HookError
        from spawnkit.spec import _phase

        found: list[HookLeak] = []
        installed: list[_Installed] = []
        registry = self.registry
        if registry is not None:
            for t in registry.applied_targets():
                where = _owner_of(t.module, t.qualname)
                if where is None:
                    continue
                owner, attr = where
                installed.append(
                    _Installed(t.target, owner, attr, _raw(owner, attr), list(t.propagated_to))
                )
        restore_error: BaseException | None = None
        if self._cm is not None:
            try:
                self._cm.__exit__(None, None, None)
            except HookError as exc:
                restore_error = exc
            self._cm = None
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
                        registry.name if registry is not None else "default",
                        item.target,
                        (),
                        "still holds the patched object after the isolated registry was "
                        f"restored{bound}"
                        + (f"; restore failed: {restore_error}" if restore_error else ""),
                    )
                )
        if restore_error is not None and not found:
            found.append(HookLeak("default", "<unapply>", (), f"restore failed: {restore_error}"))
        for reg, leaks in self._outside_leaks():
            fixed = False
            if not self._baseline.get(id(reg)):
                try:
                    reg.unapply()
                    fixed = True
                except HookError:
                    fixed = False
            found.extend(
                HookLeak(leak.registry, leak.target, leak.sources, leak.reason, fixed)
                for leak in leaks
            )
        _phase._in_worker, _phase._hooks_applied, _phase._worker_namespace = self._phase
        _reset_default_plugins()
        return found


def format_leaks(leaks: list[HookLeak], *, when: str) -> str:
    """The failure message: what leaked, why it matters, how to fix it."""
    lines = [f"isolated_hooks: {len(leaks)} hook patch(es) leaked {when}:"]
    lines.extend(f"  - {leak.describe()}" for leak in leaks)
    lines.append(
        "A leaked patch changes every later test in this process. Patch through the registry "
        "the fixture yields (isolated_hooks.register(...); isolated_hooks.apply_hooks()), "
        "or call unapply() on the other registry (e.g. namespace.hooks.unapply()) before the "
        "test ends."
    )
    return "\n".join(lines)
