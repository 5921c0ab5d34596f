"""The read-only half of ``HookRegistry``: what is registered, applied, pending or stale."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence

from spawnkit._compat import TYPE_CHECKING
from spawnkit.hooks import _apply, _conflicts, _decide, _resolve, _state
from spawnkit.hooks._chain import is_async_callable
from spawnkit.hooks._hybrid import hybridmethod
from spawnkit.hooks._journal import ABSENT
from spawnkit.hooks._stale import Holder, Rebind, StaleHolder
from spawnkit.hooks.types import (
    AppliedTarget,
    HookSource,
    HookStatus,
    HookType,
    Registration,
)

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.hooks._hints import HookState

__all__: list[str] = []


def _swept(
    batch: dict[int, Rebind], skip: frozenset[tuple[str, str]], containers: bool,
    stale: list[StaleHolder],
) -> list[Holder]:  # fmt: skip
    """``_propagate.find_holders``: the sweep, imported when a query asks for it (issue #23)."""
    from spawnkit.hooks._propagate import find_holders

    return find_holders(batch, skip, containers=containers, stale=stale)


class RegistryQueries:
    """Queries over a registry's state; ``HookRegistry`` adds registering and applying."""

    _lock: threading.RLock
    _state: _state.State

    def _key(self, target: str) -> str:
        return _resolve.parse_target(target).key

    def _settled_version(self) -> int | None:
        """A number that changes whenever ``status()`` may; None while an on_import target
        waits (its reason names a module, found in ``sys.modules`` at the time of asking)."""
        with self._lock:
            st = self._state
            return None if st.waiting else st.version

    def _count(self, source: object = None) -> int:
        """How many registrations there are (of ``source``): ``registrations()`` sorts them
        all, and a plugin load counts before and after each plugin."""
        with self._lock:
            regs = self._state.regs.values()
            if source is None:
                return sum(map(len, regs))
            return sum(r.source == source for rs in regs for r in rs)

    def _platform_sources(self) -> set[HookSource]:
        """The platform plugins that registered hooks (or provided modules) as their package
        was imported by platform discovery (``HookSource.platform``)."""
        with self._lock:
            st = self._state
            found = {r.source for rs in st.regs.values() for r in rs if r.source.platform}
            return found | {p.source for p in st.provides.values() if p.source.platform}

    @hybridmethod
    def is_hook_applied(
        self, target: str, hook: Callable[..., Any] | str, hook_type: HookType | str | None = None
    ) -> bool:
        """Whether ``hook`` is in the chain installed on ``target`` right now (as ``hook_type``)."""
        htype = None if hook_type is None else _resolve.coerce_hook_type(hook_type)
        with self._lock:
            rec = self._state.record(self._key(target))
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
            per_target: dict[str, tuple[str, str]] = {}
            for name, prov in st.provides.items():
                state, reason = _decide.provision_state(st, name)
                rows.append(
                    (prov.seq, _status(name, prov.what, "PROVIDE", prov.source, state, reason))
                )
            for key, regs in st.regs.items():
                for reg in regs:
                    state, reason = _decide.state_of(st, key, reg, per_target)
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
            modules = _guessed_modules(st)
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
                if rec is not None:
                    module = rec.res.module
                else:
                    module = modules.get(key) or _resolve.guess_module(st.paths[key])
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
        return self.stale_bindings_of([target])[target]

    @hybridmethod
    def stale_bindings_of(self, targets: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """:meth:`stale_bindings` of each of ``targets``, from one sweep of ``sys.modules``."""
        wanted: dict[str, tuple[Any, str, str] | None] = {}
        with self._lock:
            for target in targets:
                rec = self._state.applied.get(self._key(target))
                if rec is None:
                    wanted[target] = None  # its original, if its module is imported
                elif rec.propagates:
                    wanted[target] = (rec.held, rec.res.owner.__name__, rec.res.attr)
        found = self._holders(wanted, containers=False)
        return {t: [(h.module, h.label) for h in found.get(t, ((), ()))[0]] for t in targets}

    @hybridmethod
    def sweep_preview(self, target: str) -> tuple[list[str], list[str]] | None:
        """``(rebindable, not rebindable)`` holders the sweep would find for ``target`` now.

        ``None`` when the sweep would not vouch for it (a method, or its module not imported);
        the import guard tells a finding the sweep repairs from one it cannot.
        """
        return self.sweep_previews([target])[target]

    @hybridmethod
    def sweep_previews(
        self, targets: Sequence[str]
    ) -> dict[str, tuple[list[str], list[str]] | None]:
        """:meth:`sweep_preview` of each of ``targets``, from one sweep of ``sys.modules``.

        The import guard asks about every target of every module imported too early: a sweep
        per target made a worker whose launcher imported a 100-target engine at module scope
        spend about a second there (and that grows with ``sys.modules``).
        """
        found = self._holders(dict.fromkeys(targets), containers=True)
        return {
            t: None
            if t not in found
            else (
                [f"{h.module}.{h.label}" for h in found[t][0]],
                [f"{h.module}.{h.label} ({h.kind})" for h in found[t][1]],
            )
            for t in targets
        }

    def _holders(
        self, wanted: dict[str, tuple[Any, str, str] | None], *, containers: bool
    ) -> dict[str, tuple[list[Holder], list[StaleHolder]]]:
        """Each target's holders, for the targets whose original is known or found imported.

        ``wanted`` maps a target to (original, owner module, attribute), or to None to look
        its original up in ``sys.modules``.  One ``find_holders`` per batch of distinct
        originals (two targets can share one: an alias).  A batch skips all its targets' own
        attributes, and the answers are still those of one target at a time: the attribute
        of another target holds that target's original, never this one's.
        """
        batches: list[dict[int, Rebind]] = []
        skips: list[set[tuple[str, str]]] = []
        keys: dict[str, str] = {}  # target -> its registry key (two spellings, one key)
        found_keys: set[str] = set()
        with self._lock:
            for target, found in wanted.items():
                key = self._key(target)
                if key in found_keys:
                    keys[target] = key
                    continue
                if found is None:
                    path = self._state.paths.get(key) or _resolve.parse_target(target)
                    found = _find_imported(path)
                if found is None:
                    continue
                keys[target] = key
                found_keys.add(key)
                original, owner_name, attr = found
                rebind = Rebind(original, None, frozenset(self.hook_modules(target)), key)
                at = next((i for i, b in enumerate(batches) if id(original) not in b), None)
                if at is None:
                    at = len(batches)
                    batches.append({})
                    skips.append(set())
                batches[at][id(original)] = rebind
                skips[at].add((owner_name, attr))
        by_key: dict[str, tuple[list[Holder], list[StaleHolder]]] = {
            k: ([], []) for k in keys.values()
        }
        for batch, skip in zip(batches, skips, strict=True):
            stale: list[StaleHolder] = []
            for h in _swept(batch, frozenset(skip), containers, stale):
                by_key[h.rebind.key][0].append(h)
            for s in stale:
                by_key[s.target][1].append(s)
        return {target: by_key[key] for target, key in keys.items()}

    @hybridmethod
    def bypassing(self) -> dict[str, list[str]]:
        """By applied method target, the subclasses' overrides of it that never call it:
        instances of those classes skip its hooks (``Class.method`` each); by replaced class,
        the subclasses and module-level instances made from the original before."""
        return {target: names for target, (names, _, _) in self._bypass_report().items()}

    @hybridmethod
    def _replaced_classes(self) -> list[tuple[str, Any, Any, tuple[Registration, ...]]]:
        """``(target, original, replacement, registrations)`` of each applied class REPLACE:
        one pass over the ledger, no records built (the payload check asks in every worker)."""
        with self._lock:
            return [
                (rec.display, rec.original, rec.installed, rec.regs)
                for rec in self._state.applied.values()
                if rec.kind == _resolve.CLASS
            ]

    @hybridmethod
    def _bypass_report(self) -> dict[str, tuple[list[str], str, str]]:
        """``bypassing()`` with each target's reason and fix, for the conflict warning."""
        with self._lock:
            st = self._state
            found: dict[str, tuple[list[str], str, str]] = {}
            if not st.applied:
                return found
            from spawnkit.hooks import _twins  # applied targets only (a worker without them: none)
            # a function's torch kernels: only where torch's operator library is loaded
            kinds = _BYPASSABLE if "torch.library" in sys.modules else _CLASSES
            twinned = _twins.twins_of({rec.res.module for rec in st.applied.values()})
            for key, rec in st.applied.items():
                # a method's subclasses, a class's leftovers, a function's torch kernels
                if isinstance(rec.res.owner, type) or rec.kind in kinds:
                    names = _decide.bypassing(rec)
                    if names:
                        found[st.display[key]] = (
                            names,
                            _decide.bypass_reason(rec, names),
                            _decide.bypass_fix(rec, names),
                        )
                twins = twinned.get(rec.res.module)  # any kind: the module imported twice
                if twins:
                    was = found.get(st.display[key], ([], "", ""))
                    found[st.display[key]] = (
                        [*was[0], *twins],
                        "; ".join(filter(None, (was[1], _twins.reason(rec.res.module, twins)))),
                        "\n".join(filter(None, (was[2], _twins.fix(twins)))),
                    )
        return found

    @hybridmethod
    def stale_holders(self) -> list[dict[str, str]]:
        """References to originals that applying could not rebind (the hooks do not run there)."""
        with self._lock:
            st = self._state
            return _apply.holder_dicts(st, [*st.stale.values(), *_decide.displaced_holders(st)])


#: module-level target kinds with something that can skip them (``_decide.bypassing``)
_BYPASSABLE = frozenset({_resolve.CLASS, _resolve.FUNCTION})
_CLASSES = frozenset({_resolve.CLASS})


def built_hooked(registry: RegistryQueries) -> list[str]:
    """The applied targets an object built now runs hooked, and unpickling would not: its
    constructors and class REPLACEs.  ``Payload.capture`` records them per namespace (a worker
    names those its launcher had not applied: ``bootstrap/_payload_hooks``); one pass over the
    ledger, at capture only."""
    from spawnkit.spec.payload import CONSTRUCTORS  # capture only: already imported there

    with registry._lock:
        return [
            rec.display
            for rec in registry._state.applied.values()
            if rec.kind == _resolve.CLASS
            or ("." in rec.res.qualname and rec.res.qualname.rpartition(".")[2] in CONSTRUCTORS)
        ]


def imported_target_modules(registry: Any) -> dict[str, list[Registration]]:
    """``registry.target_modules()`` of the modules imported now: the import guard's question,
    as plugins finish loading, when a worker's target modules are not imported yet (one
    C-level pass over the guesses says so, before the per-target grouping)."""
    with registry._lock:
        st = registry._state
        if not st.applied and sys.modules.keys().isdisjoint(_guessed_modules(st).values()):
            return {}
    found: dict[str, list[Registration]] = registry.target_modules()
    return {module: regs for module, regs in found.items() if module in sys.modules}


def _guessed_modules(st: _state.State) -> dict[str, str]:
    """Each registered target's module as ``guess_module`` finds it, kept while neither the
    registrations nor ``sys.modules`` changed: the guard and the apply stage ask in turn."""
    mark = (st.version, len(sys.modules), next(reversed(sys.modules), None))
    if st.guessed[0] != mark:
        st.guessed = (mark, _guesses(st))
    return st.guessed[1]


def _guesses(st: _state.State) -> dict[str, str]:
    """``guess_module`` of each registered target, guessed once per owner where no part of
    it is imported (as plugins load): the guess is then read from the parts before the
    attribute alone, the same for every attribute of one class or module (a worker's import
    guard asks for a hundred targets of ten modules)."""
    out: dict[str, str] = {}
    by_owner: dict[str, str] = {}
    modules, paths, guess = sys.modules, st.paths, _resolve.guess_module
    for key in st.regs:
        path = paths[key]
        if path.module_hint is not None or path.parts[0] in modules:
            out[key] = guess(path)
            continue
        owner = key[: key.rindex(".")]  # the key is the parts joined by '.'
        found = by_owner.get(owner)
        if found is None:
            found = by_owner[owner] = guess(path)
        out[key] = found
    return out


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
    known: HookState = state  # type: ignore[assignment]  # _decide gives only these names
    return HookStatus(target, hook, hook_type, source, known, reason)
