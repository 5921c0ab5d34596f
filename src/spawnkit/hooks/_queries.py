"""The read-only half of ``HookRegistry``: what is registered, applied, pending or stale."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, cast

from spawnkit.hooks import _apply, _conflicts, _decide, _resolve, _state
from spawnkit.hooks._chain import is_async_callable
from spawnkit.hooks._hybrid import hybridmethod
from spawnkit.hooks._journal import ABSENT
from spawnkit.hooks._propagate import Rebind, StaleHolder, find_holders
from spawnkit.hooks.types import (
    AppliedTarget,
    HookSource,
    HookState,
    HookStatus,
    HookType,
    Registration,
)

__all__: list[str] = []


class RegistryQueries:
    """Queries over a registry's state; ``HookRegistry`` adds registering and applying."""

    _lock: threading.RLock
    _state: _state.State

    def _key(self, target: str) -> str:
        return _resolve.parse_target(target).key

    @hybridmethod
    def is_hook_applied(
        self, target: str, hook: Callable[..., Any] | str, hook_type: HookType | str | None = None
    ) -> bool:
        """Whether ``hook`` is in the chain installed on ``target`` right now (as ``hook_type``)."""
        htype = None if hook_type is None else _resolve.coerce_hook_type(hook_type)
        with self._lock:
            rec = self._state.applied.get(self._key(target))
            if (
                rec is None
                or vars(rec.res.owner).get(rec.res.attr, ABSENT) is not rec.installed_raw
            ):
                return False
            return any(
                (r.hook is hook or r.hook == hook or obj is hook)
                and (htype is None or r.hook_type is htype)
                for r, obj in zip(rec.regs, rec.hooks, strict=True)
            )

    @hybridmethod
    def applied_targets(self) -> list[AppliedTarget]:
        """Patched targets in the order they were applied, with their hooks and sources."""
        with self._lock:
            return [
                AppliedTarget(
                    target=rec.display,
                    module=rec.res.module,
                    qualname=rec.res.qualname,
                    kind=_kind_name(rec),
                    hooks=rec.regs,
                    propagated_to=tuple((m, label) for m, _, _, label in rec.bindings),
                )
                for rec in self._state.applied.values()
            ]

    @hybridmethod
    def registered_targets(self) -> list[str]:
        """Targets with at least one registration, in first-registration order."""
        with self._lock:
            st = self._state
            return [st.display[k] for k, regs in st.regs.items() if regs]

    @hybridmethod
    def status(self) -> list[HookStatus]:
        """Where every registration (and provided module) stands, in registration order."""
        with self._lock:
            st = self._state
            rows: list[tuple[int, HookStatus]] = []
            for name, prov in st.provides.items():
                state, reason = _decide.provision_state(st, name)
                rows.append(
                    (prov.seq, _status(name, prov.what, "PROVIDE", prov.source, state, reason))
                )
            for key, regs in st.regs.items():
                for reg in regs:
                    state, reason = _decide.state_of(st, key, reg)
                    status = _status(
                        reg.target, reg.hook_name, reg.hook_type.name, reg.source, state, reason
                    )
                    rows.append((reg.seq, status))
            return [row for _, row in sorted(rows, key=lambda r: r[0])]

    @hybridmethod
    def registrations(self, target: str | None = None) -> list[Registration]:
        """All registrations (or those of one target) in registration order."""
        with self._lock:
            st = self._state
            if target is not None:
                return list(st.regs.get(self._key(target), []))
            return sorted((r for regs in st.regs.values() for r in regs), key=lambda r: r.seq)

    @hybridmethod
    def conflicts(self) -> list[str]:
        """Each conflict among the registrations, as ``apply_hooks()`` warns about them."""
        with self._lock:
            return _conflicts.messages(self._state)

    @hybridmethod
    def target_modules(self, *, eager: bool = False) -> dict[str, list[Registration]]:
        """The module each registered target lives in, found without importing anything.

        ``eager``: only targets the next ``apply_hooks()`` will surely import.
        """
        with self._lock:
            st = self._state
            out: dict[str, list[Registration]] = {}
            for key, regs in st.regs.items():
                if eager:
                    regs = [
                        r
                        for r in st.live(key)
                        if not (r.on_import or r.optional or r.condition is not None)
                    ]
                if not regs:
                    continue
                rec = st.applied.get(key)
                module = rec.res.module if rec is not None else _resolve.guess_module(st.paths[key])
                out.setdefault(module, []).extend(regs)
            return out

    @hybridmethod
    def hook_modules(self, target: str) -> list[str]:
        """Modules defining ``target``'s hooks (propagation leaves their own bindings alone)."""
        with self._lock:
            regs = self._state.regs.get(self._key(target), [])
            names = {_apply.hook_module(r.hook) for r in regs}
            names |= {_apply.hook_module(self._state.hook_objects.get(r.seq)) for r in regs}
            return sorted(n for n in names if n)

    @hybridmethod
    def stale_bindings(self, target: str) -> list[tuple[str, str]]:
        """(module, attribute) pairs in ``sys.modules`` still holding the original."""
        with self._lock:
            rec = self._state.applied.get(self._key(target))
            if rec is not None and not rec.propagates:
                return []
            found = None
            if rec is not None:
                found = (rec.original, rec.res.owner.__name__, rec.res.attr)
        holders = self._holders(target, found)
        return [] if holders is None else [(h.module, h.label) for h in holders[0]]

    @hybridmethod
    def sweep_preview(self, target: str) -> tuple[list[str], list[str]] | None:
        """``(rebindable, not rebindable)`` holders the sweep would find for ``target`` now.

        ``None`` when the sweep would not vouch for it (a method, or its module not imported);
        the import guard tells a finding the sweep repairs from one it cannot.
        """
        found = self._holders(target, None, containers=True)
        if found is None:
            return None
        holders, stale = found
        return (
            [f"{h.module}.{h.label}" for h in holders],
            [f"{h.module}.{h.label} ({h.kind})" for h in stale],
        )

    def _holders(
        self, target: str, found: tuple[Any, str, str] | None, *, containers: bool = False
    ) -> tuple[list[Any], list[StaleHolder]] | None:
        with self._lock:
            key = self._key(target)
            if found is None:
                found = _find_imported(self._state.paths.get(key) or _resolve.parse_target(target))
            if found is None:
                return None
            original, owner_name, attr = found
            excluded = frozenset(self.hook_modules(target))
        stale: list[StaleHolder] = []
        holders = find_holders(
            {id(original): Rebind(original, None, excluded, key)},
            frozenset({(owner_name, attr)}),
            containers=containers,
            stale=stale,
        )
        return holders, stale

    @hybridmethod
    def stale_holders(self) -> list[dict[str, str]]:
        """References to originals that applying could not rebind (the hooks do not run there)."""
        with self._lock:
            return _apply.holder_dicts(self._state, list(self._state.stale.values()))


def _kind_name(rec: _state.Record) -> str:
    func = getattr(rec.res.raw, "__func__", rec.res.raw)
    if rec.kind != _resolve.CLASS and is_async_callable(func):
        return f"async {rec.kind}"
    return rec.kind


def _find_imported(path: _resolve.TargetPath) -> tuple[Any, str, str] | None:
    parts = path.parts
    for i in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is None:
            continue
        if i != len(parts) - 1:
            return None  # a class member: no module-level binding to go stale
        value = vars(module).get(parts[-1], ABSENT)
        return None if value is ABSENT else (value, module.__name__, parts[-1])
    return None


def _status(
    target: str, hook: str, hook_type: str, source: HookSource, state: str, reason: str
) -> HookStatus:
    return HookStatus(target, hook, hook_type, source, cast(HookState, state), reason)
