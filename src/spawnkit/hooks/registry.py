"""``HookRegistry``: registering hooks, applying them atomically, and undoing them exactly.

Registration only records (no import happens, so a plugin can register hooks
on modules that must not be imported yet).  ``apply_hooks()`` resolves each
target, builds its chain as flat closures (``_chain``), installs it, rebinds
stale ``from X import Y`` bindings (``_propagate``) and journals every change
(``_journal``), so that a strict failure rolls the whole call back and
``unapply()`` restores the exact raw objects that were there before.

The state lives in an object, not in class attributes, so several engines in
one process each get an independent registry; the class-level API (the seed's
``HookRegistry.register(...)``) acts on ``HookRegistry.default()``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Callable, Collection, Iterator
from typing import Any, ClassVar, TypeVar, cast

from spawnkit._log import DEBUG, LazyLogger
from spawnkit.errors import HookError, HookRegistrationError
from spawnkit.hooks import _apply, _conflicts, _decide, _provide, _resolve, _state
from spawnkit.hooks._chain import is_async_callable
from spawnkit.hooks._hybrid import hybridmethod
from spawnkit.hooks._journal import ABSENT, Journal
from spawnkit.hooks._propagate import Rebind, StaleHolder, find_holders
from spawnkit.hooks._provide import Provision
from spawnkit.hooks.types import (
    UNKNOWN_SOURCE,
    AppliedTarget,
    HookSource,
    HookState,
    HookStatus,
    HookType,
    Registration,
    current_plugin_source,
    describe_hook,
)

__all__ = ["HookRegistry", "plugin_hook"]

logger = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted

H = TypeVar("H")

#: apply_hooks() rounds for hooks registered while it applies (by a target module or a hook)
_MAX_ROUNDS = 8


def _coerce_type(hook_type: object) -> HookType:
    if isinstance(hook_type, HookType):
        return hook_type
    if isinstance(hook_type, str) and hook_type.upper() in HookType.__members__:
        return HookType[hook_type.upper()]
    raise HookRegistrationError(
        f"unknown hook type {hook_type!r}; use HookType.BEFORE, HookType.AFTER, "
        "HookType.AROUND or HookType.REPLACE"
    )


def _checked(
    target: str, hook: Any, hook_type: object, src: object, condition: object
) -> tuple[_resolve.TargetPath, HookType]:
    """Validate one ``register()`` call (nothing imported); errors name hook, source, target."""
    if not isinstance(src, HookSource):
        raise HookRegistrationError(
            f"cannot register hook {describe_hook(hook)} on target {target!r}: source must "
            f"be a HookSource, got {src!r}"
        )
    try:
        path = _resolve.parse_target(target)
        htype = _coerce_type(hook_type)
    except HookError as exc:
        raise type(exc)(f"{exc} (hook {describe_hook(hook)} from {src})") from None
    if isinstance(hook, str):
        try:
            _resolve.check_hook_spec(hook)
        except HookRegistrationError as exc:
            raise HookRegistrationError(f"{_cannot(hook, src, target)}: {exc}") from None
    elif not callable(hook) or (isinstance(hook, type) and htype is not HookType.REPLACE):
        _apply.check_hook_object(hook, htype, _cannot(hook, src, target))
    if condition is not None and not callable(condition):
        raise HookRegistrationError(
            f"{_cannot(hook, src, target)}: condition must be a callable taking no "
            f"arguments, got {type(condition).__name__} {condition!r}"
        )
    return path, htype


def _cannot(hook: Any, src: object, target: str) -> str:
    return f"cannot register hook {describe_hook(hook)} from {src} on target {target!r}"


class HookRegistry:
    """Hooks on functions, methods and classes, applied in one atomic, reversible step.

    Every public method works on the class (the default registry) and on an
    instance (``HookRegistry(name="sglang.srt")``).
    """

    _default: ClassVar[HookRegistry | None] = None
    _default_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str = "spawnkit") -> None:
        self.name = name
        self._lock = threading.RLock()
        self._state = _state.State()
        self._applying = False  # an apply call runs (in the thread holding the lock)

    def __repr__(self) -> str:
        return (
            f"HookRegistry(name={self.name!r}, targets={len(self._state.regs)}, "
            f"applied={len(self._state.applied)})"
        )

    @classmethod
    def default(cls) -> HookRegistry:
        """The process-wide registry behind the class-level API and the default namespace."""
        registry = HookRegistry._default
        if registry is None:
            with HookRegistry._default_lock:
                registry = HookRegistry._default
                if registry is None:
                    registry = HookRegistry._default = HookRegistry()
        return registry

    # ------------------------------------------------------------ registering
    @hybridmethod
    def register(
        self,
        target: str,
        hook: Callable[..., Any] | str,
        hook_type: HookType = HookType.AFTER,
        *,
        on_import: bool = False,
        optional: bool = False,
        condition: Callable[[], object] | None = None,
        source: HookSource | None = None,
    ) -> None:
        """Record a hook for ``target``; nothing is imported until ``apply_hooks()``.

        ``on_import``: ``apply_hooks()`` does not import the target's module; the
        hook is applied at once if it is imported, else right after its first
        import finishes (state ``pending`` until then).  ``optional``: a target
        whose module (or attribute) does not exist is ``skipped``, not an error.
        ``condition``: called with no arguments when the hook would be applied;
        false skips it.  ``source`` defaults to the plugin the loader is running
        (``current_plugin_source``), else ``UNKNOWN_SOURCE``.

        In a worker whose hooks are already applied, the hook is applied now
        (late registration is never silently left unapplied).
        """
        src = source if source is not None else (current_plugin_source.get() or UNKNOWN_SOURCE)
        late = self._late(f"hook {describe_hook(hook)} from {src} on target {target!r}")
        path, htype = _checked(target, hook, hook_type, src, condition)
        with self._lock:
            st = self._state
            regs = st.regs.setdefault(path.key, [])
            for prev in regs:
                if prev.hook_type is htype and (prev.hook is hook or prev.hook == hook):
                    logger.warning(
                        "ignored a second registration of %s on target %r: it is already "
                        "registered (by %s); a hook is applied once per target",
                        Registration(target, hook, htype, src, -1).describe(),
                        target,
                        prev.source,
                    )
                    return
            st.seq += 1
            reg = Registration(target, hook, htype, src, st.seq, on_import, optional, condition)
            if path.module_hint is not None or path.key not in st.paths:
                st.paths[path.key] = path  # the explicit 'mod:qual' form is the more precise one
            st.display.setdefault(path.key, target)
            regs.append(reg)
        if logger.isEnabledFor(DEBUG):  # describe() formats; register() is per hook
            logger.debug("registered %s on target %r", reg.describe(), target)
        if late:
            self.apply_hooks()

    def _late(self, what: str) -> bool:
        """Whether a registration now must be applied at once; refuses one nothing would apply.

        Inside a worker only its namespace's registry is applied.  The default
        registry there is a dead end (a plugin written for the default
        namespace, run in an engine's worker): refused, naming the right one.
        """
        # Read without importing: a worker's bootstrap has imported it long before.
        phase = sys.modules.get("spawnkit.spec._phase")
        ns = phase.worker_namespace() if phase is not None else None
        if ns is None:
            return False
        mine = ns.hooks
        if mine is self:
            return not phase.too_early()  # type: ignore[union-attr]
        if self is HookRegistry._default:
            raise HookRegistrationError(
                f"cannot register {what}: this process is a worker of namespace {ns.name!r}, "
                f"which applies only that namespace's registry (NS.hooks of {ns.name!r}), never "
                "spawnkit.hooks.HookRegistry (the default namespace's), so the hook would not "
                "take effect. Register it on the namespace's registry: "
                "spawnkit.namespace.get_namespace().hooks.register(...) in a worker, or the "
                "engine's NS.hooks.register(...) / NS.HookRegistry.register(...)."
            )
        return False

    @hybridmethod
    def plugin_hook(
        self,
        target: str,
        type: HookType = HookType.AFTER,
        *,
        on_import: bool = False,
        optional: bool = False,
        condition: Callable[[], object] | None = None,
    ) -> Callable[[H], H]:
        """Decorator form of :meth:`register`; returns the decorated object unchanged."""

        def decorate(obj: H) -> H:
            self.register(
                target,
                obj,  # type: ignore[arg-type]
                type,
                on_import=on_import,
                optional=optional,
                condition=condition,
            )
            return obj

        return decorate

    @hybridmethod
    def provide_module(
        self,
        name: str,
        module: types.ModuleType | None = None,
        *,
        factory: Callable[[str], types.ModuleType] | None = None,
        only_if_missing: bool = True,
        source: HookSource | None = None,
    ) -> None:
        """Place a module under ``name`` when hooks are applied, if ``name`` cannot be imported.

        ``module``, or ``factory(name)``, or an empty module; missing parent
        packages are created and each is set as an attribute of its parent.
        Journaled: ``unapply()`` (and test isolation) take it all back.
        ``only_if_missing=False`` replaces an installed module too (the status
        says so).  For an engine module that imports a module this hardware
        does not have, instead of writing ``sys.modules`` by hand.
        """
        src = source if source is not None else (current_plugin_source.get() or UNKNOWN_SOURCE)
        what = f"provide_module({name!r}) from {src}"
        late = self._late(what)
        _provide.check(name, module, factory, what)
        with self._lock:
            st = self._state
            prev = st.provides.get(name)
            if prev is not None:
                raise HookRegistrationError(
                    f"{what}: module {name!r} is already provided by {prev.source}; provide "
                    "each module once"
                )
            st.seq += 1
            st.provides[name] = Provision(name, module, factory, only_if_missing, src, st.seq)
        if late:
            self.apply_hooks()

    @hybridmethod
    def discard_source(self, source: HookSource) -> int:
        """Drop every registration made by ``source`` (a plugin that failed while loading).

        Targets already patched keep their chain until the next
        ``apply_hooks()``, which rebuilds them without these hooks (or restores
        the original when none are left).  Returns how many were dropped.
        """
        with self._lock:
            st = self._state
            dropped = 0
            for key in list(st.regs):
                kept = [r for r in st.regs[key] if r.source != source]
                dropped += len(st.regs[key]) - len(kept)
                st.regs[key] = kept
                if not kept:
                    st.stop_waiting(key)  # nothing left to apply on its import
            for name in [n for n, p in st.provides.items() if p.source == source]:
                if name not in st.provided:
                    del st.provides[name]
                    dropped += 1
        if dropped:
            logger.info("discarded %d hook registration(s) from %s", dropped, source)
        return dropped

    # -------------------------------------------------------------- applying
    @hybridmethod
    def apply_hooks(
        self,
        *,
        strict: bool = True,
        clean_modules: Collection[str] = (),
        conflicts: str = "warn",
        conflicts_var: str = "",
    ) -> list[str]:
        """Patch every target whose registrations changed since it was last applied.

        Returns the targets patched by this call (empty when nothing is new).
        ``strict``: any failure rolls back everything this call changed and raises
        one ``HookApplyError`` listing every failing target with its sources;
        otherwise each failure is logged and the other targets are applied.
        ``clean_modules``: modules known to hold no original (see
        ``_propagate.find_holders``); the stale-binding sweep skips their globals
        (their dicts and lists are still searched).  References the sweep finds
        but cannot rebind (tuple items, default arguments) are kept for
        :meth:`stale_holders` and logged as a warning, except inside a worker's
        bootstrap, which reports them per its import guard policy.
        ``conflicts``: what to do with conflicting hooks not reported yet in this
        process (``warn``: a ``HookConflictWarning`` each; ``error``: a
        ``HookConflictError`` before anything is patched; ``ignore``);
        ``conflicts_var`` names the variable that chose it, for the messages.
        """
        with self._lock:
            if self._applying:
                return []  # registered while this registry applies: that call's loop takes it
            # Conflicting hooks (several REPLACEs, ...): a HookConflictWarning each, once per
            # process; an escalating -W filter makes it a HookConflictError, nothing patched.
            _conflicts.report(self._state, conflicts, conflicts_var)
            patched: list[str] = []
            self._applying = True
            try:
                for _ in range(_MAX_ROUNDS):
                    st = self._state
                    seq = st.seq
                    call = _apply.ApplyCall(st, frozenset(clean_modules), self._module_imported)
                    patched += call.run(strict)  # a strict failure raises, the state rolled back
                    self._note_stale(call.stale)
                    # on_import targets whose module this call imported (their finder
                    # call found this registry busy), then what was registered meanwhile
                    ready = [k for k in st.waiting if _resolve.imported(st.paths[k])]
                    patched += self._apply_ready(ready, None)
                    if st.seq == seq:
                        break
            finally:
                self._applying = False
            return patched

    def _module_imported(self, name: str) -> None:
        """The finder's call after ``name``'s first import: apply the targets it completes.

        A strict failure raises here, inside the import statement that loaded
        ``name``, so the code that needed the module stops with the error.
        """
        with self._lock:
            st = self._state
            ready = [
                k
                for k in st.waiting
                if name in _resolve.watch_names(st.paths[k])
                and _resolve.imported(st.paths[k], done=name)
            ]
            if not ready or self._applying:
                return  # an apply_hooks() running in this thread applies them when it ends
            seq = st.seq
            self._applying = True
            try:
                self._apply_ready(ready, name)
            finally:
                self._applying = False
            late = st.seq != seq
        if late:
            self.apply_hooks()  # hooks registered by the hooks just applied, or by the module

    def _apply_ready(self, keys: list[str], trigger: str | None) -> list[str]:
        """Apply waiting targets whose module is imported now, each strictness apart."""
        st = self._state
        patched: list[str] = []
        groups = {
            strict: [k for k in keys if st.waiting[k][0] is strict] for strict in (True, False)
        }
        for key in keys:
            st.stop_waiting(key)
        for strict, group in groups.items():
            if group:
                call = _apply.ApplyCall(st, frozenset(), self._module_imported, trigger)
                patched += call.run(strict, only=group)
                self._note_stale(call.stale)
        return patched

    def _note_stale(self, stale: list[StaleHolder]) -> None:
        """Keep what the sweep could not rebind; say so unless a bootstrap reports it by policy."""
        if not stale:
            return
        st = self._state
        fresh = [h for h in stale if (h.module, h.label) not in st.stale]
        for holder in stale:
            st.stale[(holder.module, holder.label)] = holder
        if not fresh:
            return
        from spawnkit.spec import _phase

        if _phase.too_early():
            return  # a worker's bootstrap: its apply_hooks stage reports these per guard policy
        logger.warning("%s", _stale_message(_apply.holder_dicts(self._state, fresh)))

    # ------------------------------------------------------------- undoing
    @hybridmethod
    def unapply(self) -> None:
        """Restore every patched target and propagated binding to its exact original.

        Registrations are kept: ``apply_hooks()`` afterwards applies them all again.
        """
        with self._lock:
            st = self._state
            journal = Journal()
            rebinds: dict[int, Rebind] = {}
            problems: list[str] = []
            for rec in reversed(list(st.applied.values())):
                try:
                    _apply.restore(st, rec, journal, rebinds)
                except Exception as exc:
                    problems.append(f"{rec.display!r}: {type(exc).__name__}: {exc}")
            st.applied.clear()
            for modname, namespace, name, _label, rebind in find_holders(rebinds):
                namespace[name] = rebind.new
                logger.debug("restored late binding %s.%s", modname, name)
            for provided in reversed(_decide.forget(st)):
                try:
                    provided.undo()
                except Exception as exc:
                    problems.append(f"provided module {provided.provision.name!r}: {exc}")
        if problems:
            raise HookError(
                "unapply() could not restore " + "; ".join(problems) + ". The other targets were "
                "restored; the ones named are left as they are."
            )

    @hybridmethod
    def reset(self) -> None:
        """Unapply everything and forget every registration."""
        with self._lock:
            try:
                self.unapply()
            finally:
                self._state = _state.State()

    @hybridmethod
    @contextlib.contextmanager
    def isolated(self) -> Iterator[HookRegistry]:
        """A clean registry for the block; on exit its patches are undone and the old state is back.

        The registry object stays the same (the default namespace holds a
        reference to it), only its state is swapped.
        """
        with self._lock:
            saved = self._state
            self._state = _state.State()
        try:
            yield self
        finally:
            with self._lock:
                try:
                    self.unapply()
                finally:
                    self._state = saved

    # --------------------------------------------------------------- queries
    def _key(self, target: str) -> str:
        return _resolve.parse_target(target).key

    @hybridmethod
    def is_hook_applied(
        self,
        target: str,
        hook: Callable[..., Any] | str,
        hook_type: HookType | str | None = None,
    ) -> bool:
        """Whether ``hook`` is in the chain installed on ``target`` right now.

        ``hook_type`` (SGLang's third argument) also requires it to be applied
        as that type.  False also when something else overwrote the target
        since we patched it.
        """
        htype = None if hook_type is None else _coerce_type(hook_type)
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
                    kind=self._kind_name(rec),
                    hooks=rec.regs,
                    propagated_to=tuple((m, label) for m, _, _, label in rec.bindings),
                )
                for rec in self._state.applied.values()
            ]

    @staticmethod
    def _kind_name(rec: _state.Record) -> str:
        func = getattr(rec.res.raw, "__func__", rec.res.raw)
        if rec.kind != _resolve.CLASS and is_async_callable(func):
            return f"async {rec.kind}"
        return rec.kind

    @hybridmethod
    def registered_targets(self) -> list[str]:
        """Targets with at least one registration, in first-registration order."""
        with self._lock:
            st = self._state
            return [st.display[k] for k, regs in st.regs.items() if regs]

    @hybridmethod
    def status(self) -> list[HookStatus]:
        """Where every registration (and provided module) stands, in registration order.

        One record each, with ``state`` (applied, pending, skipped, failed,
        provided) and a ``reason`` for anything not simply applied.
        """
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
        """Each conflict among the registrations (several REPLACEs, REPLACE mixed with other
        hooks, several AROUNDs), one message each: what ``apply_hooks()`` warns about."""
        with self._lock:
            return _conflicts.messages(self._state)

    @hybridmethod
    def target_modules(self, *, eager: bool = False) -> dict[str, list[Registration]]:
        """The module each registered target lives in, found without importing anything.

        ``eager``: only targets the next ``apply_hooks()`` will surely import
        (not ``on_import``, conditional or optional ones), which a worker's
        apply stage imports up front to time them apart.
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
        """Modules defining ``target``'s hooks: propagation leaves their bindings alone.

        That is what lets a replacement call the original through its own
        ``from X import Y`` without recursing into itself.
        """
        with self._lock:
            regs = self._state.regs.get(self._key(target), [])
            names = {_apply.hook_module(r.hook) for r in regs}
            names |= {_apply.hook_module(self._state.hook_objects.get(r.seq)) for r in regs}
            return sorted(n for n in names if n)

    @hybridmethod
    def stale_bindings(self, target: str) -> list[tuple[str, str]]:
        """(module, attribute) pairs in ``sys.modules`` still holding the original object.

        Only module-level targets have such bindings (a method is patched on its
        class, which every importer shares).  Imports nothing: a target whose
        module is not imported yet has none.
        """
        with self._lock:
            key = self._key(target)
            rec = self._state.applied.get(key)
            path = self._state.paths.get(key) or _resolve.parse_target(target)
            if rec is not None:
                if not rec.propagates:
                    return []
                original, owner_name, attr = rec.original, rec.res.owner.__name__, rec.res.attr
            else:
                found = _find_imported(path)
                if found is None:
                    return []
                original, owner_name, attr = found
            excluded = set(self.hook_modules(target))
        holders = find_holders(
            {id(original): Rebind(original, None, frozenset(excluded), key)},
            frozenset({(owner_name, attr)}),
        )
        return [(holder.module, holder.label) for holder in holders]

    @hybridmethod
    def sweep_preview(self, target: str) -> tuple[list[str], list[str]] | None:
        """What the stale-binding sweep would find for ``target`` if it were applied now.

        ``(rebindable, not rebindable)`` holders of the original as
        ``module.name`` labels, searched as ``apply_hooks()`` searches (module
        globals, one level into containers and classes).  ``None`` when the
        sweep would not vouch for the target: a method (patched on its class,
        so copies such as ``run = Engine.run`` are never searched) or a target
        whose module is not imported.  The import guard uses it to tell a
        finding the sweep repairs from one it cannot.
        """
        with self._lock:
            key = self._key(target)
            found = _find_imported(self._state.paths.get(key) or _resolve.parse_target(target))
            if found is None:
                return None
            original, owner_name, attr = found
            excluded = frozenset(self.hook_modules(target))
        stale: list[StaleHolder] = []
        holders = find_holders(
            {id(original): Rebind(original, None, excluded, key)},
            frozenset({(owner_name, attr)}),
            containers=True,
            stale=stale,
        )
        return (
            [f"{h.module}.{h.label}" for h in holders],
            [f"{h.module}.{h.label} ({h.kind})" for h in stale],
        )

    @hybridmethod
    def stale_holders(self) -> list[dict[str, str]]:
        """References to replaced originals that applying could not rebind, as plain dicts.

        Tuple items and default arguments of module-level functions: the
        hooks do not run through them.  Keys: ``module``, ``name``, ``kind``,
        ``target``.  Cleared for a target when it is restored.
        """
        with self._lock:
            return _apply.holder_dicts(self._state, list(self._state.stale.values()))


def _find_imported(path: _resolve.TargetPath) -> tuple[Any, str, str] | None:
    """The module-level object a target names, if its module is already imported."""
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


def _stale_message(holders: list[dict[str, str]]) -> str:
    """One paragraph naming every stale holder: the consequence, then the fix."""
    listed = "; ".join(
        f"{h['module']}.{h['name']} ({h['kind']}) holds the original {h['target']!r}"
        for h in holders
    )
    return (
        f"{len(holders)} reference(s) to hooked originals could not be rebound: {listed}. "
        "Calls through them run the original, without the hooks. Fix: look the target up "
        "when it is called (e.g. `ops.tokenize` at call time, or a 'module:name' string "
        "resolved then) instead of storing the function in a tuple or a default argument."
    )


def plugin_hook(
    target: str,
    type: HookType = HookType.AFTER,
    *,
    on_import: bool = False,
    optional: bool = False,
    condition: Callable[[], object] | None = None,
) -> Callable[[H], H]:
    """Decorator registering on the default registry (the seed's ``plugin_hook``)."""
    return HookRegistry.default().plugin_hook(
        target, type, on_import=on_import, optional=optional, condition=condition
    )
