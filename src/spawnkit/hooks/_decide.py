"""What an ``apply_hooks()`` call decides for a registration before patching anything (skip,
wait for an import, provide a module first), recorded in the state ``status()`` reads."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Iterator

from spawnkit._compat import TYPE_CHECKING
from spawnkit._log import LazyLogger
from spawnkit.errors import HookRegistrationError
from spawnkit.hooks import _on_import, _resolve
from spawnkit.hooks._chain import CHAIN_CODES
from spawnkit.hooks._journal import ABSENT, Journal
from spawnkit.hooks._provide import Provided, place
from spawnkit.hooks._stale import StaleHolder
from spawnkit.hooks._state import Record, State
from spawnkit.hooks.types import Registration, describe_callable

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

logger = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted


def asked_for(st: State) -> tuple[bool, bool]:
    """Whether any registration asks for ``on_import``, and whether any has a condition: one
    pass over the registrations, so that an apply with neither (most workers) asks no target
    whether it waits for its import or what its conditions say."""
    on_import = condition = False
    for regs in st.regs.values():
        for reg in regs:
            if reg.on_import:
                on_import = True
            if reg.condition is not None:
                condition = True
    return on_import, condition


def check_conditions(st: State, key: str) -> Exception | None:
    """Call each untested condition of ``key``; a false one drops its hook, one that raises
    is returned (the target then fails as a whole)."""
    for reg in st.live(key):
        cond = reg.condition
        if cond is None or reg.seq in st.cond_ok:
            continue
        name = describe_callable(cond)
        try:
            ok = cond()
        except Exception as exc:
            err = HookRegistrationError(
                f"condition {name} of {reg.describe()} on target {reg.target!r} raised "
                f"{type(exc).__name__}: {exc}. A condition must return true or false; fix it, "
                "or register the hook without condition=."
            )
            err.__cause__ = exc
            return err
        if callable(ok) or hasattr(ok, "__await__"):
            return _unanswered(ok, name, reg)
        st.asked.append(reg)
        if ok:
            st.cond_ok.add(reg.seq)
        else:
            st.dropped[reg.seq] = ("skipped", f"condition {name} is false")
    return None


def recheck_conditions(st: State, *, patched: bool) -> bool:
    """Ask again the conditions this ``apply_hooks()`` asked, now that its hooks are in place;
    whether an answer turned (the caller then patches again what that changes).

    A condition asked before the patching read the originals: ``condition=is_hip`` with
    another plugin's REPLACE of ``is_hip`` answering True skipped a HIP-only hook in every
    worker, while the report said "condition is false" of a gate that answered True.  An
    answer that turns twice reads its own hook: it goes back to the first, with a warning.
    Nothing ``patched`` in the round: nothing a condition reads changed, none is asked.
    """
    asked, st.asked = st.asked, []
    if not patched:
        return False
    turned = False
    for reg in asked:
        was, cond = reg.seq in st.cond_ok, reg.condition
        if cond is None or was is (reg.seq in st.dropped):
            continue  # dropped for another reason (a missing optional target), or re-decided
        name = describe_callable(cond)
        try:
            now = bool(cond())
        except Exception as exc:
            logger.warning(
                "condition %s of %s on target %r raised %s: %s once the hooks were applied; "
                "the hook stays %s", name, reg.describe(), reg.target, type(exc).__name__, exc,
                "applied" if was else "skipped",
            )  # fmt: skip
            continue
        if now is was:
            continue
        turned = True
        st.turned[reg.seq] = count = st.turned.get(reg.seq, 0) + 1
        if count == 1:
            st.asked.append(reg)  # asked once more after the next patching
        else:  # back to its first answer, asked of the originals, and asked no more
            logger.warning(
                "condition %s of %s on target %r reads what its own hook changes: it answers "
                "%s with the hook %s and %s otherwise; the hook is %s, as first decided. Make "
                "the condition read something the hooks do not patch.", name, reg.describe(),
                reg.target, now, "applied" if was else "skipped", was,
                "applied" if now else "skipped",
            )  # fmt: skip
        if now:
            st.cond_ok.add(reg.seq)
            st.dropped.pop(reg.seq, None)
        else:
            st.cond_ok.discard(reg.seq)
            st.dropped[reg.seq] = (
                "skipped", f"condition {name} is false once the hooks are applied"
            )  # fmt: skip
    return turned


def _unanswered(ok: Any, name: str, reg: Any) -> HookRegistrationError:
    """A condition that gave a function (``lambda: is_hip``, the call forgotten) or a coroutine
    (``async def``): always true, so the hook would apply everywhere it was meant to skip."""
    if hasattr(ok, "__await__"):
        if hasattr(ok, "close"):
            ok.close()  # no "never awaited" warning later: this error says it
        what, fix = "a coroutine (the condition is async def)", "make it a plain def"
    else:
        what, fix = f"a callable ({describe_callable(ok)})", "call it inside the condition"
    return HookRegistrationError(
        f"condition {name} of {reg.describe()} on target {reg.target!r} returned {what}, "
        f"which is always true: the hook would be applied even where it should be skipped. "
        f"A condition must return true or false; {fix}."
    )


def defer(st: State, key: str, strict: bool, callback: Callable[[str], None]) -> bool:
    """Whether ``key`` waits for its module's first import (only if every hook asks for it)."""
    if key in st.applied:
        return False
    regs = st.live(key)
    if not regs or not all(r.on_import for r in regs):
        return False
    path = st.paths[key]
    if _resolve.imported(path):
        return False
    top = path.parts[0]
    if top not in sys.modules and _not_installed(top):
        if not all(r.optional for r in regs):
            # A required hook on a package that is not installed: resolved now, to fail as
            # any missing target does (it waited for an import that could never come).
            return False
        near = _resolve.near_module(top)
        reason = f"module {top!r} is not installed" + (f" (did you mean {near!r}?)" if near else "")
        for reg in regs:
            st.dropped[reg.seq] = ("skipped", reason)
        if near:
            _say_near(regs, st.display.get(key, key), reason, near)
        return True
    if _resolve.cannot_come(path):
        return False  # no import can bring it (a misspelt submodule): resolved now, to say so
    if key not in st.waiting:
        st.waiting[key] = (strict, _on_import.watch(_resolve.watch_names(path), callback))
    return True


def _not_installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return True


def provide(st: State, journal: Journal) -> tuple[list[str], dict[str, Exception]]:
    """Place every provided module not placed yet, parents first, each all or nothing."""
    done: list[str] = []
    failed: dict[str, Exception] = {}
    for name in sorted(st.provides):
        if name in st.provided:
            continue
        local = Journal()
        try:
            st.provided[name] = outcome = place(st.provides[name], local)
        except Exception as exc:
            local.rollback()
            failed[name] = exc
            continue
        journal.changes.extend(outcome.changes)
        done.append(name)
    return done, failed


def skip_optional(st: State, key: str, exc: Exception) -> bool:
    regs = st.live(key)
    if not isinstance(exc, _resolve.TargetMissing) or not regs:
        return False
    if not all(r.optional for r in regs):
        return False
    for reg in regs:
        st.dropped[reg.seq] = ("skipped", exc.reason)
    if exc.near:  # optional covers "not there", not a misspelt or renamed target
        _say_near(regs, exc.target, exc.reason, exc.near)
    return True


def _say_near(regs: list[Registration], target: str, reason: str, near: str) -> None:
    but = f"{near!r} is installed" if "not installed" in reason else f"it has {near!r}"
    logger.warning(
        "skipped the optional %s on target %r: %s, but %s. A misspelt target, or one the "
        "installed version renamed: the hook never runs. If the hook is meant for another "
        "version of that package (or another package), nothing is wrong; otherwise fix the "
        "target.",
        " and ".join(r.describe() for r in regs), target, reason.partition(" (")[0], but,
    )


def forget(st: State) -> list[Provided]:
    """Stop every watch and forget every decision (``unapply()``); returns what was provided."""
    for key in list(st.waiting):
        st.stop_waiting(key)
    st.dropped.clear()
    st.cond_ok.clear()
    st.turned.clear()  # a condition decided afresh starts counting its turns again
    st.failed.clear()
    st.on_import_of.clear()
    provided = list(st.provided.values())
    st.provided.clear()
    return provided


def state_of(
    st: State, key: str, reg: Registration, per_target: dict[str, tuple[str, str]]
) -> tuple[str, str]:
    """Where ``reg`` stands; ``per_target`` keeps each applied target's answer for the call
    (a target's hooks share it, and checking for replacements and overrides walks classes)."""
    dropped = st.dropped.get(reg.seq)
    if dropped is not None:
        return dropped
    rec = st.applied.get(key)
    if rec is None and key in st.aliases:  # another name of an object hooked under its own
        key = st.aliases[key]
        rec = st.applied.get(key)
    if rec is not None and reg.seq in rec.seqs:
        found = per_target.get(key)
        if found is None:
            found = per_target[key] = _applied_state(st, key, rec)
        return found
    failed = st.failed.get(key)
    if failed is not None:
        return "failed", failed
    if key in st.waiting:
        module = _resolve.guess_module(st.paths[key])
        return "pending", f"on_import: waiting for the first import of {module!r}"
    return "pending", NOT_APPLIED_YET


#: The reason of a registration no ``apply_hooks()`` call has taken yet.
NOT_APPLIED_YET = "registered after the last apply_hooks() call; applied by the next one"


#: Wrappers walked (through ``__wrapped__``, staticmethod/classmethod) looking for the chain.
_MOST_WRAPPERS = 16


def displaced_by(rec: Record) -> tuple[bool, Any]:
    """(True, what is there now) when ``rec``'s target no longer leads to its chain: code
    that ran after ``apply_hooks()`` assigned its own object over it (or deleted it).

    A wrapper around the chain (a decorator applied on top, another registry's chain) and a
    subclass of a replacement class keep the hooks in effect.
    """
    owner, attr = rec.res.owner, rec.res.attr
    try:
        current = vars(owner).get(attr, ABSENT)
    except TypeError:  # an owner without a __dict__ (refused when resolved): nothing to say
        return False, None
    obj = current
    for _ in range(_MOST_WRAPPERS):
        if obj is rec.installed_raw or obj is rec.installed:
            return False, None
        if type(obj) in (staticmethod, classmethod):
            obj = obj.__func__
            continue
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            break
    installed = rec.installed
    if isinstance(current, type) and isinstance(installed, type) and issubclass(current, installed):
        return False, None
    return True, current


def ran_again(st: State, module: str) -> list[str]:
    """The applied targets of ``module`` that no longer lead to their chains now that it ran
    again (``importlib.reload()``, or imported anew): its new objects, to be patched.

    A target the module's second run left as it was (``if "f" not in globals():``) is kept:
    patching it again would hook it twice.
    """
    resolver = _resolve.Resolver()
    out: list[str] = []
    for key, rec in st.applied.items():
        if rec.res.module != module:
            continue
        try:
            res = resolver.resolve(st.paths[key], rec.display)
        except Exception:
            out.append(key)  # gone from the new module: the apply call names it
            continue
        if res.owner is not rec.res.owner or displaced_by(rec)[0]:
            out.append(key)
    return out


#: How a replaced target's holder kind begins (the bootstrap looks for these after the
#: entry's imports, which may replace a target).
REPLACED = "replaced after apply_hooks()"


def displaced_holders(st: State) -> list[StaleHolder]:
    """Each applied target replaced since, as the holder that no longer leads to its hooks."""
    out: list[StaleHolder] = []
    for key, rec in st.applied.items():
        try:
            if vars(rec.res.owner).get(rec.res.attr) is rec.installed_raw:
                continue  # still our chain, as nearly every target is: no walk for it
        except TypeError:  # no __dict__: displaced_by says what it can
            pass
        out += displaced_holders_of(st, key)
    return out


def displaced_holders_of(st: State, key: str) -> list[StaleHolder]:
    """``key``'s own attribute as a holder, when it was replaced since it was applied."""
    rec = st.applied.get(key)
    if rec is None:
        return []
    displaced, current = displaced_by(rec)
    if not displaced:
        return []
    owner, attr = rec.res.owner, rec.res.attr
    if isinstance(owner, types.ModuleType):
        module, label = owner.__name__, attr
    elif isinstance(owner, type):
        module, label = owner.__module__, f"{owner.__qualname__}.{attr}"
    else:  # an attribute of a module-level instance
        module, label = type(owner).__module__, f"{type(owner).__qualname__} instance.{attr}"
    now = "deleted" if current is ABSENT else f"now {_shown(current)}"
    return [StaleHolder(module, label, f"{REPLACED}, {now}", key)]


def _shown(obj: Any) -> str:
    """``module:qualname`` and where it was defined, when it is a function."""
    code = getattr(obj, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{describe_callable(obj)}{where}"


def bypassing(rec: Record) -> list[str]:
    """The subclasses' own overrides of a hooked method that never refer to it: instances of
    those classes skip the hook (gevent names its unpatched subclasses the same way); for a
    replaced class, the subclasses and instances made from the original (``_replaced_class``).

    An override counts as calling up when the method's name is among the names its code (or
    code nested in it) uses: ``super().run()``, ``Engine.run(self)``.
    """
    if rec.kind == _resolve.CLASS:  # a replaced class: what was built from the original
        from spawnkit.hooks import _replaced_class  # class REPLACEs only: few workers

        return _replaced_class.left_behind(rec)
    if rec.kind == _resolve.FUNCTION:  # a torch operator's kernel or scripted code: the original
        return _torch_kernels(rec)
    if not isinstance(rec.res.owner, type):
        return []
    skipping, copies = _overrides(rec)
    return sorted(skipping + copies) + _structural(rec)


_CONFORMING = "any class conforming to "


def _structural(rec: Record) -> list[str]:
    """A method of a ``typing.Protocol`` class itself: the classes that conform to it without
    subclassing it (structural typing) run their own method and are on no subclass list."""
    owner = rec.res.owner
    if vars(owner).get("_is_protocol") is not True or rec.res.attr not in vars(owner):
        return []
    return [f"{_CONFORMING}{owner.__module__}.{owner.__qualname__} without subclassing it"]


def _overrides(rec: Record) -> tuple[list[str], list[str]]:
    """(the overrides that never refer to the method, the wrappers of its original placed in
    a subclass's own ``__dict__`` before the hooks) of a hooked method, ``Class.method``."""
    owner, attr = rec.res.owner, rec.res.attr
    skipping: list[str] = []
    copies: list[str] = []
    for sub in _subclasses(owner):
        raw = vars(sub).get(attr, ABSENT)
        func = raw.__func__ if type(raw) in (staticmethod, classmethod) else raw
        code = getattr(func, "__code__", None)
        if not isinstance(code, types.CodeType) or attr in _names(code):
            continue  # inherited, not a function, or calls up
        calls = _wrapping(func, rec, attr)
        if calls is _ORIGINAL and not _held_runs(sub, attr, raw):
            # a base whose every subclass has its own override: no class runs its wrapper
            # (matplotlib's ``Artist.__init_subclass__`` wraps ``draw`` on ``FigureBase`` and
            # ``ColorizingArtist``, whose subclasses all define theirs); an instance of the
            # base itself would, but naming it is a conflict that stops the worker under
            # ``<PREFIX>_HOOK_CONFLICTS=error`` for code the framework never runs
            continue
        if calls is not _HOOKS:
            name = f"{sub.__module__}.{sub.__qualname__}.{attr}"
            (copies if calls is _ORIGINAL else skipping).append(name)
    return skipping, copies


def _held_runs(holder: type, attr: str, held: Any) -> bool:
    """Whether instances run ``held``, the wrapper of the original ``holder`` has in its own
    ``__dict__``: ``holder``'s own when it has no subclass (a concrete class), else those of a
    subclass that inherits it, calls up to it or wraps it (``_reaches``)."""
    if not type.__subclasses__(holder):
        return True
    for sub in _subclasses(holder):
        own = vars(sub).get(attr, ABSENT)
        if own is ABSENT:
            if _resolved(sub, attr) is held:
                return True
        elif _reaches(sub, own, attr, held):
            return True
    return False


def _subclasses(cls: type) -> Iterator[type]:
    """Every subclass of ``cls`` at any depth, each once (a diamond's lower class too)."""
    seen: set[int] = set()
    stack: list[type] = type.__subclasses__(cls)
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        stack.extend(type.__subclasses__(sub))
        yield sub


def _resolved(cls: type, attr: str, start: int = 0) -> Any:
    """``cls``'s ``attr``, from ``cls.__mro__[start:]`` (1: what ``super()`` finds)."""
    for klass in cls.__mro__[start:]:
        if attr in vars(klass):
            return vars(klass)[attr]
    return ABSENT


def _reaches(sub: type, own: Any, attr: str, held: Any) -> bool:
    """Whether ``sub``'s own ``attr``, or a function it wraps (by ``__wrapped__``), is
    ``held``, or calls up to it: ``super().run()`` where ``held`` is next in ``sub``'s MRO,
    or ``Base.run(self)`` of a class whose ``run`` is ``held``; the names in its code say, as
    ``_overrides`` reads them.  What is not a function cannot be read: it may run it."""
    held_func = held.__func__ if type(held) in (staticmethod, classmethod) else held
    func = own.__func__ if type(own) in (staticmethod, classmethod) else own
    up = _resolved(sub, attr, 1) is held
    holders = {k.__name__ for k in sub.__mro__[1:] if _resolved(k, attr) is held}
    for _ in range(_MOST_WRAPPERS):
        if func is held_func:
            return True
        code = getattr(func, "__code__", None)
        if not isinstance(code, types.CodeType):
            return True
        names = _names(code)
        if attr in names and (("super" in names and up) or not holders.isdisjoint(names)):
            return True
        func = func.__dict__.get("__wrapped__") if type(func) is types.FunctionType else None
        if func is None:
            return False
    return False


_HOOKS, _ORIGINAL = "hooks", "original"  # what a wrapper found by ``_wrapping`` calls


def _wrapping(func: Any, rec: Record, attr: str) -> str | None:
    """What an override that wraps (by ``__wrapped__``) calls: ``_HOOKS`` for a chain of
    hooks a plugin put on the subclass's name for the inherited method (spawnkit's own, whose
    ``__wrapped__`` is the original: it calls the base's attribute as it is at call time,
    ``_chain.inherited``, so the base's hooks run inside it; its code names no method), a
    wrapper of the installed chain, or a decorated override that calls up
    (``@traced def run(self): return super().run()``); ``_ORIGINAL`` for any other wrapper of
    the original itself (``setattr(cls, "run", traced(Engine.run))`` in an
    ``__init_subclass__``, a metaclass or a class decorator, before the hooks were applied),
    which calls the original; None: no wrapper."""
    original, held = rec.original, rec.held
    for _ in range(_MOST_WRAPPERS):
        inner = func.__dict__.get("__wrapped__") if type(func) is types.FunctionType else None
        if inner is None:
            return None
        if inner is rec.installed:
            return _HOOKS
        if inner is original or inner is held:
            return _HOOKS if func.__code__ in CHAIN_CODES else _ORIGINAL
        code = getattr(inner, "__code__", None)
        if isinstance(code, types.CodeType) and attr in _names(code):
            return _HOOKS
        func = inner
    return None


def _torch_kernels(rec: Record) -> list[str]:
    if "torch.library" not in sys.modules:  # no operator (nor TorchScript) without it
        return []
    from spawnkit.hooks import _torch_ops, _torchscript  # torch loaded: few workers

    return [*_torch_ops.kernels(rec), *_torchscript.callers(rec)]


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def bypass_reason(rec: Record, overrides: list[str]) -> str:
    if rec.kind == _resolve.CLASS:
        from spawnkit.hooks import _replaced_class

        return _replaced_class.reason(describe_callable(rec.installed), overrides)
    if rec.kind == _resolve.FUNCTION:
        from spawnkit.hooks import _torch_ops, _torchscript

        kernels, scripted = _torchscript.split(overrides)
        said = [_torch_ops.reason(kernels)] if kernels else []
        return "; ".join(said + ([_torchscript.reason(scripted)] if scripted else []))
    copies = set(_overrides(rec)[1])
    conforming = [o for o in overrides if o.startswith(_CONFORMING)]
    skipping = [o for o in overrides if o not in copies and o not in conforming]
    wrappers = [o for o in overrides if o in copies]
    attr = rec.res.attr
    parts = [
        f"{o[len(_CONFORMING) :].partition(' ')[0]} is a typing.Protocol: {o} runs its own "
        f"{attr}, never this hook"
        for o in conforming
    ]
    if skipping:
        n = len(skipping)
        parts.append(
            f"{n} subclass override{'s' if n > 1 else ''} never refer{'' if n > 1 else 's'} to "
            f"it (no super().{attr}()), so instances of "
            f"{'those classes' if n > 1 else 'that class'} skip the hook: {', '.join(skipping)}"
        )
    if wrappers:
        n, many = len(wrappers), len(wrappers) > 1
        parts.append(
            f"{n} subclass{'es' if many else ''} hold{'' if many else 's'} a wrapper of the "
            f"original {attr} in {'their' if many else 'its'} own __dict__, made before the "
            "hooks were applied (by an __init_subclass__, a metaclass or a class decorator: "
            f"setattr(cls, {attr!r}, wrap(Base.{attr}))), which calls the original, so instances "
            f"of {'those classes' if many else 'that class'} skip the hook: {', '.join(wrappers)}"
        )
    return "; ".join(parts)


def bypass_fix(rec: Record, overrides: list[str]) -> str:
    if rec.kind == _resolve.CLASS:
        from spawnkit.hooks import _replaced_class

        return _replaced_class.fix(rec)
    if rec.kind == _resolve.FUNCTION:
        from spawnkit.hooks import _torch_ops, _torchscript

        kernels, scripted = _torchscript.split(overrides)
        said = [_torch_ops.fix(kernels)] if kernels else []
        return "\n".join(said + ([_torchscript.fix(scripted)] if scripted else []))
    copies = set(_overrides(rec)[1])
    fixes = []
    if any(o.startswith(_CONFORMING) for o in overrides):
        fixes.append(
            f"Fix: hook the {rec.res.attr} of the classes that implement the Protocol (a hook "
            "on the Protocol's own method runs only for classes that subclass it and do not "
            "override it)."
        )
    if any(o not in copies and not o.startswith(_CONFORMING) for o in overrides):
        first = next(o for o in overrides if o not in copies and not o.startswith(_CONFORMING))
        fixes.append(
            f"Fix: hook the override the engine runs (e.g. {first!r}) as well, or check that "
            "those classes are not it."
        )
    if copies:
        first = next(o for o in overrides if o in copies)
        fixes.append(
            f"Fix: hook the subclass's own name (e.g. {first!r}) as well, or define the "
            "subclass after the hooks are applied (in a module imported after "
            "apply_hooks()), so that its wrapper wraps the hooked method."
        )
    return " ".join(fixes)


def _applied_state(st: State, key: str, rec: Record) -> tuple[str, str]:
    stale = [*st.stale.values(), *displaced_holders_of(st, key)]
    where = [f"{h.module}.{h.label} ({h.kind})" for h in stale if h.target == key]
    if where:
        return "partial", unrebound_reason(where)
    trigger = st.on_import_of.get(key)
    reason = f"applied when {trigger!r} was first imported" if trigger else ""
    if key in st.spellings:
        names = ", ".join(repr(st.display.get(k, k)) for k in [key, *st.spellings[key]])
        said = f"one object hooked as {names}: one chain of their hooks, in registration order"
        reason = "; ".join(filter(None, (reason, said)))
    skipping = bypassing(rec)
    if skipping:
        reason = "; ".join(filter(None, (reason, bypass_reason(rec, skipping))))
    from spawnkit.hooks import _twins  # applied targets only (a worker without them: none)

    twins = _twins.twins(rec.res.module)
    if twins:
        reason = "; ".join(filter(None, (reason, _twins.reason(rec.res.module, twins))))
    return "applied", reason


def unrebound_reason(where: list[str]) -> str:
    return (
        f"not in effect through {len(where)} reference(s) the stale-binding sweep could "
        f"not rebind, which still call the original: {'; '.join(where)}"
    )


def provisions(st: State) -> list[tuple[str, str]]:
    """``(module, state)`` of each ``provide_module()`` registration."""
    return [(name, provision_state(st, name)[0]) for name in st.provides]


def provision_state(st: State, name: str) -> tuple[str, str]:
    done = st.provided.get(name)
    if done is not None:
        return done.state, done.reason
    failed = st.failed.get(name)
    if failed is not None:
        return "failed", failed
    return "pending", "placed by the next apply_hooks() call"
