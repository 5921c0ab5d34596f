"""``HookRegistry``: registering hooks, applying them atomically, and undoing them exactly.

Registering imports nothing; ``apply_hooks()`` journals every change so a strict failure
rolls the call back and ``unapply()`` restores the exact originals (docs/architecture.md).
State lives in an instance so several engines in one process stay independent; the
class-level API acts on ``HookRegistry.default()``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Callable, Collection, Iterator

from spawnkit import _steps
from spawnkit._compat import TYPE_CHECKING
from spawnkit._flags import check_flag
from spawnkit._log import DEBUG, LazyLogger
from spawnkit.errors import ConfigError, HookError, HookRegistrationError
from spawnkit.hooks import _apply, _conflicts, _decide, _on_import, _provide, _resolve, _state
from spawnkit.hooks._hybrid import hybridmethod
from spawnkit.hooks._journal import Journal
from spawnkit.hooks._provide import Provision
from spawnkit.hooks._queries import RegistryQueries
from spawnkit.hooks._stale import BEGUN, Rebind, StaleHolder
from spawnkit.hooks.types import (
    UNKNOWN_SOURCE,
    HookSource,
    HookType,
    Registration,
    current_plugin_source,
    describe_hook,
)

if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar

    from typing_extensions import Unpack

    from spawnkit.hooks._hints import HookOptions
else:
    from spawnkit._compat import TypeVar

__all__ = ["HookRegistry", "plugin_hook"]

logger = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted

H = TypeVar("H")

#: apply_hooks() rounds for hooks registered while it applies (by a target module or a hook)
_MAX_ROUNDS = 8
_BOTH = (True, False)  # strict, then lenient


def _check_apply_args(strict: object, conflicts: object, clean_modules: object) -> None:
    """``apply_hooks()``'s arguments as it reads them: ``strict`` by truth value (``"no"`` was
    strict), ``conflicts`` by equality with ``"error"``/``"ignore"`` (``"ERROR"`` or
    ``"errors"`` warned and applied), ``clean_modules`` as names (a str was its letters)."""
    check_flag("strict", strict, call="apply_hooks")
    if conflicts not in _conflicts.POLICIES:
        raise ConfigError(
            f"apply_hooks(conflicts={conflicts!r}): the hook conflict policy is one of "
            f"{', '.join(map(repr, _conflicts.POLICIES))} (lower case); any other value was read "
            "as 'warn'. Nothing was applied.",
            setting="conflicts",
        )
    if isinstance(clean_modules, str | bytes):
        raise ConfigError(
            f"apply_hooks(clean_modules={clean_modules!r}): one string, which would be read as "
            f"its letters; pass a collection of module names: clean_modules=({clean_modules!r},). "
            "Nothing was applied.",
            setting="clean_modules",
        )


def _checked(
    target: str,
    hook: Any,
    hook_type: object,
    src: object,
    condition: object,
    flags: tuple[object, object],
) -> tuple[_resolve.TargetPath, HookType]:
    """The registration as the registry records it, or its refusal (``flags``: ``on_import``
    and ``optional``, read by truth value before, so ``optional="false"`` made it optional)."""
    if type(flags[0]) is not bool or type(flags[1]) is not bool:  # per hook: no call for bools
        for name, flag in zip(("on_import", "optional"), flags, strict=True):
            check_flag(name, flag, call=f"register({target!r}, ...)", error=HookRegistrationError)
    if not isinstance(src, HookSource):
        raise HookRegistrationError(
            f"cannot register hook {describe_hook(hook)} on target {target!r}: source must "
            f"be a HookSource, got {src!r}"
        )
    # the message is formatted only to refuse; no call at all outside an activate()
    if _steps._activating is not None and _steps.platform_activate() is not None:
        _refuse_in_activate(
            _cannot(hook, src, target), "registered it", "the hook would never be applied"
        )
    try:
        path = _resolve.parse_target(target)
        htype = hook_type if type(hook_type) is HookType else _resolve.coerce_hook_type(hook_type)
    except HookError as exc:
        raise type(exc)(f"{exc} (hook {describe_hook(hook)} from {src})") from None
    if isinstance(hook, str):
        try:
            if hook not in _resolve.WELL_SPELLED:  # a plugin registers one hook on many targets
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


def _refuse_in_activate(what: str, done: str, never: str) -> None:
    """Refuse a registration made by a platform plugin's ``activate()`` itself: a general
    plugin declared in the platform group, most likely, called in the launcher to choose the
    platform, so what it registers reaches no worker (a hook, a provided module alike)."""
    activating = _steps.platform_activate()
    if activating is None:
        return
    plugin, group = activating
    raise HookRegistrationError(
        f"{what}: {plugin} {done} from its activate(), which runs to choose the platform (in "
        f"the launcher, before any worker starts), not to load plugins: {never} in a worker. "
        f"Declare the function that registers hooks in the general plugin group {group!r}; "
        "activate() only checks for the hardware and returns a platform class's qualname or "
        "None."
    )


def _cannot(hook: Any, src: object, target: str) -> str:
    return f"cannot register hook {describe_hook(hook)} from {src} on target {target!r}"


class HookRegistry(RegistryQueries):
    """Hooks on functions, methods and classes, applied in one atomic, reversible step; every
    public method works on the class (the default registry) and on an instance."""

    _default: ClassVar[HookRegistry | None] = None
    _default_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str = "spawnkit") -> None:
        self.name = name
        self._lock = _state.LOCK  # one for all: see there
        self._state = _state.State()
        self._applying = False  # an apply call runs (in the thread holding the lock)
        _state.REGISTRIES.add(self)  # a target another registry hooks too: hooks/_layers

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

        Options are described in README; in a worker whose hooks are applied already, the
        hook is applied now (never left unapplied).
        """
        src = source if source is not None else (current_plugin_source.get() or UNKNOWN_SOURCE)
        late = _late(self, lambda: f"hook {describe_hook(hook)} from {src} on target {target!r}")
        path, htype = _checked(target, hook, hook_type, src, condition, (on_import, optional))
        if late and _not_this_platform(self, src):
            return
        with self._lock:
            self._state.touch()
            head, tail = (target, hook, htype, src), (on_import, optional, condition)
            reg = _record(self._state, path, head, tail)
        if reg is None:
            return
        if logger.isEnabledFor(DEBUG):  # describe() formats; register() is per hook
            logger.debug("registered %s on target %r", reg.describe(), target)
        if late:
            self.apply_hooks()

    @hybridmethod
    def plugin_hook(
        self, target: str, type: HookType = HookType.AFTER, **options: Unpack[HookOptions]
    ) -> Callable[[H], H]:
        """Decorator form of :meth:`register`; returns the decorated object unchanged."""

        def decorate(obj: H) -> H:
            self.register(target, obj, type, **options)  # type: ignore[arg-type]
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

        Journaled like a hook, so ``unapply()`` takes it back (parents included); the
        alternative to writing ``sys.modules`` by hand for a module this hardware lacks.
        """
        src = source if source is not None else (current_plugin_source.get() or UNKNOWN_SOURCE)
        what = f"provide_module({name!r}) from {src}"
        _refuse_in_activate(f"cannot {what}", "called it", "the module would never be provided")
        late = _late(self, lambda: what)
        _provide.check(name, module, factory, what)
        if late and _not_this_platform(self, src):
            return
        with self._lock:
            st = self._state
            _provided_once(st, name, what)
            st.touch()
            st.seq += 1
            st.provides[name] = Provision(name, module, factory, only_if_missing, src, st.seq)
        if late:
            self.apply_hooks()

    @hybridmethod
    def discard_source(self, source: HookSource) -> int:
        """Drop every registration by ``source`` (a plugin that failed while loading); the count.

        Patched targets keep their chain until the next ``apply_hooks()`` rebuilds them.
        """
        with self._lock:
            self._state.touch()
            dropped = _discard(self._state, source)
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
        """Patch every target whose registrations changed since it was last applied; their keys.

        ``strict``: one failure rolls back the whole call and raises ``HookApplyError``.
        ``clean_modules``: modules whose globals the stale-binding sweep skips; what it cannot
        rebind is kept for :meth:`stale_holders`. ``conflicts``: warn / error / ignore, and
        ``conflicts_var`` names the variable that chose it.
        """
        _check_apply_args(strict, conflicts, clean_modules)
        _drop_other_platforms(self)  # another platform's import-time hooks; before the lock
        with self._lock:
            if self._applying:
                return []  # registered while this registry applies: that call's loop takes it
            _conflicts.report(self._state, conflicts, conflicts_var)
            self._state.strict, self._state.conflicts = strict, (conflicts, conflicts_var)
            patched: list[str] = []
            rechecked = False
            self._applying = True
            self._state.touch()
            try:
                for _ in range(_MAX_ROUNDS):
                    st = self._state
                    seq = st.seq
                    call = _apply.ApplyCall(st, frozenset(clean_modules), self._module_imported)
                    patched += call.run(strict)  # a strict failure raises, the state rolled back
                    _state.note_imports(self.name, call.imported)  # for others' guards
                    self._note_stale(call.stale)
                    # on_import targets whose module this call imported (their finder
                    # call found this registry busy), then what was registered meanwhile
                    ready = [k for k in st.waiting if _resolve.imported(st.paths[k])]
                    patched += self._apply_ready(ready, None)
                    # conditions asked before the patching, asked again after it: one that
                    # reads a gate another hook REPLACEs turns, and the next round follows
                    changed = bool(call.journal.changes or ready)  # patched or restored
                    turned = _decide.recheck_conditions(st, patched=changed)
                    rechecked |= turned
                    # (and an on_import target's module the round's own applying imported)
                    if st.seq == seq and not turned and not _waiting_imported(st):
                        break
            finally:
                self._state.asked = []
                self._applying = False
                self._follow()
            if not rechecked:
                return patched
            # once each, and only what stays applied: a turned condition patches again, or undoes
            now = {rec.display for rec in self._state.applied.values()}
            return [display for display in dict.fromkeys(patched) if display in now]

    def _module_imported(self, name: str) -> None:
        """The finder's call after ``name`` ran: its first import, or a patched module's
        second run; a strict failure raises in it (in the ``import`` or ``reload()``)."""
        with self._lock:
            st = self._state
            if self._applying:
                return  # an apply_hooks() running in this thread applies them when it ends
            ready = [
                k
                for k in st.waiting
                if name in _resolve.watch_names(st.paths[k])
                and (
                    _resolve.imported(st.paths[k], done=name)
                    # or never: its package ran without it (a misspelt submodule), said now
                    or _resolve.cannot_come(st.paths[k], done=name)
                )
            ]
            again = _decide.ran_again(st, name)
            if not ready and not again:
                return
            seq = st.seq
            self._applying = True
            st.touch()
            try:
                self._apply_ready(ready, name)
                _apply_again(self, again, name)
            finally:
                self._applying = False
                self._follow()
            late = st.seq != seq or _waiting_imported(st)
        if late:
            _apply_late(self, name)

    def _follow(self) -> None:
        """Follow the modules this registry patched: one that runs again gets its hooks back."""
        st = self._state
        _on_import.follow(self, {r.res.module for r in st.applied.values()}, self._module_imported)

    def _apply_ready(self, keys: list[str], trigger: str | None) -> list[str]:
        st = self._state
        patched: list[str] = []
        groups = {strict: [k for k in keys if st.waiting[k][0] is strict] for strict in _BOTH}
        for key in keys:
            st.stop_waiting(key)
        for strict, group in groups.items():
            if group:
                call = _apply.ApplyCall(st, frozenset(), self._module_imported, trigger)
                patched += call.run(strict, only=group)
                self._note_stale(call.stale)
        return patched

    @hybridmethod
    def _take_import_spans(self) -> list[tuple[str, float, float]]:
        """``(module, start, end)`` of each target module the applies since the last call
        imported (``time.monotonic()``): a bootstrap's report and trace show them apart."""
        with self._lock:
            spans, self._state.import_spans = self._state.import_spans, []
            return spans

    def _note_stale(self, stale: list[StaleHolder]) -> None:
        """Keep what the sweep could not rebind; say so unless a bootstrap reports it by policy."""
        if not stale:
            return
        st = self._state
        # one per holder, as stale_holders() lists them: two searches may name one holder
        fresh = {(h.module, h.label): h for h in stale if (h.module, h.label) not in st.stale}
        for holder in stale:
            st.stale[(holder.module, holder.label)] = holder
        if not fresh:
            return
        from spawnkit.spec import _phase

        if _phase.too_early():
            return  # a worker's bootstrap: its apply_hooks stage reports these per guard policy
        logger.warning("%s", _stale_message(_apply.holder_dicts(st, list(fresh.values()))))

    # ------------------------------------------------------------- undoing
    @hybridmethod
    def unapply(self) -> None:
        """Restore every patched target and propagated binding; registrations are kept."""
        with self._lock:
            self._state.touch()
            try:
                problems = _restore_all(self._state)
            finally:
                self._follow()
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
                self._follow()

    @hybridmethod
    @contextlib.contextmanager
    def isolated(self) -> Iterator[HookRegistry]:
        """A clean registry for the block; on exit its patches are undone and the old state is back.

        The state is swapped, not the object, since the default namespace holds a reference.
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
                    self._follow()


def _apply_again(self: HookRegistry, keys: list[str], module: str) -> None:
    """Patch ``module``'s new objects after it ran again.  Its old ones keep their chains, so a
    reference taken before (``from module import f``) still runs the hooks, as before."""
    if not keys:
        return
    st = self._state
    for key in keys:
        del st.applied[key]
        st.on_import_of.pop(key, None)
        for where in [w for w, h in st.stale.items() if h.target == key]:
            del st.stale[where]  # references to the old objects: the sweep looks again
    call = _apply.ApplyCall(st, frozenset(), self._module_imported, module, again=True)
    patched = call.run(st.strict, only=keys)
    self._note_stale(call.stale)
    logger.info(
        "module %r ran again (importlib.reload(), or an import after it left sys.modules): "
        "applied the hooks of %d target(s) to its new objects",
        module,
        len(patched),
    )


def _apply_late(registry: HookRegistry, name: str) -> None:
    """After module ``name``'s on_import hooks: the hooks registered by those just applied or
    by the module, and another on_import target's module first imported inside that apply (a
    condition's or a hook string's import), whose finder call found the registry busy (it
    waited, pending, for a first import that was over).  ``apply_hooks()``'s rounds apply
    them and ask the conditions again, ``name`` counted as imported: its code has run."""
    _resolve.FINISHED.add(name)
    try:
        registry.apply_hooks()
    finally:
        _resolve.FINISHED.discard(name)


def _waiting_imported(st: _state.State) -> bool:
    """An ``on_import`` target still waiting whose module is imported: nothing would apply it."""
    return any(_resolve.imported(st.paths[k]) for k in st.waiting)


def _late(self: HookRegistry, what: Callable[[], str]) -> bool:
    """Whether a registration now must be applied at once; refuses one nothing would apply.

    A worker applies only its namespace's registry, so the default one there is refused.
    ``what`` names the registration only when refused: ``register()`` runs once per hook.
    """
    phase = sys.modules.get("spawnkit.spec._phase")
    # its flags read directly (worker_namespace(), too_early()): two calls a hook otherwise
    ns = phase._worker_namespace if phase is not None else None
    if ns is None:
        return False
    mine = ns.hooks
    if mine is self:
        return not (phase._in_worker and not phase._hooks_applied)  # type: ignore[union-attr]
    if self is HookRegistry._default:
        raise HookRegistrationError(
            f"cannot register {what()}: this process is a worker of namespace {ns.name!r}, "
            f"which applies only that namespace's registry (NS.hooks of {ns.name!r}), never "
            "spawnkit.hooks.HookRegistry (the default namespace's), so the hook would not "
            "take effect. Register it on the namespace's registry: "
            "spawnkit.namespace.get_namespace().hooks.register(...) in a worker, or the "
            "engine's NS.hooks.register(...) / NS.HookRegistry.register(...)."
        )
    return False


def _provided_once(st: _state.State, name: str, what: str) -> None:
    prev = st.provides.get(name)
    if prev is not None:
        raise HookRegistrationError(
            f"{what}: module {name!r} is already provided by {prev.source}; provide each "
            "module once"
        )


def _not_this_platform(registry: HookRegistry, src: HookSource) -> bool:
    """A registration of a platform package imported now, in a process whose hooks are
    applied, that is not this process's platform (a launch's selection imported it to ask
    whether its hardware is present): it would be applied at once, here only; applying
    leaves such hooks out (``_drop_other_platforms``), and so does this."""
    if not src.platform or _own_platform(registry) == src.plugin_name:
        return False
    logger.info("left out the registration of %s: not this process's platform", src)
    return True


def _drop_other_platforms(registry: HookRegistry) -> None:
    """Forget the hooks a platform package that is not this process's platform registered as
    it was imported: auto-discovery imports every installed platform package to ask whether
    its hardware is present, so this process (a launcher that bootstraps itself or applies
    its namespace's hooks itself, a rank that discovers its own platform) held them and
    applied them, while a worker, which imports only its own platform's package, never has
    them.  Asked at every ``apply_hooks()``, however called (``NS.hooks.apply_hooks()`` by
    hand too); a registry no namespace owns keeps them, having no platform to ask."""
    if not registry._platform_sources():
        return
    mine = _own_platform(registry)
    if mine is _NO_NAMESPACE:
        return
    for source in registry._platform_sources():  # again: deciding may have imported some
        if source.plugin_name != mine:  # a platform's name is unique in its group
            registry.discard_source(source)


#: ``_own_platform`` of a registry that no namespace of this process owns.
_NO_NAMESPACE = "\0"


def _own_platform(registry: HookRegistry) -> str | None:
    """The platform plugin this process runs on in the namespace whose registry this is (its
    decision made now if it never was); None for a built-in, the base platform or none."""
    platforms = _platforms_of(registry)
    if platforms is None:
        return _NO_NAMESPACE
    try:
        chosen = platforms.selection()
    except Exception:  # no platform here: none of theirs is this process's (its stage says why)
        return None
    name: str | None = chosen.name if chosen.kind == "plugin" else None
    return name


def _platforms_of(registry: HookRegistry) -> Any:
    """The platform manager of the namespace that owns ``registry``: this worker's, a
    declared one's (``NS.hooks``), or the default namespace's; None for a registry of its own."""
    phase = sys.modules.get("spawnkit.spec._phase")
    ns = phase.worker_namespace() if phase is not None else None
    if ns is not None and ns.hooks is registry:
        return ns.platforms
    if registry is HookRegistry._default:
        from spawnkit.platforms.discovery import PlatformManager

        return PlatformManager.default()
    from spawnkit._namespace_registry import DECLARED

    ns = DECLARED.get(registry.name)
    return ns.platforms if ns is not None and getattr(ns, "_hooks", None) is registry else None


def _record(
    st: _state.State, path: _resolve.TargetPath, head: tuple[Any, ...], tail: tuple[Any, ...]
) -> Registration | None:
    """``Registration(*head, seq, *tail)`` numbered and recorded; None (with a warning) when
    that hook is registered on that target already.  One record per hook, built once."""
    target, hook, hook_type, source = head
    on_import, optional, condition = tail
    regs = st.regs.setdefault(path.key, [])
    for prev in regs:
        if prev.hook_type is hook_type and (prev.hook is hook or prev.hook == hook):
            logger.warning(
                "ignored a second registration of %s on target %r: it is already "
                "registered (by %s); a hook is applied once per target",
                Registration(target, hook, hook_type, source, -1).describe(),
                target,
                prev.source,
            )
            return None
    st.seq += 1
    reg = Registration(target, hook, hook_type, source, st.seq, on_import, optional, condition)
    if path.module_hint is not None or path.key not in st.paths:
        st.paths[path.key] = path  # the explicit 'mod:qual' form is the more precise one
    st.display.setdefault(path.key, target)
    regs.append(reg)
    if source is UNKNOWN_SOURCE:  # no plugin's: the launching script's own, perhaps
        _note_main_line(st, reg.seq)
    return reg


def _note_main_line(st: _state.State, seq: int) -> None:
    """Where in ``__main__``'s body this registration runs, when that body is on the stack: a
    spawn or forkserver worker re-runs that line as ``__mp_main__`` if no ``if`` on
    ``__name__`` guards it, and so registers and applies the hook itself (a launch then does
    not call it stray: ``launch/_selection``).  Only for hooks no plugin registers."""
    main = sys.modules.get("__main__")
    if main is None:
        return
    scope = vars(main)
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is scope and frame.f_code.co_name == "<module>":
            st.main_lines[seq] = (main, frame.f_code.co_filename, frame.f_lineno)
            return
        frame = frame.f_back


def _discard(st: _state.State, source: HookSource) -> int:
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
    return dropped


def imported_by_other(registry: str, module: str) -> str | None:
    """The name of another registry (its namespace) than ``registry`` whose ``apply_hooks()``
    imported ``module``, still the one in ``sys.modules``; else None.  The import guard asks:
    such a module is no early import of the user's code (``bootstrap_here(A)``, then
    ``bootstrap_here(B)``, both hooking it), only a target whose originals A's hooks wrap."""
    found = _state.APPLY_IMPORTS.get(module)
    if found is None or found[0] == registry or found[1] != id(sys.modules.get(module)):
        return None
    return found[0]


def _restore_all(st: _state.State) -> list[str]:
    from spawnkit.hooks._propagate import find_holders

    journal = Journal()
    rebinds: dict[int, Rebind] = {}
    problems: list[str] = []
    own = _apply.own_objects(st.applied.values())
    layered: list[Any] = []  # other registries' chains on ours: rebuilt on the originals
    kept: dict[str, _state.Record] = {}  # under another's class REPLACE: still ours to undo
    for rec in reversed(list(st.applied.values())):
        try:
            layered += _apply.restore(st, rec, journal, rebinds)
        except HookError as exc:  # refused before any change (hooks/_layers.refuse)
            problems.append(str(exc))
            kept[rec.key] = rec
        except Exception as exc:
            problems.append(f"{rec.display!r}: {type(exc).__name__}: {exc}")
    st.applied = kept
    # one level down too, as the apply's sweep: a class defined after the apply (or as it
    # imported the target's package) holds the chain itself, `tokfn = staticmethod(tokenize)`
    late = find_holders(rebinds, containers=True, stale=[])
    for modname, namespace, name, label, rebind in late:
        if not _apply.late_binding(rebind, name, own):
            continue  # the plugin's own name for its replacement class
        try:
            journal.rebind(modname, namespace, name, rebind.new)
        except (AttributeError, TypeError, ValueError) as exc:  # a class refusing setattr
            problems.append(f"{modname}.{label}: {type(exc).__name__}: {exc}")
            continue
        logger.debug("restored late binding %s.%s", modname, label)
    if layered:
        problems += _apply.rebase_layers(layered)
    for provided in reversed(_decide.forget(st)):
        try:
            provided.undo()
        except Exception as exc:
            problems.append(f"provided module {provided.provision.name!r}: {exc}")
    return problems


def _stale_message(holders: list[dict[str, str]]) -> str:
    from spawnkit.hooks._propagate import stale_fix, what_runs

    listed = "; ".join(
        f"{h['module']}.{h['name']} ({h['kind']}), of {h['target']!r}"
        if h["kind"] == BEGUN
        else f"{h['module']}.{h['name']} ({h['kind']}) holds the original {h['target']!r}"
        for h in holders
    )
    if all(h["kind"] == BEGUN for h in holders):
        head = (
            f"{len(holders)} call(s) of hooked originals began in another thread before the "
            f"hooks were applied: {listed}. The hooks never run for them. "
        )
    else:
        head = (
            f"{len(holders)} reference(s) to hooked originals could not be rebound: {listed}. "
            + f"Calls through them run {what_runs(holders)}. "
        )
    return head + stale_fix({h["kind"] for h in holders})


def plugin_hook(
    target: str, type: HookType = HookType.AFTER, **options: Unpack[HookOptions]
) -> Callable[[H], H]:
    """Decorator registering on the default registry (the seed's ``plugin_hook``)."""
    return HookRegistry.default().plugin_hook(target, type, **options)
