"""One ``apply_hooks()`` call: resolve each target, build its chain, install it, rebind, undo.

``HookRegistry`` records registrations; this module turns them into patches.
A call is an :class:`ApplyCall` over the registry's :class:`State`: targets
left with no hooks are restored first; whole-class REPLACE targets are
patched before everything else, so that ``Class.method`` targets land on the
replacement; each round ends with one stale-binding sweep (``_propagate``).
Every change goes through a :class:`~spawnkit.hooks._journal.Journal`, so a
strict failure rolls the whole call back and leaves no target half-patched.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import repeat
from operator import is_, itemgetter, methodcaller
from types import FrameType, FunctionType, MethodType, ModuleType
from weakref import getweakrefcount

from spawnkit._compat import TYPE_CHECKING
from spawnkit._log import DEBUG, LazyLogger
from spawnkit.errors import HookApplyError, HookConflictError, HookRegistrationError
from spawnkit.hooks import _conflicts, _decide, _on_import, _resolve, _state
from spawnkit.hooks._chain import _CO_COROUTINE, build_chain, inherited, is_async_callable
from spawnkit.hooks._journal import ABSENT, Journal, item_of, put_attr
from spawnkit.hooks._slots import atexit_kept
from spawnkit.hooks._stale import (
    CALLED_AT_IMPORT,
    LAYERED,
    LRU_CACHE,
    ClassAttrs,
    DispatchTable,
    Holder,
    Rebind,
    StaleHolder,
    other_references,
)
from spawnkit.hooks._state import Record, State
from spawnkit.hooks.types import HookType, Registration, describe_hook

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

logger = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted
_first, _second = itemgetter(0), itemgetter(1)


def check_hook_object(hook: Any, hook_type: HookType, what: str) -> None:
    if not callable(hook):
        raise HookRegistrationError(
            f"{what}: the hook is a {type(hook).__name__}, not a callable; pass a function, "
            "a class (REPLACE only) or a 'module:qualname' string"
        )
    if isinstance(hook, type) and hook_type is not HookType.REPLACE:
        raise HookRegistrationError(
            f"{what}: the hook is the class {describe_hook(hook)}, and a class can only be "
            f"a REPLACE hook (got {hook_type.name}); register it with HookType.REPLACE or "
            "hook one of its methods with a function"
        )


def _what(reg: Registration) -> str:
    return f"{reg.describe()} on target {reg.target!r}"


def hook_module(hook: Any) -> str | None:
    if isinstance(hook, str):
        return hook.partition(":")[0]
    module = getattr(hook, "__module__", None)
    return module if isinstance(module, str) else None


def restore(st: State, rec: Record, journal: Journal, rebinds: dict[int, Rebind]) -> list[Any]:
    """Put one target back as it was (journaled); late holders are left to ``rebinds``.

    A target someone replaced after it was applied keeps their object: undoing ours must
    not undo theirs.  Another registry's chain built on ours there is returned, to be
    rebuilt on what is put back (``rebase_layers``); a class REPLACE of one is refused.
    """
    layers: list[Any] = []
    if st.spellings:
        st.unalias(rec.key)  # its other names are hooked on their own again
    if not _decide.displaced_by(rec)[0]:
        if _raw_at(rec) is not rec.installed_raw:
            layers = _stacked(rec, undoing=True)  # wrapped: by another registry's chain?
        journal.put(rec.res.owner, rec.res.attr, rec.before)
    held = rec.held
    for modname, container, key, _label in rec.bindings:
        item = item_of(container, key)
        if item is rec.installed:
            journal.rebind(modname, container, key, held)
        elif type(item) is MethodType and item.__func__ is rec.installed:  # a slot's (_slots)
            journal.rebind(modname, container, key, MethodType(held, item.__self__))
    for where in [w for w, h in st.stale.items() if h.target == rec.key]:
        del st.stale[where]
    if rec.propagates:
        rebinds[id(rec.installed)] = undoing(rec, held)
    return layers


def _hides_other(
    call: ApplyCall,
    key: str,
    res: _resolve.Resolved,
    before: Any,
    installed: Any,
    regs: tuple[Registration, ...],
) -> None:
    """A REPLACE built over another registry's chain (or class REPLACE) hides its hooks: a
    ``HookConflictWarning`` (``<PREFIX>_HOOK_CONFLICTS=error``: refused, nothing patched)."""
    from spawnkit.hooks import _layers

    replacer = next(r for r in reversed(regs) if r.hook_type is HookType.REPLACE).describe()
    display = call.st.display[key]
    message = _layers.hides(
        key, display, res.owner, res.attr, before, installed, replacer, call.st
    )
    if message is None:
        return
    if call.st.conflicts[0] == "error":
        raise HookConflictError(message, conflicts=[message])
    call.dropped.append(message)


def _stacked(rec: Record, undoing: bool) -> list[Any]:
    """The other registries' chains standing on ``rec``'s (``_layers``); rare: imported here."""
    from spawnkit.hooks import _layers

    layers = _layers.above(rec)
    _layers.refuse(rec, layers, undoing)
    return layers


def undoing(rec: Record, held: Any) -> Rebind:
    """Where modules bound ``rec``'s installed object after the apply (``from eng.ops import
    Norm`` run later), back to ``held``: never in the hook modules, where a class REPLACE's
    replacement is defined (``counting.CountingNorm``, which undo once made the original)."""
    return Rebind(rec.installed, held, rec.hook_modules, rec.key)


def late_binding(rebind: Rebind, name: Any, own: dict[int, str]) -> bool:
    """Whether a module's ``name`` holding ``rebind.old`` is a late import of the target.

    A spawnkit chain is held only by what imported the target; a plugin's own object
    installed as it is (a replacement class, ``own``: by id, the target's name) may be held
    under its own name by any module of the plugin's: only the target's name is the import.
    """
    attr = own.get(id(rebind.old))
    return attr is None or name == attr


def own_objects(recs: Iterable[Record]) -> dict[int, str]:
    """The installed objects that are a hook itself, by id: their target's attribute name
    (``late_binding``).  A chain is always a function spawnkit made; a hook installed as it
    is never is one (a replacement class, a kernel object for a kernel)."""
    return {
        id(rec.installed): rec.res.attr
        for rec in recs
        if type(rec.installed) is not FunctionType
    }


def holder_dicts(st: State, holders: list[StaleHolder]) -> list[dict[str, str]]:
    """Stale holders as the plain dicts ``HookRegistry.stale_holders()`` returns."""
    return [
        {
            "module": h.module,
            "name": h.label,
            "kind": h.kind,
            "target": st.display.get(h.target, h.target),
        }
        for h in holders
    ]


class ApplyCall:
    """One ``apply_hooks()`` call over a registry's state (see the module docstring)."""

    def __init__(
        self,
        st: State,
        clean_modules: frozenset[str],
        on_import: Callable[[str], None],
        trigger: str | None = None,
        again: bool = False,
    ) -> None:
        self.st = st
        self.clean_modules = clean_modules
        self.on_import = on_import  # what a deferred target's module import calls
        self.trigger = trigger  # the module whose first import runs this call, if any
        self.again = again  # ... or whose second run (reload) does
        self.journal = Journal()
        # One resolver for the call: each target module is imported once, and the targets
        # of a module (sorted together below) are resolved from it.
        self.resolver = _resolve.Resolver()
        self.loaded: dict[str, Any] = {}  # 'module:qualname' hook -> object, for this call
        # a lone hook (object's id, string, type) -> its _hook_modules: see _modules_of
        self.hook_mods: dict[tuple[int, str | None, HookType], tuple[frozenset[str], bool]] = {}
        self.hooks: dict[str, list[tuple[Registration, Any]]] = {}
        self.failures: dict[str, tuple[list[str], str]] = {}
        self.errors: dict[str, BaseException] = {}
        self.first_error: BaseException | None = None
        self.messages: list[str] = []
        self.dropped: list[str] = []  # AROUND hooks that drop the result: HookConflictWarning
        self.patched: list[str] = []
        self.patched_keys: dict[str, None] = {}  # in order; asked per key: not a list
        self.stale: list[StaleHolder] = []
        self.classes: set[str] = set()  # this call's whole-class REPLACE targets
        self.early: set[str] = set()  # targets installed as their module finished importing
        self.counted: list[str] = []  # targets whose originals something else held: see _build
        self.weak: dict[str, int] = {}  # ... held by a weak reference: target -> id(original)
        # module -> a global name in it -> (None: the name's own call, or an attribute called
        # on it) -> target: what its import-time calls may have run before the hooks
        self.rebound: dict[str, dict[str, dict[str | None, str]]] = {}
        self.modules_before = len(sys.modules)  # sys.modules' first entries: imported before
        self.imported: list[str] = []  # the target modules this call imported itself
        self.layered: list[Any] = []  # other registries' chains on a target it changed
        # id(original or installed chain) -> the key of the record: another name of it joins
        # that record (``_spelling_of``); made at the first fresh target that can need it
        self.objects: dict[int, str] | None = None

    def _changed(self, keys: list[str]) -> list[str]:
        st = self.st
        out = []
        plain = not st.aliases and not st.dropped  # live() is then the registrations: no call
        for k in keys:
            regs = st.regs.get(k, []) if plain else st.live(k)
            if regs and (k not in st.applied or st.applied[k].seqs != tuple(r.seq for r in regs)):
                out.append(k)
        return out

    def _decide(
        self, strict: bool, only: list[str] | None
    ) -> tuple[list[str], list[str], list[str]]:
        """(pending, orphans, newly deferred): what this call patches, restores and waits for."""
        st = self.st
        deferred: list[str] = []
        if only is not None:
            candidates = self._changed(only)
            conditions = True  # a few keys: each is asked
        else:
            provided, failed = _decide.provide(st, self.journal)
            for name, exc in failed.items():
                self._fail(name, exc, [str(st.provides[name].source)])
            for name in provided:
                st.failed.pop(name, None)
            waiting = set(st.waiting)
            keys = list(st.regs)
            if st.spellings:  # a key left with only its other names' hooks still changes
                keys += [k for k in st.spellings if k not in st.regs]
            candidates = self._changed(keys)
            on_import, conditions = _decide.asked_for(st)
            if on_import:
                candidates = [
                    k for k in candidates if not _decide.defer(st, k, strict, self.on_import)
                ]
            deferred = [k for k in st.waiting if k not in waiting]
        dropped = len(st.dropped)
        for key in candidates if conditions else ():
            err = _decide.check_conditions(st, key)
            if err is not None:
                self._fail(key, err)
        if len(st.dropped) == dropped and not self.failures:
            pending = candidates  # no condition dropped a hook: each candidate still changed
        else:
            pending = self._changed([k for k in candidates if k not in self.failures])
        orphans = [] if only is not None else [k for k in st.applied if not st.live(k)]
        return pending, orphans, deferred

    def run(self, strict: bool, only: list[str] | None = None) -> list[str]:
        """Patch what changed (or only the keys ``only``); returns the displays patched."""
        st = self.st
        snapshot = (dict(st.applied), dict(st.stale), dict(st.provided), dict(st.dropped))
        names = (dict(st.aliases), {k: list(v) for k, v in st.spellings.items()})
        pending, orphans, deferred = self._decide(strict, only)
        if not pending and not orphans and not self.failures:
            return []
        restore_rebinds = _restore_orphans(self, orphans, pending)
        for key in pending:
            self._load_hooks(key)
        self.classes = classes = _class_replaces(self.hooks)
        # Whole-class REPLACE targets first, so that 'Class.method' targets land on the
        # replacement; within a round a target sorts before the targets below it.  A key is
        # its parts joined by '.', which sorts below every character an identifier may hold,
        # so the keys sort as their parts do ('a.b' < 'a.b.c' < 'a_c'), with no key function.
        _install_new(self, list(self.hooks))  # as their modules import: see there
        early = self.early  # the rounds: re-applied targets, and what moved onto a new class
        later = [k for k in self.hooks if k not in classes and k not in early]
        self._round(sorted(k for k in classes if k not in early), later, dict(restore_rebinds))
        later.sort()  # the first round may have added its dependents
        self._round(later, None, {})
        for key, (_, text) in self.failures.items():
            st.failed[key] = text
        if self.failures and (strict or _strict_dists_failed(self)):
            problems = self.journal.rollback()
            problems += _unbind(self)
            st.applied, st.stale, st.provided, st.dropped = snapshot
            st.aliases, st.spellings = names
            for key in deferred:
                st.stop_waiting(key)
            raise _error(self, problems, strict) from self.first_error
        if self.layered:  # other registries' chains on ours: rebuilt on what stands now
            self.messages += rebase_layers(self.layered)
        _owner_holders(self)  # and those holding the class or module of a target
        _hidden_holders(self)  # and those no sweep reads, where the counts say there are some
        _filled_caches(self)  # and the lru_caches that answered from the originals before
        if self.rebound:  # names bound before the hooks: their module's import-time calls
            self.stale += _called_at_import(self.rebound)
        if st.waiting:
            for key in pending:
                st.stop_waiting(key)  # its module got imported unseen (or it was decided here)
        if st.failed or self.trigger is not None:
            for key in self.patched_keys:
                st.failed.pop(key, None)
                if self.trigger is not None and not self.again:
                    st.on_import_of[key] = self.trigger
        if self.failures:
            _log_failures(self)
        for message in self.messages:
            logger.warning("%s", message)
        _conflicts.report(st, *st.conflicts, found=self.dropped)
        if logger.isEnabledFor(DEBUG):
            for name in self.patched:
                logger.debug("applied hooks on target %r", name)
        return self.patched

    def _fail(self, key: str, exc: BaseException, sources: list[str] | None = None) -> None:
        if sources is None:
            sources = sorted({str(r.source) for r in self.st.regs.get(key, [])})
        self.failures[key] = (sources, f"{type(exc).__name__}: {exc}")
        self.errors[key] = exc
        if self.first_error is None:
            self.first_error = exc

    def _load_hooks(self, key: str) -> bool:
        """The (registration, hook object) pairs of ``key`` into ``self.hooks``; False: failed."""
        try:
            self.hooks[key] = [
                (r, self._hook_object(r) if isinstance(r.hook, str) else r.hook)
                for r in self.st.live(key)
            ]
        except Exception as exc:
            self._fail(key, exc)
            return False
        return True

    def _hook_object(self, reg: Registration) -> Any:
        """The hook itself; a string hook shared by many targets is imported once per call."""
        if not isinstance(reg.hook, str):
            return reg.hook
        cache = self.st.hook_objects
        obj = cache.get(reg.seq)
        if obj is None:
            obj = self.loaded.get(reg.hook)
            if obj is None:
                try:
                    obj = self.loaded[reg.hook] = _resolve.import_hook(reg.hook)
                except HookRegistrationError as exc:
                    raise HookRegistrationError(f"{_what(reg)}: {exc}") from exc.__cause__
            if not callable(obj) or isinstance(obj, type):  # the message only when it fails
                check_hook_object(obj, reg.hook_type, _what(reg))
            cache[reg.seq] = obj
        return obj

    def _round(self, keys: list[str], later: list[str] | None, rebinds: dict[int, Rebind]) -> None:
        """Install ``keys``, then sweep once for what held their originals.

        ``later`` is the next round's list, in the class round only: the
        targets below a class that is replaced now move there, to be
        re-resolved on the new class.
        """
        skip: set[tuple[str, str]] = set()
        for key in keys:
            _install(self, key, later, rebinds, skip)
        self._propagate(rebinds, frozenset(skip))

    def _build(
        self,
        key: str,
        pairs: list[tuple[Registration, Any]],
        prev: Record | None,
        found: _resolve.Resolved | None = None,
    ) -> Record:
        """Resolve (unless ``found``) and build one chain; installing it is the caller's.

        Once per target, a hundred in a worker's apply stage: the usual case (a function, or
        a class's own method) takes no helper that would only hand its input back."""
        st = self.st
        display = st.display[key]
        regs = tuple(map(_first, pairs))
        others = None
        if prev is not None and not _replaced_since(prev, self.messages):
            res, before, original = prev.res, prev.before, prev.original
        else:
            res = found or self.resolver.resolve(st.paths[key], display)
            others = other_references(res)  # first: before this call holds the original too
            if others:
                self.counted.append(key)  # what held it is looked for (_hidden_holders)
            original = res.raw
            if type(original) is not FunctionType or getweakrefcount(original):  # (else none)
                weak = _weakly_held(original)
                if weak is not None:
                    self.weak[key] = id(weak)  # ... and what holds its weak references
            before = vars(res.owner).get(res.attr, ABSENT)
        if type(res.raw) is FunctionType and isinstance(res.owner, ModuleType):
            kind, func = _resolve.FUNCTION, res.raw  # classify's first answer, the usual one
        else:
            kind, func = _resolve.classify(res, display)
        if kind == _resolve.CLASS:
            installed = raw = _replacement_class(display, pairs, func, self.messages)
        else:
            if res.had_own and isinstance(res.owner, type):  # only a class's own method
                self._check_override(key, res, regs)
            notes = None if st.conflicts[0] == "error" else self.dropped
            # is_async_callable's first case inline: a plain function, nearly every target
            plain_async = type(func) is FunctionType and (
                "inspect" not in sys.modules or not func.__dict__
            )
            installed = build_chain(
                func, pairs, key=key, display=display,
                is_async=func.__code__.co_flags & _CO_COROUTINE != 0
                if plain_async else is_async_callable(func),
                notes=notes, through=None if res.had_own else _through(res, kind),
            )  # fmt: skip
            plain = kind == _resolve.FUNCTION or kind == _resolve.METHOD
            raw = installed if plain else _as_attribute(kind, installed)
        modules, replaces = _modules_of(self, pairs)
        if others is not None and replaces:
            _hides_other(self, key, res, before, installed, regs)  # another namespace's?
        return Record(
            key=key, display=display, res=res, kind=kind, before=before, original=original,
            installed_raw=raw, installed=installed, regs=regs, hooks=tuple(map(_second, pairs)),
            hook_modules=modules, bindings=list(prev.bindings) if prev is not None else [],
            others=others,
        )  # fmt: skip

    def _check_override(
        self, key: str, res: _resolve.Resolved, regs: tuple[Registration, ...]
    ) -> None:
        """Warn when a method REPLACE overrides what a class REPLACE defined itself."""
        parent = self.st.applied.get(key.rpartition(".")[0])
        if parent is None or parent.kind != _resolve.CLASS or parent.installed is not res.owner:
            return
        if not any(r.hook_type is HookType.REPLACE for r in regs):
            return
        method = next(r for r in reversed(regs) if r.hook_type is HookType.REPLACE)
        self.messages.append(
            f"{method.describe()} on {self.st.display[key]!r} overrides the implementation "
            f"that {parent.regs[-1].describe()} defines in its replacement class "
            f"{describe_hook(parent.installed)}"
        )

    def _propagate(self, rebinds: dict[int, Rebind], skip: frozenset[tuple[str, str]]) -> None:
        """Rebind what holds an original; keep the references that cannot be rebound."""
        applied = self.st.applied
        clean = _vouched(self.clean_modules, rebinds)
        holders = _swept(rebinds, skip, clean, self.stale)
        for modname, container, key, label, rebind in holders:
            try:
                self.journal.rebind(modname, container, key, rebind.new)
            # a class that refuses setattr; a signal handler set from a thread but the main one
            except (AttributeError, TypeError, ValueError) as exc:
                what = _REFUSING.get(type(container), "signal handler")
                kind = f"{what} that cannot be set ({type(exc).__name__}: {exc})"
                self.stale.append(StaleHolder(modname, label, kind, rebind.key))
                continue
            rec = applied.get(rebind.key)
            new = rebind.new.__func__ if type(rebind.new) is MethodType else rebind.new
            if rec is not None and new is rec.installed:  # (a slot's bound method: _slots)
                _note_binding(rec, (modname, container, key, label))
                if rebind.old is rec.held and _is_globals(modname, container):
                    self.rebound.setdefault(modname, {}).setdefault(key, {})[None] = rec.key
                logger.debug(
                    "rebound stale binding %s.%s to the hooked %r", modname, label, rec.display
                )


def _swept(
    rebinds: dict[int, Rebind],
    skip: frozenset[tuple[str, str]],
    clean: frozenset[str],
    stale: list[StaleHolder],
) -> list[Holder]:
    """``_propagate.find_holders``, imported only where an original has another reference to
    sweep for: a worker whose targets were imported after its hooks has none (issue #23)."""
    if not rebinds:
        return []
    from spawnkit.hooks._propagate import find_holders

    return find_holders(rebinds, skip, clean, containers=True, stale=stale)


def _hook_modules(pairs: list[tuple[Registration, Any]]) -> tuple[frozenset[str], bool]:
    """The hooks' modules, and a 'module:qualname' hook's own (it may re-export the object);
    and whether one of the hooks is a REPLACE: one pass, once per target built."""
    modules: set[str] = set()
    replaces = False
    for reg, obj in pairs:
        module = hook_module(obj) if isinstance(obj, str) else getattr(obj, "__module__", None)
        if module and isinstance(module, str):
            modules.add(module)
        if type(reg.hook) is str:
            modules.add(reg.hook.partition(":")[0])
        replaces = replaces or reg.hook_type is HookType.REPLACE
    modules.discard("")
    return frozenset(modules), replaces


def _modules_of(
    call: ApplyCall, pairs: list[tuple[Registration, Any]]
) -> tuple[frozenset[str], bool]:
    """``_hook_modules(pairs)``, read once a hook for the targets that have that hook alone:
    a plugin's one hook on many targets (the object lives as long as the call's cache)."""
    if len(pairs) != 1:
        return _hook_modules(pairs)
    reg, obj = pairs[0]
    one = (id(obj), reg.hook if type(reg.hook) is str else None, reg.hook_type)
    found = call.hook_mods.get(one)
    if found is None:
        found = call.hook_mods[one] = _hook_modules(pairs)
    return found


def _class_replaces(hooks: dict[str, list[tuple[Registration, Any]]]) -> set[str]:
    """The keys a class replaces (a REPLACE hook that is a class): one flat pass over every
    pending target's hooks, nearly always finding none."""
    found: set[str] = set()
    replace = HookType.REPLACE
    for key, pairs in hooks.items():
        for reg, obj in pairs:
            if reg.hook_type is replace and isinstance(obj, type):
                found.add(key)
                break
    return found


def _restore_orphans(
    self: ApplyCall, orphans: list[str], pending: list[str]
) -> dict[int, Rebind]:
    """Restore the targets left with no hooks; their stale holders go to the first sweep."""
    st = self.st
    rebinds: dict[int, Rebind] = {}
    for key in orphans:
        rec = st.applied.pop(key, None)
        if rec is None:
            continue  # a method of a class orphan, restored with it below
        if rec.kind == _resolve.CLASS:
            for dep in [d for d in st.applied if d.startswith(key + ".")]:
                # they were patched on the replacement, which is going away:
                # re-resolve them on the class that comes back
                self.layered += restore(st, st.applied.pop(dep), self.journal, rebinds)
                if st.live(dep) and dep not in pending:
                    pending.append(dep)
        self.layered += restore(st, rec, self.journal, rebinds)
        logger.debug("restored target %r: no hooks left on it", rec.display)
    return rebinds


def _is_globals(module: str, container: Any) -> bool:
    return container is getattr(sys.modules.get(module), "__dict__", None)


def _called_at_import(rebound: dict[str, dict[str, dict[str | None, str]]]) -> list[StaleHolder]:
    """Calls of the originals that ran as their modules were imported, before the hooks
    (``_is_hip = is_hip()`` in a module a plugin imported at its top; ``Scheduler()`` with
    ``Scheduler.__init__`` hooked): the values they computed stay the originals'.  Read from
    the source of those modules (``_import_calls``, imported only then)."""
    from spawnkit.hooks._import_calls import calls_at_import

    return [
        StaleHolder(module, f"{name}{'.' + attr if attr else ''}() at line {line}",
                    CALLED_AT_IMPORT, names[name][attr])
        for module, names in rebound.items()
        for (name, attr), lines in calls_at_import(module, names).items()
        for line in lines
    ]  # fmt: skip


def _owner_holders(call: ApplyCall) -> None:
    """Into ``call.rebound``: the modules imported before the call, in the targets' own
    packages, that hold by a global name the class or the module a target the call hooked
    for the first time lives in.  That owner is patched in place, so the sweep rebinds
    nothing there, yet their ``Scheduler.default_limit()`` (``Scheduler()``, for a hooked
    constructor) or ``utils.is_hip()`` at import ran the original.  The owner's own module
    is left out: it always runs before the hooks.

    First, by name only: a module of those packages imported then at all (C-level passes
    over the keys; a worker's are nearly always imported by the call itself), before the
    per-target walk for the owners (0.03 ms of a worker's apply stage, for none)."""
    packages = set(map(_first, map(_package_of, call.early)))  # those of `related`, and more
    if next(_imported_before(call, packages), None) is None:
        return
    owners: dict[int, dict[str | None, str]] = {}
    for key in call.early:
        rec = call.st.applied.get(key)
        if rec is None or rec.kind == _resolve.CLASS:
            continue
        owner, attr = rec.res.owner, rec.res.attr
        if isinstance(owner, type):
            owners.setdefault(id(owner), {})[None if attr in _CONSTRUCTORS else attr] = key
        elif isinstance(owner, ModuleType):
            owners.setdefault(id(owner), {})[attr] = key
    if not owners:
        return
    related = {key.partition(".")[0] for by in owners.values() for key in by.values()}
    for name, namespace in _imported_before(call, related):
        module = sys.modules.get(name)
        for held, value in namespace.items():
            found = owners.get(id(value))
            if found is not None and value is not module and _home(value) != name:
                call.rebound.setdefault(name, {}).setdefault(held, {}).update(found)


_package_of = methodcaller("partition", ".")


def _imported_before(call: ApplyCall, related: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, globals) of each module of the ``related`` top-level packages imported before
    ``call`` began and after the clean ones: sys.modules keeps import order, the clean ones (a
    worker's, imported before plugins loaded) first, what this call imported last."""
    clean = call.clean_modules
    for name in list(sys.modules)[len(clean) : call.modules_before]:
        if name.partition(".")[0] not in related or name in clean:
            continue
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if type(namespace) is dict:
            yield name, namespace


def _weakly_held(raw: Any) -> Any:
    """The function ``raw`` is (or wraps) where a weak reference points at it, else None.

    spawnkit makes none to an original, so one is another library's (a signal's receivers,
    a ``weakref.WeakMethod`` observer): it calls the original, no rebinding reaches it, and
    the count of strong references never sees it.  One C-level read per fresh target."""
    func = raw.__func__ if type(raw) in (staticmethod, classmethod) else raw
    return func if type(func) is FunctionType and getweakrefcount(func) else None


def _hidden_holders(call: ApplyCall) -> None:
    """Into ``call.stale``: what holds the original of a target this call hooked for the
    first time where no sweep looks (an object's attribute: a web route, a thread's target),
    for each original the sweep's finds and the hook modules' own copies leave references of
    unexplained, and each one something refers to weakly (``_hidden``, imported only then)."""
    if not call.counted and not call.classes and not call.weak:
        return  # most applies: every original was held by its home only
    found: dict[str, int] = {}
    for holder in call.stale:
        found[holder.target] = found.get(holder.target, 0) + 1
    wanted: list[tuple[Any, str, Any]] = []
    ignored: set[str] = set()
    layered: dict[str, tuple[str, int]] = {}  # key -> the namespace below, references left
    for key in call.classes:
        rec = call.st.applied.get(key)
        if rec is not None and rec.kind == _resolve.CLASS and key in call.patched_keys:
            wanted.append((rec.held, key, rec.installed_raw))  # a class: never counted
            ignored |= rec.hook_modules
    for key in call.counted:
        rec = call.st.applied.get(key)
        if rec is None or not rec.others:  # an install that failed
            continue
        # one module under two names (``__main__`` and ``__mp_main__``) is one reference
        seen = len({(id(b[1]), b[2]) for b in rec.bindings}) + found.get(key, 0)
        held = rec.held
        if rec.others > seen:
            for name in rec.hook_modules:  # a plugin's `from eng.ops import tok as _orig`
                seen += sum(map(is_, list(vars(sys.modules.get(name, sys)).values()), repeat(held)))
        if rec.others > seen and len(_state.REGISTRIES) > 1:
            seen += _layer_below(call, rec, seen, layered)
        if rec.others > seen:
            wanted.append((held, key, rec.installed_raw))
            ignored |= rec.hook_modules
    weak = _weak_originals(call, ignored)
    if wanted or weak:
        from spawnkit.hooks._hidden import hidden_holders

        try:
            named, items = hidden_holders(wanted, ignored, call.stale, weak)
            call.stale += named
            _rebind_items(call, items)
            if layered:
                said = {h.target for h in named} | {item[4] for item in items}
                _unexplained_layers(call, layered, said)
        except Exception as exc:  # a diagnosis: it must not fail the apply it diagnoses
            keys = map(_second, wanted)
            logger.warning(
                "could not look for what else holds the originals of %s (%s: %s); a holder "
                "there would run them without the hooks",
                ", ".join(sorted({call.st.display.get(k, k) for k in [*keys, *call.weak]})),
                type(exc).__name__,
                exc,
            )


def _layer_below(
    call: ApplyCall, rec: Record, seen: int, layered: dict[str, tuple[str, int]]
) -> int:
    """The references to ``rec``'s original that the record of another namespace holds,
    where that original is its chain (``bootstrap_here(A)`` then ``bootstrap_here(B)``: B's
    chain wraps A's); what is left is noted in ``layered``.  Rare: counts left over with
    two registries (``_layers``, imported only then)."""
    from spawnkit.hooks import _layers

    below = _layers.chains_of_others(call.st).get(id(rec.original))
    if below is None:
        return 0
    name, under = below
    own = _layers.held_by_record(under, rec.original)
    layered[rec.key] = (name, (rec.others or 0) - seen - own)
    return own


def _unexplained_layers(
    call: ApplyCall, layered: dict[str, tuple[str, int]], named: set[str]
) -> None:
    """Into ``call.stale``: for a target whose original is another namespace's chain, with
    references to it left that the search named none of, the locals of the applying
    thread's running code that hold it.  Made after that namespace's apply (its sweep
    rebound what held the original before), where neither the sweep nor the search reads
    (the search skips this thread's frames, whose locals usually end with the apply; not
    those of the function that called ``bootstrap_here(B)``).  Unsaid, those ran only the
    other namespace's hooks."""
    for key, (other, left) in layered.items():
        if left <= 0 or key in named:
            continue
        rec = call.st.applied[key]
        for module, where in _held_by_locals(rec.original):
            label = f"{where} (namespace {other!r}'s hooks only)"
            call.stale.append(StaleHolder(module, label, LAYERED, key))


def _held_by_locals(raw: Any) -> list[tuple[str, str]]:
    """(module, "func() local name[.attr]") of each local of the applying thread's running
    code (not spawnkit's) that holds ``raw`` (or the function a ``staticmethod`` wraps),
    itself or as an attribute of an object it holds: the count says something holds it, and
    only what is found is named (a count alone may include garbage not yet collected)."""
    found: list[tuple[str, str]] = []
    wanted = (raw, getattr(raw, "__func__", raw))
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        local = frame.f_locals  # a module's own code: its globals, the sweep's
        if (
            type(module) is str
            and module.partition(".")[0] != "spawnkit"
            and local is not frame.f_globals
        ):
            where = f"{frame.f_code.co_name}() local"
            for name, value in list(local.items()):
                if _one_of(value, wanted):
                    found.append((module, f"{where} {name}"))
                    continue
                attrs = getattr(value, "__dict__", None)
                if type(attrs) is dict and not isinstance(value, (ModuleType, type, FunctionType)):
                    found += [
                        (module, f"{where} {name}.{attr}")
                        for attr, item in list(attrs.items())
                        if _one_of(item.func if type(item) is partial else item, wanted)
                    ]
        frame = frame.f_back
    return found


def _one_of(item: Any, wanted: tuple[Any, ...]) -> bool:
    return any(item is w for w in wanted)  # identity: a local's own __eq__ is never asked


def _weak_originals(call: ApplyCall, ignored: set[str]) -> list[tuple[Any, str]]:
    """(original, target key) of each target this call installed whose original something
    refers to weakly (``_build``); their hook modules join ``ignored``."""
    weak: list[tuple[Any, str]] = []
    for key, noted in call.weak.items():
        rec = call.st.applied.get(key)
        if rec is not None and id(rec.held) == noted:  # installed, not rolled back
            weak.append((rec.held, key))
            ignored |= rec.hook_modules
    return weak


def _rebind_items(call: ApplyCall, items: list[tuple[str, str, Any, Any, str]]) -> None:
    """The container items that hold an original below the sweep's one level (``_hidden``):
    set to the hooked object, journaled (undone by ``unapply()`` as the sweep's are)."""
    for module, label, container, at, key in items:
        rec = call.st.applied[key]
        try:
            call.journal.rebind(module, container, at, rec.installed)
        except Exception as exc:  # a container that refuses the item (a C type's own checks)
            kind = f"container item that cannot be set ({type(exc).__name__}: {exc})"
            call.stale.append(StaleHolder(module, label, kind, key))
            continue
        _note_binding(rec, (module, container, at, label))
        logger.debug("rebound stale binding %s.%s to the hooked %r", module, label, rec.display)


def _filled_caches(call: ApplyCall) -> None:
    """Into ``call.stale``: the ``lru_cache`` results computed before this call from the
    original of a target it hooked for the first time (``_caches``, imported only where a
    module of a target's package imported before the call defines a cache: a plugin
    imported it)."""
    if not call.patched_keys or call.modules_before <= len(call.clean_modules):
        return
    related = {key.partition(".")[0] for key in call.patched_keys}
    modules = [  # one C-level type pass per module
        name
        for name, namespace in _imported_before(call, related)
        if not _LRU.isdisjoint(map(type, namespace.values()))
    ]
    if not modules:
        return
    fresh = [
        (key, rec.original, rec.installed, rec.res.attr)
        for key in call.patched_keys
        if (rec := call.st.applied.get(key)) is not None
        and rec.others is not None  # counted: resolved afresh by this call, not re-applied
        and rec.kind != _resolve.CLASS
    ]
    from spawnkit.hooks._caches import filled_caches

    call.stale += filled_caches(modules, fresh)


_LRU = frozenset({LRU_CACHE})


def _through(res: _resolve.Resolved, kind: str) -> Any:
    """For a subclass's inherited method: what its chain calls, the base's attribute as it is
    at call time (hooked or not, then); None for every other target: its original."""
    if res.had_own or kind not in _FROM_BASE or not isinstance(res.owner, type):
        return None
    return inherited(res.owner, res.attr)


#: the kinds of an inherited method whose chain calls the base's attribute as it is then
_FROM_BASE = frozenset({_resolve.METHOD, _resolve.CLASSMETHOD, _resolve.STATICMETHOD})

_CONSTRUCTORS = frozenset({"__init__", "__new__"})  # hooked: a call of the class runs them


def _vouched(clean: frozenset[str], rebinds: dict[int, Rebind]) -> frozenset[str]:
    """``clean``, unless an original was defined in one of them (a target named by its
    re-export, ``eng.api.tokenize``, with ``eng.ops`` imported early): then any early module
    may hold it, and none is vouched for."""
    if clean and any(_defined_in(r.old, clean) for r in rebinds.values()):
        return frozenset()
    return clean


def _defined_in(obj: Any, modules: frozenset[str]) -> bool:
    """Whether ``obj`` (a function by its globals or ``__module__``, a class by its
    ``__module__``) was defined in one of ``modules``."""
    glob = getattr(obj, "__globals__", None)
    if type(glob) is dict and glob.get("__name__") in modules:
        return True
    return getattr(obj, "__module__", None) in modules


def _home(owner: Any) -> Any:
    """The module a class was defined in (a module is its own)."""
    return getattr(owner, "__module__", None) if isinstance(owner, type) else owner.__name__


#: what a holder that refused the rebind is called, by its container's adapter
_REFUSING = {ClassAttrs: "class attribute", DispatchTable: "singledispatch registry entry"}


def _note_binding(rec: Record, entry: tuple[str, Any, Any, str]) -> None:
    """One entry per holder: a later sweep reads a class's attributes or a dispatch registry
    through a new adapter object, so (module, label) is what identifies a holder."""
    same = [i for i, b in enumerate(rec.bindings) if b[0] == entry[0] and b[3] == entry[3]]
    if same:
        rec.bindings[same[0]] = entry
    else:
        rec.bindings.append(entry)


def _install(
    call: ApplyCall,
    key: str,
    later: list[str] | None,
    rebinds: dict[int, Rebind],
    skip: set[tuple[str, str]],
    joining: bool = False,
) -> None:
    """Build and install one target (journaled); what held its original goes to ``rebinds``;
    ``later``: see ``ApplyCall._round``; ``joining``: a failure raises (``_join``)."""
    st = call.st
    prev = st.applied.pop(key, None)
    if later is not None:
        for dep in [d for d in st.applied if d.startswith(key + ".")]:
            # their owner is about to change (a first or a new class REPLACE):
            # re-resolve them on the new class
            call.layered += restore(st, st.applied.pop(dep), call.journal, rebinds)
            if dep not in call.hooks and st.live(dep) and call._load_hooks(dep):
                later.append(dep)
    try:
        found = None
        if prev is None and st.applied:  # another name of an object hooked already?
            found = call.resolver.resolve(st.paths[key], st.display[key])
            same = _spelling_of(call, key, found)
            if same is not None:
                _join(call, key, same, rebinds, skip, found)
                return
            if isinstance(found.raw, type):  # (a class REPLACE's: no call a function target)
                _class_spelled(st, key, found)
        rec = call._build(key, call.hooks[key], prev, found)
        if prev is not None and _raw_at(prev) is not prev.installed_raw:
            call.layered += _stacked(prev, undoing=False)  # ours rebuilt under another's
        call.journal.put(rec.res.owner, rec.res.attr, rec.installed_raw)
        if rec.kind == _resolve.CLASS:
            call.resolver.forget_owners()  # walks through this class now find another
    except Exception as exc:
        if prev is not None:
            st.applied[key] = prev  # left untouched: the previous chain stays
            if joining:
                raise
        elif not _decide.skip_optional(st, key, exc):
            call._fail(key, exc)
        return
    st.applied[key] = rec
    objects = call.objects
    if objects is not None and rec.res.had_own and rec.kind != _resolve.CLASS:  # _index's
        objects[id(rec.held)] = objects[id(rec.installed)] = key
    if key not in call.patched_keys:  # (built again in this call: another name joined it)
        call.patched.append(rec.display)
        call.patched_keys[key] = None
    if not rec.res.had_own and isinstance(rec.res.owner, ModuleType):
        _stood_in(call, rec, prev)  # found through a module's __getattr__: rare
    if isinstance(rec.res.owner, ModuleType) or rec.propagates:  # (a module's: it does)
        _look_for(rec, prev, rebinds, skip)


def _index(objects: dict[int, str], key: str, rec: Record) -> None:
    if rec.res.had_own and rec.kind != _resolve.CLASS:
        objects[id(rec.held)] = objects[id(rec.installed)] = key


def _spelling_of(call: ApplyCall, key: str, res: _resolve.Resolved) -> str | None:
    """The applied key whose object ``res`` is (its original, or the chain installed for it:
    a package's re-export, ``from .impl import run as run_model``, an alias ``tok = run``),
    under its own name; None for most targets.  A method a subclass inherits is no other name
    of the base's: its chain calls the base's (``_chain.inherited``)."""
    raw = res.raw
    if not res.had_own or isinstance(raw, type):
        return None
    objects = call.objects
    if objects is None:
        objects = call.objects = {}
        for k, rec in call.st.applied.items():
            _index(objects, k, rec)
    held = raw.__func__ if type(raw) in (staticmethod, classmethod) else raw
    same = objects.get(id(held))
    found = call.st.applied.get(same) if same is not None and same != key else None
    if found is None or (found.held is not held and found.installed is not held):
        return None
    return same


def _class_spelled(st: State, key: str, res: _resolve.Resolved) -> None:
    """Refuse a class REPLACE on another name of a class this registry replaced already (a
    package's re-export: ``eng.Engine`` and ``eng.impl.Engine``).  Each name got its own
    replacement class, and the sweep left the other's at every ``from`` import, so code
    through one name built one plugin's class and never the other's, while ``status()``
    said applied for both.  Two classes cannot be one chain (``_join`` skips classes)."""
    raw = res.raw
    if not isinstance(raw, type) or not res.had_own:
        return
    for other, rec in st.applied.items():
        if other != key and rec.kind == _resolve.CLASS and raw in (rec.original, rec.installed):
            one, two = st.display[key], rec.display
            message = (
                f"class REPLACE on {one!r} and on {two!r}: one class under two names (a "
                f"package's re-export), so each name would get its own replacement class and "
                f"code through one name would build only that one ({describe_hook(rec.installed)}"
                f" at {two!r}). Fix: register the REPLACEs on one name only (the sweep puts "
                "the replacement at every other name and import of it); to change the class "
                "twice, derive one replacement from the other, or hook its methods instead"
            )
            raise HookConflictError(message, conflicts=[message])


def _join(
    call: ApplyCall,
    key: str,
    same: str,
    rebinds: dict[int, Rebind],
    skip: set[tuple[str, str]],
    res: _resolve.Resolved,
) -> None:
    """Hook ``key``, another name of ``same``'s object, with ``same``'s chain: one chain of
    both names' hooks in registration order (REPLACE innermost), as if registered on one
    target, installed at ``same``'s place and held by ``key``'s.

    Each name built its own chain around the unpatched original: a caller through one name
    ran only that name's hooks, while ``status()`` said applied for both.
    """
    st = call.st
    st.aliases[key] = same
    st.spellings.setdefault(same, []).append(key)
    try:
        conflicts = _conflicts.spelled(st, same)
        if conflicts and st.conflicts[0] == "error":
            raise HookConflictError("; ".join(conflicts), conflicts=conflicts)
        call.hooks[same] = [(r, call._hook_object(r)) for r in st.live(same)]
        _install(call, same, None, rebinds, skip, joining=True)
    except Exception:
        st.aliases.pop(key)
        st.spellings[same].remove(key)
        if not st.spellings[same]:
            del st.spellings[same]
        raise
    call.dropped += conflicts
    rec = st.applied[same]
    if isinstance(res.owner, ModuleType):  # its name holds the original, or the old chain
        namespace, name = vars(res.owner), res.owner.__name__
        if item_of(namespace, res.attr) is not rec.installed:
            call.journal.rebind(name, namespace, res.attr, rec.installed)
            _note_binding(rec, (name, namespace, res.attr, res.attr))
    call.patched.append(st.display[key])
    call.patched_keys[key] = None


def _raw_at(rec: Record) -> Any:
    """What stands at ``rec``'s target now (an owner with no ``__dict__``: taken for ours)."""
    try:
        return vars(rec.res.owner).get(rec.res.attr, ABSENT)
    except TypeError:
        return rec.installed_raw


def _stood_in(call: ApplyCall, rec: Record, prev: Record | None) -> None:
    """A module that put another object in its place in ``sys.modules`` (torch's
    ``torch.backends.cudnn``: a ``CudnnModule`` reading the real module through its
    ``__getattr__``): the target was patched on that object, while the module's own functions
    call the original through the real module's globals (``cudnn.flags()`` calls
    ``is_available()``; ``def make(): return Conv()`` builds a replaced class's original),
    which no ``sys.modules`` entry holds.  Set there too, journaled and
    kept as a binding, so ``unapply()`` puts the original back; the sweep reads those globals
    from now on (``_propagate.STOOD_IN``)."""
    from spawnkit.hooks._propagate import stood_in_globals  # torch's stand-ins: few workers

    namespace = stood_in_globals(rec.res.owner, rec.original)
    if namespace is None:
        return
    attr = rec.res.attr
    held = item_of(namespace, attr)
    if held is not rec.original and (prev is None or held is not prev.installed):
        return  # the module bound another object to that name itself: its own decision
    name = rec.res.owner.__name__
    call.journal.rebind(name, namespace, attr, rec.installed)
    _note_binding(rec, (name, namespace, attr, attr))


def _unbind(call: ApplyCall) -> list[str]:
    """After a strict call's rollback: what the modules it imported bound to the objects it
    had installed (``from eng.utils import is_hip`` run after ``is_hip`` was hooked, see
    ``_install_new``), back to the originals; the steps that failed.  What those modules
    computed from a hooked target as they ran stays: the worker fails with the call's error."""
    from spawnkit.hooks._propagate import find_holders

    rebinds: dict[int, Rebind] = {}
    recs = list(filter(None, map(call.st.applied.get, call.patched_keys)))
    for rec in recs:
        if rec.propagates:
            rebinds[id(rec.installed)] = undoing(rec, rec.held)
    own = own_objects(recs)
    problems = []
    for modname, container, key, label, rebind in find_holders(
        rebinds, frozenset(), call.clean_modules, containers=True, stale=[]
    ):
        if not late_binding(rebind, key, own):
            continue
        try:
            Journal().rebind(modname, container, key, rebind.new)
        except (AttributeError, TypeError, ValueError) as exc:
            problems.append(f"{modname}.{label}: {type(exc).__name__}: {exc}")
    return problems


def _replaced_since(prev: Record, messages: list[str]) -> bool:
    """Whether code assigned its own object over ``prev``'s chain since it was applied.

    Building the new chain on our first original would undo that change unseen: the hooks
    wrap what is there now instead (resolved afresh).
    """
    replaced, now = _decide.displaced_by(prev)
    if replaced:
        messages.append(
            f"hook target {prev.display!r} was replaced after apply_hooks() by "
            f"{describe_hook(now)}; its hooks now wrap that replacement"
        )
    return bool(replaced)


def _look_for(
    rec: Record, prev: Record | None, rebinds: dict[int, Rebind], skip: set[tuple[str, str]]
) -> None:
    """What the round's sweep rebinds to ``rec``'s chain: its original (a method's function,
    held as ``run = Engine.run``), and the chain ``prev`` installed."""
    if isinstance(rec.res.owner, ModuleType):
        skip.add((rec.res.owner.__name__, rec.res.attr))  # the target itself: patched in place
    new = rec.installed
    if rec.others != 0:  # 0: nothing but its home held the original, no copy to look for
        rebinds[id(rec.held)] = Rebind(rec.held, new, rec.hook_modules, rec.key)
    if prev is not None and prev.installed is not new:
        rebinds[id(prev.installed)] = Rebind(prev.installed, new, rec.hook_modules, rec.key)


def _replacement_class(
    display: str, pairs: list[tuple[Registration, Any]], cls: Any, messages: list[str]
) -> Any:
    """What replaces class target ``display``: the last REPLACE hook; nothing else fits."""
    wrong = [r for r, _ in pairs if r.hook_type is not HookType.REPLACE]
    if wrong:
        listed = "; ".join(r.describe() for r in wrong)
        raise HookRegistrationError(
            f"hook target {display!r} is a class, and a class can only be replaced "
            f"(HookType.REPLACE with a subclass); got {listed}. Hook one of its methods "
            f"instead, e.g. '{display}.__init__'."
        )
    reg, replacement = pairs[-1]
    if isinstance(replacement, type) and not issubclass(replacement, cls):
        messages.append(
            f"{reg.describe()} replaces class {display!r} with "
            f"{describe_hook(replacement)}, which is not a subclass of it: isinstance() "
            "and issubclass() checks against the original class will fail"
        )
    return replacement


def _as_attribute(kind: str, installed: Any) -> Any:
    """The raw class attribute that makes ``installed`` behave as a ``kind`` there."""
    if kind == _resolve.CLASSMETHOD:
        return classmethod(installed)
    if kind in (_resolve.STATICMETHOD, _resolve.CALLABLE):
        return staticmethod(installed)
    return installed


def _log_failures(self: ApplyCall) -> None:
    """One ERROR per target a lenient call could not patch (with traceback on import)."""
    for key, (sources, text) in self.failures.items():
        when = f" on {_when(self)}" if self.trigger else ""
        logger.error(
            "hook target %r was not patched%s (hooks from %s): %s; the other targets "
            "were applied (strict=False)",
            self.st.display.get(key, key),
            when,
            ", ".join(sources),
            text,
            # on import the failure interrupts someone else's import: show where
            exc_info=self.errors.get(key) if self.trigger else None,
        )


def _when(self: ApplyCall) -> str:
    if self.again:
        return (
            f"the second run of module {self.trigger!r} (importlib.reload(), or an import "
            "after it left sys.modules)"
        )
    return f"the first import of {self.trigger!r}"


def _strict_dists_failed(call: ApplyCall) -> list[str]:
    """The distributions applied strictly even in a lenient call (the selected platform's
    own) that a failing target's hooks come from."""
    wanted = call.st.strict_dists
    if not wanted:
        return []
    found = {
        str(dist)
        for key in call.failures
        for reg in call.st.regs.get(key, [])
        if (dist := getattr(reg.source, "dist_name", None))
        and str(dist).lower().replace("-", "_").replace(".", "_") in wanted  # as _sel.norm
    }
    return sorted(found)


def _error(self: ApplyCall, problems: list[str], strict: bool = True) -> HookApplyError:
    """The one error of a strict call (or of a lenient one that the selected platform's own
    hooks failed): every failing target, its hooks' sources and why."""
    refused = [] if strict else _strict_dists_failed(self)
    display = self.st.display
    if self.trigger is None:
        lines = [
            f"apply_hooks() failed on {len(self.failures)} target(s); every change this "
            "call made was rolled back, so no target is half-patched:"
        ]
    elif self.again:
        lines = [
            f"applying hooks again on {_when(self)} failed on {len(self.failures)} target(s), "
            "so that reload or import raises; every change those hooks made was rolled back, "
            "so the module's new objects run unhooked:"
        ]
    else:
        lines = [
            f"applying on_import hooks when module {self.trigger!r} was first imported "
            f"failed on {len(self.failures)} target(s), so that import raises; every change "
            "those hooks made was rolled back:"
        ]
    for key, (sources, text) in self.failures.items():
        who = f"hooks from {', '.join(sources)}"
        if self.trigger is not None:
            who = "; ".join(r.describe() for r in self.st.live(key)) or who
        lines.append(f"  - {display.get(key, key)!r} ({who}): {text}")
    if refused:
        lines.append(
            f"The hooks of {', '.join(refused)} failed: it is the selected platform's "
            "distribution, so lenient mode does not apply to them (the worker would run "
            "without the platform's own code). Fix or upgrade it, or select another platform."
        )
    else:
        lines.append(
            "Fix or uninstall the plugins named above, or call apply_hooks(strict=False) to "
            "apply the other targets and log these."
        )
    if problems:
        lines.append("Rollback itself failed for: " + "; ".join(problems))
    shown = {display.get(k, k): v for k, v in self.failures.items()}
    return HookApplyError("\n".join(lines), failures=shown)


# ------------------------------------------- first-time targets, as their modules import
# To patch a target the call imports its module, and with it whatever that module imports.
# Engine modules call targets as they run: ``_is_hip = is_hip()``, ``if is_npu(): from
# .npu_ops import kernel``, ``LIMIT = Scheduler.default_limit()``.  Imported all first and
# patched afterwards, a module that imported another target's module ran that target's
# original: it kept the original's answer (a CUDA kernel chosen on a plugin's device) while
# ``status()`` said applied, and no sweep can find a value computed from a function.  So a
# target applied for the first time is installed as soon as its module is there: those of
# modules imported already go first, then each other module is imported (sorted order) and
# its targets installed before the next import; a module another one is waiting for (a
# module body or a package ``__init__`` still running imported it) gets its targets the
# moment it has run, before the importing statement goes on (the on-import finder's
# notice).  Within a module, whole-class REPLACEs go first, so that methods land on the
# replacement.  What a target's own module computes from it as it runs stays the
# original's: nothing runs between a module's body and its ``def``.  Targets applied before
# (a re-apply) are left to the rounds.


def _install_new(call: ApplyCall, keys: list[str]) -> None:
    """Install the targets among ``keys`` applied for the first time (see above)."""
    st, paths, early, classes = call.st, call.st.paths, call.early, call.classes
    fresh = sorted([k for k in keys if k not in st.applied])  # (no generator frame a key)
    rebinds: dict[int, Rebind] = {}
    skip: set[tuple[str, str]] = set()

    def now(key: str) -> None:
        if key not in early:
            early.add(key)
            # a class: its methods applied before are restored, left to the rounds
            _install(call, key, [] if key in classes else None, rebinds, skip)

    present: dict[str, bool] = {}  # 'pkg.mod' or 'pkg.mod.Cls': whether its module is there
    todo: dict[str, list[str]] = {}  # the same, for the others: their keys
    if classes:  # whole-class REPLACEs first, so that 'Class.method' lands on the replacement
        fresh = [k for k in fresh if k in classes] + [k for k in fresh if k not in classes]
    for key in fresh:
        owner = key[: key.rindex(".")]
        here = present.get(owner)
        if here is None:
            here = present[owner] = _resolve.imported(paths[key])
        if here:
            now(key)
        else:
            todo.setdefault(owner, []).append(key)
    if todo:
        with atexit_kept:  # a target module's `@atexit.register` then stays rebindable
            _import_and_install(call, list(todo.values()), now)
    call._propagate(rebinds, frozenset(skip))


def _import_and_install(
    call: ApplyCall, todo: list[list[str]], now: Callable[[str], None]
) -> None:
    """Import each group's module (a failure is kept for the install to report), then
    install the group; a module imported while another one waits for it at once."""
    st, paths = call.st, call.st.paths
    me, loop = threading.get_ident(), sys._getframe()

    def finished(name: str) -> None:
        if threading.get_ident() != me or not _awaited(loop):
            return  # another thread's import, or one nothing waits for: the loop installs
        for found in todo:  # whole-class REPLACEs came first
            for key in found:
                if _resolve.imported(paths[key], done=name):
                    now(key)

    names = {n for found in todo for n in _resolve.watch_names(paths[found[0]])}
    token = _on_import.watch(names, finished)
    try:
        for found in todo:
            path = paths[found[0]]
            if not _resolve.imported(path):  # else an import before brought it in
                begun = time.monotonic()
                module = call.resolver.load(path)
                st.import_spans.append((module, begun, time.monotonic()))
                call.imported.append(module)
            for key in found:
                now(key)
    finally:
        _on_import.unwatch(token)


#: The import system's frame for loading one module (``importlib._bootstrap``, 3.10 to 3.13)
_LOAD = getattr(getattr(importlib._bootstrap, "_load_unlocked", None), "__code__", None)


def _awaited(loop: FrameType) -> bool:
    """Whether the module that just ran was imported while another module still runs (its
    body, or its package's ``__init__``, is waiting for this import): two module loads on
    the stack above the loop.  The loop's own imports need no early install: nothing has
    seen them yet, and installing while the module is still marked initialising costs more."""
    if _LOAD is None:
        return True  # another import system: install early, always right
    frame: FrameType | None = sys._getframe(2)
    loads = 0
    while frame is not None and frame is not loop:
        if frame.f_code is _LOAD:
            loads += 1
            if loads > 1:
                return True
        frame = frame.f_back
    return False


def rebase_layers(layers: list[Any]) -> list[str]:
    """Build each layer's chain again, bottom up, on what stands at the target now; what held
    its old chain is rebound to the new one.  Returns what could not be rebuilt (left as is)."""
    problems: list[str] = []
    for registry, rec, under in layers:
        with registry._lock:
            st = registry._state
            if st.applied.get(rec.key) is not rec:
                continue  # changed meanwhile: its registry's own call rebuilt it
            if under is not None:  # ours at another name of the object (hooks/_layers)
                _put_under(rec, under)
            call = ApplyCall(st, frozenset(), registry._module_imported)
            rebinds: dict[int, Rebind] = {}
            skip: set[tuple[str, str]] = set()
            if call._load_hooks(rec.key):
                _install(call, rec.key, None, rebinds, skip)
            if call.failures:  # its old chain back: it still runs what stood under it
                put_attr(rec.res.owner, rec.res.attr, rec.installed_raw)
                st.applied[rec.key] = rec
                problems.append(
                    f"{rec.display!r}: namespace {registry.name!r}'s hooks there could not be "
                    f"rebuilt on what stands under them ({call.failures[rec.key][1]}), so its "
                    "old chain was put back, with the hooks it wrapped still inside it"
                )
                continue
            call._propagate(rebinds, frozenset(skip))
            registry._note_stale(call.stale)
            st.touch()
    return problems


def _put_under(rec: Record, under: Record) -> None:
    """Put at ``rec``'s place what its chain is to wrap now, as undoing or rebuilding ``under``
    does at a shared place: ``rec``'s chain no longer leads from there, so ``_build`` resolves
    it afresh, on that, and the sweep rebinds what held the old chain or that object."""
    from spawnkit.hooks import _layers

    put_attr(rec.res.owner, rec.res.attr, _layers.base_of(rec, under))
