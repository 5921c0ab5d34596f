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
from collections.abc import Callable, Collection, Iterator
from typing import Any, ClassVar, TypeVar

from spawnkit._log import DEBUG, LazyLogger
from spawnkit.errors import HookError, HookRegistrationError
from spawnkit.hooks import _apply, _conflicts, _resolve
from spawnkit.hooks._chain import is_async_callable
from spawnkit.hooks._hybrid import hybridmethod
from spawnkit.hooks._journal import ABSENT, Journal
from spawnkit.hooks._propagate import Rebind, StaleHolder, find_holders
from spawnkit.hooks.types import (
    UNKNOWN_SOURCE,
    AppliedTarget,
    HookSource,
    HookType,
    Registration,
    current_plugin_source,
    describe_hook,
)

__all__ = ["HookRegistry", "plugin_hook"]

logger = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted

H = TypeVar("H")


def _coerce_type(hook_type: object) -> HookType:
    if isinstance(hook_type, HookType):
        return hook_type
    if isinstance(hook_type, str) and hook_type.upper() in HookType.__members__:
        return HookType[hook_type.upper()]
    raise HookRegistrationError(
        f"unknown hook type {hook_type!r}; use HookType.BEFORE, HookType.AFTER, "
        "HookType.AROUND or HookType.REPLACE"
    )


def _cannot(hook: Any, src: HookSource, target: str) -> str:
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
        self._state = _apply.State()

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
        source: HookSource | None = None,
    ) -> None:
        """Record a hook for ``target``; nothing is imported until ``apply_hooks()``.

        ``source`` defaults to the plugin the loader is running
        (``current_plugin_source``), else ``UNKNOWN_SOURCE``.
        """
        src = source if source is not None else (current_plugin_source.get() or UNKNOWN_SOURCE)
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
            reg = Registration(target, hook, htype, src, st.seq)
            if path.module_hint is not None or path.key not in st.paths:
                st.paths[path.key] = path  # the explicit 'mod:qual' form is the more precise one
            st.display.setdefault(path.key, target)
            regs.append(reg)
        if logger.isEnabledFor(DEBUG):  # describe() formats; register() is per hook
            logger.debug("registered %s on target %r", reg.describe(), target)

    @hybridmethod
    def plugin_hook(self, target: str, type: HookType = HookType.AFTER) -> Callable[[H], H]:
        """Decorator form of :meth:`register`; returns the decorated object unchanged."""

        def decorate(obj: H) -> H:
            self.register(target, obj, type)  # type: ignore[arg-type]
            return obj

        return decorate

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
            # Conflicting hooks (several REPLACEs, ...): a HookConflictWarning each, once per
            # process; an escalating -W filter makes it a HookConflictError, nothing patched.
            _conflicts.report(self._state, conflicts, conflicts_var)
            call = _apply.ApplyCall(self._state, frozenset(clean_modules))
            patched = call.run(strict)  # a strict failure raises, the state rolled back
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
                self._state = _apply.State()

    @hybridmethod
    @contextlib.contextmanager
    def isolated(self) -> Iterator[HookRegistry]:
        """A clean registry for the block; on exit its patches are undone and the old state is back.

        The registry object stays the same (the default namespace holds a
        reference to it), only its state is swapped.
        """
        with self._lock:
            saved = self._state
            self._state = _apply.State()
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
    def _kind_name(rec: _apply.Record) -> str:
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
    def target_modules(self) -> dict[str, list[Registration]]:
        """The module each registered target lives in, found without importing anything."""
        with self._lock:
            st = self._state
            out: dict[str, list[Registration]] = {}
            for key, regs in st.regs.items():
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


def plugin_hook(target: str, type: HookType = HookType.AFTER) -> Callable[[H], H]:
    """Decorator registering on the default registry (the seed's ``plugin_hook``)."""
    return HookRegistry.default().plugin_hook(target, type)
