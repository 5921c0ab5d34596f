"""Building a target's hook chain as flat closures, once, at apply time.

The hooked call is hot, so each layer closes over exactly its hook and inner callable: no
lookups or dispatch per call. Attribution is free until something raises (zero-cost
exceptions); then the innermost layer notes hook, plugin and target once per target.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from collections.abc import Callable, Sequence

from spawnkit._compat import TYPE_CHECKING, add_note
from spawnkit.errors import HookConflictError, HookRegistrationError
from spawnkit.hooks.types import HookType, Registration

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

_NOTED_ATTR = "_spawnkit_hook_targets"


#: Which hook of which target a layer runs, and what the note it adds to what that hook
#: raises says it did: ``(registration, display, key, verb)``.  One a layer, all made at apply
#: time (a chain of five hooks on each of 200 targets is 1000 of them): a tuple, built without
#: a call (a slotted class's ``__init__`` was 0.4 us of a worker's ~10 us a target); its
#: text is made only when something fails (``_where_text``).
_Where = tuple[Registration, str, str, str]


def _where_text(where: _Where) -> str:
    return f"{where[0].describe()} on target {where[1]!r}"


def _annotate(exc: BaseException, where: _Where) -> None:
    """Note on ``exc`` which hook of which target it passed through, once per target."""
    try:
        noted = getattr(exc, _NOTED_ATTR, None)
        if noted is None:
            noted = set()
            setattr(exc, _NOTED_ATTR, noted)
        elif where[2] in noted:
            return
        noted.add(where[2])
    except Exception:
        return
    add_note(exc, f"spawnkit.hooks: {where[3]} {_where_text(where)}")


def _bad_before(result: object, label: object) -> TypeError:
    shown = repr(result)
    if len(shown) > 200:
        shown = shown[:197] + "..."
    return TypeError(
        f"{label} returned {type(result).__name__} {shown}; a BEFORE hook must return None "
        "(keep the arguments) or a pair (args, kwargs) with args a tuple or list and kwargs a dict"
    )


def _before_args(result: Any, where: _Where) -> tuple[Sequence[Any], dict[str, Any]]:
    if isinstance(result, (tuple, list)) and len(result) == 2:
        args, kwargs = result
        if isinstance(args, (tuple, list)) and isinstance(kwargs, dict):
            return args, kwargs
    raise _bad_before(result, _where_text(where))


# ------------------------------------------------------------------- sync layers
def _sync_before(hook: Any, inner: Any, where: _Where) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            new = hook(*args, **kwargs)
        except Exception as exc:
            _annotate(exc, where)
            raise
        if new is None:
            return inner(*args, **kwargs)
        if type(new) is tuple and len(new) == 2 and type(new[0]) is tuple and type(new[1]) is dict:
            return inner(*new[0], **new[1])
        a, k = _before_args(new, where)
        return inner(*a, **k)

    return wrapper


def _sync_after(hook: Any, inner: Any, where: _Where) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        try:
            new = hook(result, *args, **kwargs)
        except Exception as exc:
            _annotate(exc, where)
            raise
        return result if new is None else new

    return wrapper


def _sync_around(hook: Any, inner: Any, where: _Where) -> Callable[..., Any]:
    # partial prepends ``inner`` in C; ``hook(inner, *args, **kwargs)`` would copy the packed
    # arguments on every call (about a quarter of the cost).
    return _sync_call(functools.partial(hook, inner), where)


def _sync_call(call: Any, where: _Where) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            _annotate(exc, where)
            raise

    return wrapper


# ------------------------------------------------------------------ async layers
# Every layer of an async target is a coroutine function, so the target stays one; an
# awaitable a (sync or async) hook returns is awaited.  ``inspect`` is imported only when an
# async chain is built: a worker whose targets are all sync never loads it (6 ms).
def _async_before(hook: Any, inner: Any, where: _Where) -> Callable[..., Any]:
    from inspect import isawaitable

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            new = hook(*args, **kwargs)
            if isawaitable(new):
                new = await new
        except Exception as exc:
            _annotate(exc, where)
            raise
        if new is None:
            return await inner(*args, **kwargs)
        a, k = _before_args(new, where)
        return await inner(*a, **k)

    return wrapper


def _async_after(hook: Any, inner: Any, where: _Where) -> Callable[..., Any]:
    from inspect import isawaitable

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = await inner(*args, **kwargs)
        try:
            new = hook(result, *args, **kwargs)
            if isawaitable(new):
                new = await new
        except Exception as exc:
            _annotate(exc, where)
            raise
        return result if new is None else new

    return wrapper


def _async_around(hook: Any, inner: Any, where: _Where) -> Callable[..., Any]:
    return _async_call(functools.partial(hook, inner), where)


def _async_call(call: Any, where: _Where) -> Callable[..., Any]:
    from inspect import isawaitable

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = call(*args, **kwargs)
            if isawaitable(result):
                result = await result
            return result
        except Exception as exc:
            _annotate(exc, where)
            raise

    return wrapper


# ------------------------------------------------------------ generator shells
# A generator target's chain is a plain function that returns the generator, so the target
# stopped being a generator function to ``inspect``: FastAPI took a hooked ``yield``
# dependency for a plain one (its value became the generator object, its cleanup never ran),
# and torch's ``no_grad()`` applied afterwards guarded the call, not the body.  The outermost
# layer becomes a generator function that delegates to what the chain returns; the hooks then
# run at the first ``next()``, where the target's own body runs.
def _generator_shell(call: Any) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return (yield from call(*args, **kwargs))

    return wrapper


def _async_generator_shell(call: Any) -> Callable[..., Any]:
    # No ``yield from`` in an async generator: asend/athrow/aclose are passed on by hand.
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        inner = call(*args, **kwargs)
        if not hasattr(inner, "asend"):  # an async iterable a hook returned: no send/throw
            async for item in inner:
                yield item
            return
        try:
            item = await inner.__anext__()
        except StopAsyncIteration:
            return
        while True:
            try:
                sent = yield item
            except GeneratorExit:
                await inner.aclose()
                raise
            except BaseException as exc:
                try:
                    item = await inner.athrow(exc)
                except StopAsyncIteration:
                    return
            else:
                try:
                    item = await inner.asend(sent)
                except StopAsyncIteration:
                    return

    return wrapper


#: ``inspect.CO_GENERATOR``, and ``CO_ASYNC_GENERATOR`` (below)
_CO_GENERATOR = 0x20


#: ``inspect.CO_ITERABLE_COROUTINE``: a ``@types.coroutine`` generator, awaited by its callers;
#: a shell would hand them a plain generator, which ``await`` refuses
_CO_ITERABLE_COROUTINE = 0x100


def _generator_flag(func: Any) -> int:
    """The generator flag of a function's (or a method's function's) code, else 0."""
    plain = func.__func__ if isinstance(func, types.MethodType) else func
    if type(plain) is not types.FunctionType:
        return 0
    flags: int = plain.__code__.co_flags
    if flags & _CO_ITERABLE_COROUTINE:
        return 0
    return flags & _GENERATOR_FLAGS


def _layer_codes() -> frozenset[types.CodeType]:
    """The code of every layer a chain can have outermost (each factory's inner function)."""
    factories = (
        _sync_before, _sync_after, _sync_call, _async_before, _async_after, _async_call,
        _generator_shell, _async_generator_shell,
    )  # fmt: skip
    consts = (c for f in factories for c in f.__code__.co_consts)
    return frozenset(c for c in consts if isinstance(c, types.CodeType))


#: A function with one of these codes is one of spawnkit's chains, or a copy of one
#: (``transformers``' ``copy_func``): calling it runs the hooks, and its closure holds the
#: original by design.  A foreign wrapper whose ``__wrapped__`` is the original calls that.
CHAIN_CODES = _layer_codes()

_SYNC = {HookType.BEFORE: _sync_before, HookType.AFTER: _sync_after, HookType.AROUND: _sync_around}
_ASYNC = {
    HookType.BEFORE: _async_before,
    HookType.AFTER: _async_after,
    HookType.AROUND: _async_around,
}

_REPLACE, _AROUND = HookType.REPLACE, HookType.AROUND
_COPIED = ("__module__", "__name__", "__qualname__", "__doc__")


def adopt(wrapper: Any, original: Any, *, full: bool) -> None:
    """Give ``wrapper`` the original's identity, as ``functools.update_wrapper`` would.

    ``__wrapped__`` is always the original target, not the next layer, so ``inspect.signature``
    reports the target's own whatever the chain.
    """
    if type(original) is types.FunctionType:  # has all four: no lookup by name (one per target)
        wrapper.__module__, wrapper.__name__ = original.__module__, original.__name__
        wrapper.__qualname__, wrapper.__doc__ = original.__qualname__, original.__doc__
    else:
        for name in _COPIED:
            try:
                value = getattr(original, name)
            except AttributeError:
                continue
            setattr(wrapper, name, value)
    if full:
        extra = getattr(original, "__dict__", None)
        if extra:
            wrapper.__dict__.update(extra)
        annotations = getattr(original, "__annotations__", None)
        if isinstance(annotations, dict):
            wrapper.__annotations__ = annotations
    wrapper.__wrapped__ = original


def build_chain(
    original: Any,
    hooks: Sequence[tuple[Registration, Any]],
    *,
    key: str,
    display: str,
    is_async: bool,
    notes: list[str] | None = None,
    through: Any = None,
) -> Callable[..., Any]:
    """The callable to install: REPLACE innermost (last one wins), then the rest in order.

    ``hooks``: (registration, hook object) pairs in registration order; the last is outermost.
    ``notes`` gets a message for each AROUND hook that never returns a value on a target
    that does (a ``HookConflictWarning``); None: raise ``HookConflictError`` instead.
    ``through``: what the innermost layer calls in place of ``original`` (``inherited``), which
    still gives the chain its identity.
    """
    replace: tuple[Registration, Any] | None = None
    others: list[tuple[Registration, Any]] = []
    for pair in hooks:
        if not is_async:  # a plain function: _makes_coroutine's first case, inline
            hook = pair[1]
            plain = type(hook) is types.FunctionType and not hook.__dict__
            if hook.__code__.co_flags & _CO_COROUTINE if plain else _makes_coroutine(hook):
                raise _coroutine_on_sync(pair[0], original, display)
        if pair[0].hook_type is _REPLACE:
            replace = pair  # the last one wins
        else:
            others.append(pair)
    # a function or method original serves nothing but its call: nothing to keep or refuse
    kept = None if type(original) in _PLAIN else _object_kept(original, replace, others, display)
    if kept is not None:  # an object of the target's kind (a kernel for a kernel): as it is
        return kept
    inner: Any = original if through is None else through
    if replace is not None:
        where = (replace[0], display, key, "raised by")
        inner = _replacing(replace[1], bool(others), is_async, where)
    factories = _ASYNC if is_async else _SYNC
    flag = _generator_flag(original)
    for reg, obj in others:
        htype = reg.hook_type
        if htype is _AROUND:
            if replace is None and _drops_result(obj, original):
                _dropped(reg, display, notes)
            if is_async or flag:  # its call makes a coroutine or a generator
                _plain_around(reg, obj, flag, display, notes)
        verb = "raised inside" if htype is _AROUND else "raised by"
        inner = factories[htype](obj, inner, (reg, display, key, verb))
    if inner is not original:  # a layer of ours: a hook object is innermost only under others
        inner = _outermost(inner, original, flag, display, replace)
        if through is None and type(original) is _FUNCTION and "dispatch" in original.__dict__:
            _dispatching(inner, original, hooks, key, display, is_async)  # singledispatch's
    return inner  # type: ignore[no-any-return]


def _replacing(obj: Any, others: bool, is_async: bool, where: _Where) -> Any:
    """The innermost layer of a chain with a REPLACE ``obj``: the replacement itself under
    other hooks (which note what it raises), else a layer that notes it."""
    if is_async:
        if others and is_async_callable(obj):
            return obj
        return _async_call(obj, where)
    return obj if others else _sync_call(obj, where)


def _dispatching(
    chain: Any,
    original: Any,
    hooks: Sequence[tuple[Registration, Any]],
    key: str,
    display: str,
    is_async: bool,
) -> None:
    """A singledispatch function's chain: its ``dispatch`` and ``registry`` hand out its
    implementations inside the same hooks (``_dispatch_base``), else a caller that looks one
    up calls it unhooked."""
    from spawnkit.hooks import _dispatch_base

    if not _dispatch_base.is_dispatching(original):
        return

    def rebuild(impl: Any) -> Any:  # said once already, for the chain itself: notes dropped
        return build_chain(
            original, hooks, key=key, display=display, is_async=is_async, notes=[], through=impl
        )

    _dispatch_base.attach(chain, original, rebuild)


def inherited(owner: type, attr: str) -> Callable[..., Any]:
    """What a chain installed on a subclass for a method it inherits calls: the attribute the
    next class of ``owner``'s MRO has at call time, as ``super()`` would find it.

    Built on the function resolved at apply time, such a chain ran that function for good: a
    base's hooks applied after it (sorted later in one call, or registered later), or rebuilt
    since, never ran for the subclass while ``status()`` said applied.  Only inherited targets
    pay for the lookup; a class's own method calls its original directly.
    """
    mro = owner.__mro__[1:]

    def call_inherited(*args: Any, **kwargs: Any) -> Any:
        for klass in mro:
            found = klass.__dict__
            if attr in found:
                raw = found[attr]
                if type(raw) in (staticmethod, classmethod):
                    raw = raw.__func__
                return raw(*args, **kwargs)
        raise AttributeError(f"no class above {owner.__qualname__} defines {attr!r} any more")

    return call_inherited


def _outermost(
    inner: Any,
    original: Any,
    flag: int,
    display: str,
    replace: tuple[Registration, Any] | None,
) -> Any:
    """The outermost layer, made to stand in for the original: only it is ever seen
    (installed, and found by ``inspect`` through its ``__wrapped__``); the inner ones are
    reachable only through its closure."""
    if flag and _generator_flag(inner) != flag:
        shell = _generator_shell if flag == _CO_GENERATOR else _async_generator_shell
        inner = shell(inner)
    adopt(inner, original, full=True)
    jit = sys.modules.get(_JIT)
    if jit is not None:  # TorchScript would compile the original's source for it
        from spawnkit.hooks import _torchscript  # torch loaded: few workers

        _torchscript.mark(inner, original, display, jit)
    else:
        _mark_later(inner, original, display)
    if type(original) not in _PLAIN:  # an lru_cache's cache_clear() must still work
        _keep_methods(inner, original, replace[1] if replace is not None else None)
    return inner


#: the module whose import makes TorchScript available (``FunctionModifiers``)
_JIT = "torch._jit_internal"
#: chains built while TorchScript was not loaded: chain -> (original, target), marked at its
#: import (a model module the entry imports after apply_hooks() brings torch in)
_unmarked: weakref.WeakKeyDictionary[Any, tuple[Any, str]] = weakref.WeakKeyDictionary()
_jit_watch: int | None = None  # the on-import watch for ``_JIT``, while one is pending


def _mark_later(chain: Any, original: Any, display: str) -> None:
    """Mark ``chain`` for TorchScript once torch is imported: unmarked, scripted code calling
    it would compile the original's source, silently.  Per chain a weak entry; per process
    one name in the on-import finder's table, and no import of ``_torchscript`` or torch."""
    global _jit_watch
    _unmarked[chain] = (original, display)
    if _jit_watch is None:
        from spawnkit.hooks import _on_import  # loaded already: the hooks' finder

        _jit_watch = _on_import.watch((_JIT,), _jit_imported, hook=False)


def _jit_imported(_name: str) -> None:
    """Before the importing statement goes on (``import torch``), so no code is scripted yet
    against an unmarked chain; the watch ends here, chains built from now on are marked as
    they are built."""
    global _jit_watch
    from spawnkit.hooks import _on_import

    token, _jit_watch = _jit_watch, None
    if token is not None:
        _on_import.unwatch(token)  # the finder leaves sys.meta_path if nothing else is watched
    jit = sys.modules.get(_JIT)
    pending = list(_unmarked.items())
    _unmarked.clear()
    if jit is None or not pending:
        return
    from spawnkit.hooks import _torchscript

    for chain, (original, display) in pending:  # unapplied ones too: marked, never called
        _torchscript.mark(chain, original, display, jit)


_FUNCTION = types.FunctionType
#: what a target or a hook usually is: nothing of its interface but the call to keep
_PLAIN = frozenset({types.FunctionType, types.MethodType, types.BuiltinFunctionType})
#: special methods callers use through syntax (``kernel[grid]``, ``len(obj)``, ``with obj:``),
#: which a function standing in for the object cannot offer
_SYNTAX = {
    "__getitem__": "obj[key]",
    "__iter__": "for x in obj",
    "__len__": "len(obj)",
    "__contains__": "x in obj",
    "__enter__": "with obj:",
    "__aenter__": "async with obj:",
    "__await__": "await obj",
}


def _syntax_of(obj: Any) -> list[str]:
    """The syntax ``obj`` (a callable object: a triton ``JITFunction``, a module instance)
    serves besides its call; empty for a function or a class."""
    if type(obj) in _PLAIN or isinstance(obj, type):
        return []
    return [use for name, use in _SYNTAX.items() if getattr(type(obj), name, None) is not None]


def _object_kept(
    original: Any,
    replace: tuple[Registration, Any] | None,
    others: list[tuple[Registration, Any]],
    display: str,
) -> Callable[..., Any] | None:
    """For a target callers also use through syntax (``kernel[grid](...)``): the replacement
    to install as it is, when it is an object serving the same syntax; otherwise refused, as a
    function in its place would break each such use.  None: nothing special to do."""
    syntax = _syntax_of(original)
    if not syntax:
        return None
    if replace is not None and not others and set(syntax) <= set(_syntax_of(replace[1])):
        kept: Callable[..., Any] = replace[1]
        return kept
    first = others[0] if others else replace
    assert first is not None  # a target has at least one hook
    raise _object_target(first[0], original, display, syntax)


def _object_target(
    reg: Registration, original: Any, display: str, syntax: list[str]
) -> HookRegistrationError:
    kind = type(original).__qualname__
    return HookRegistrationError(
        f"{reg.describe()} on target {display!r}: the target is a {kind} object that callers "
        f"also use as {', '.join(syntax)}; a hook would put a plain function in its place, "
        "which that syntax cannot use (each such use would raise TypeError, only once the "
        "engine reaches it). Hook the function it runs instead, or REPLACE it with an object "
        f"of its kind (another {kind})."
    )


def _keep_methods(wrapper: Any, original: Any, replacement: Any) -> None:
    """Give the function standing in for a callable object that object's public methods and
    C-level attributes (an ``lru_cache``'s ``cache_clear``/``cache_info``, a partial's
    ``func``/``args``), bound to the replacement where it has them, else to the original:
    ``is_hip.cache_clear()`` in the engine must not become an AttributeError."""
    kinds = (
        types.FunctionType,
        types.MethodDescriptorType,
        types.MemberDescriptorType,
        types.GetSetDescriptorType,
    )
    for klass in type(original).__mro__[:-1]:  # not object's
        for name, raw in vars(klass).items():
            if name.startswith("_") or name in wrapper.__dict__ or not isinstance(raw, kinds):
                continue
            source = replacement if hasattr(replacement, name) else original
            try:
                setattr(wrapper, name, getattr(source, name))
            except AttributeError:  # an unset slot: nothing to offer
                continue


#: ``inspect.CO_COROUTINE``: the flag ``async def`` sets on a function's code
_CO_COROUTINE = 0x80
#: ``inspect.CO_ASYNC_GENERATOR``: ``async def`` with ``yield``
_CO_ASYNC_GENERATOR = 0x200
#: either generator flag: what a chain's outermost layer must keep (``_outermost``)
_GENERATOR_FLAGS = _CO_GENERATOR | _CO_ASYNC_GENERATOR

_SPOILS = {
    HookType.BEFORE: "where its arguments belong (every call raises TypeError)",
    HookType.AFTER: "in place of the target's result, and the hook never runs",
    HookType.AROUND: "in place of the target's result: neither the hook nor the target runs",
    HookType.REPLACE: "in place of the target's result: the replacement never runs",
}


#: The opcodes the bytecode readers below use, by CPython version: ``opcode.opmap``'s numbers
#: (fixed within a version; tests/test_hooks_generators.py checks them against it).  Importing
#: ``opcode`` cost a cold worker with an AROUND hook ~0.4 ms; another version reads it.
_OPCODES: dict[tuple[int, int], dict[str, int]] = {
    (3, 10): {"RETURN_VALUE": 83, "LOAD_CONST": 100, "EXTENDED_ARG": 144,
              "SETUP_FINALLY": 122, "SETUP_WITH": 143, "SETUP_ASYNC_WITH": 154},
    (3, 11): {"RETURN_VALUE": 83, "LOAD_CONST": 100, "EXTENDED_ARG": 144, "CACHE": 0,
              "PUSH_EXC_INFO": 35},
    (3, 12): {"RETURN_VALUE": 83, "RETURN_CONST": 121, "LOAD_CONST": 100, "EXTENDED_ARG": 144,
              "CACHE": 0, "PUSH_EXC_INFO": 35, "SETUP_FINALLY": 256, "SETUP_WITH": 258},
    (3, 13): {"RETURN_VALUE": 36, "RETURN_CONST": 103, "LOAD_CONST": 83, "EXTENDED_ARG": 71,
              "CACHE": 0, "PUSH_EXC_INFO": 33, "SETUP_FINALLY": 265, "SETUP_WITH": 266},
}  # fmt: skip
#: Every name ``_OPCODES`` answers for: a version's missing name is one it lacks.
OPCODE_NAMES = ("RETURN_VALUE", "RETURN_CONST", "LOAD_CONST", "EXTENDED_ARG", "CACHE",
                "PUSH_EXC_INFO", "SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH")  # fmt: skip


def _opmap() -> dict[str, int]:
    """``opcode.opmap`` for the names of ``OPCODE_NAMES``, without importing it where known."""
    known = _OPCODES.get(sys.version_info[:2])
    if known is None:
        import opcode

        return opcode.opmap
    return known


#: code object -> whether it returns something other than None somewhere (``_returns_value``)
_RETURNS: dict[types.CodeType, bool] = {}


def _drops_result(hook: Any, original: Any) -> bool:
    """An AROUND hook (a plain function) whose every ``return`` gives None, on a target whose
    code returns a value: the hook forgot ``return original_fn(...)``."""
    if type(hook) is not types.FunctionType or type(original) is not types.FunctionType:
        return False
    return not _returns_value(hook.__code__) and _returns_value(original.__code__)


def _returns_value(code: types.CodeType) -> bool:
    found = _RETURNS.get(code)
    if found is None:
        found = _RETURNS[code] = _scan_returns(code)
    return found


def _scan_returns(code: types.CodeType) -> bool:
    """Read from the bytecode: a ``return`` of anything but the constant None (True when in
    doubt: a generator, no return at all, an opcode this Python lacks).  The numbers from
    ``_opmap()``, not ``dis``: a worker whose hooks are all plain never imports either."""
    if code.co_flags & 0x220:  # a generator's or an async generator's return is no result
        return True
    ops = _opmap()
    value, const, load = ops["RETURN_VALUE"], ops.get("RETURN_CONST"), ops["LOAD_CONST"]
    extended, cache = ops["EXTENDED_ARG"], ops.get("CACHE")
    consts, raw = code.co_consts, code.co_code
    before, returns, high = (-1, 0), 0, 0
    for i in range(0, len(raw), 2):
        op, arg = raw[i], raw[i + 1] | high
        high = arg << 8 if op == extended else 0
        if op in (extended, cache):
            continue
        if op in (const, value):
            returns += 1
            loaded = consts[arg] if op == const else consts[before[1]] if before[0] == load else 0
            if loaded is not None:
                return True
        before = (op, arg)
    return returns == 0


#: what a plain ``def`` AROUND hook should be instead, by what the target's call makes
_AROUND_FIX = {
    "coroutine": "make it `async def` and `return await original_fn(*args, **kwargs)`",
    "generator": "make it a generator: `return (yield from original_fn(*args, **kwargs))`",
    "async generator": "make it an async generator: "
    "`async for item in original_fn(*args, **kwargs): yield item`",
}


def _plain_around(
    reg: Registration, hook: Any, flag: int, display: str, notes: list[str] | None
) -> None:
    """A plain ``def`` AROUND a target whose call makes a coroutine (``flag`` 0) or a
    generator (its generator ``flag``): its ``original_fn(...)`` returns at once, before any
    of the target's body runs.  Said unless the hook is of the target's kind, or not a
    function whose code says (a partial, a callable object)."""
    plain = hook.__func__ if type(hook) is types.MethodType else hook
    if type(plain) is not types.FunctionType:
        return
    code = plain.__code__
    if code.co_flags & (_CO_COROUTINE | _CO_GENERATOR | _CO_ASYNC_GENERATOR):
        return
    if not flag:  # nothing a plain def can do with a coroutine but hand it on
        _outside(reg, display, "coroutine", notes)
    elif _guards(code):
        # a plain def may map a generator's items lazily (``(f(x) for x in original_fn(n))``);
        # only a try or with block in it means to see the iteration, and cannot
        _outside(reg, display, "generator" if flag == _CO_GENERATOR else "async generator", notes)


def _guards(code: types.CodeType) -> bool:
    """Whether ``code`` has a ``try`` or ``with`` block: a handler in its exception table
    (3.11 on) that begins as an ``except`` does, with ``PUSH_EXC_INFO``; or a block set-up
    opcode (3.10).  From 3.12 a comprehension is inlined (PEP 709) with a handler of its own
    that puts the loop variable back (``SWAP``): no ``try`` of the hook's, which made a plain
    def filtering its kwargs (``{k: v for k, v in kw.items() if ...}``) a false finding."""
    ops = _opmap()
    raw = code.co_code
    table = getattr(code, "co_exceptiontable", None)
    if table is not None:
        push = ops.get("PUSH_EXC_INFO")
        return any(raw[2 * target] == push for target in _handlers(table))
    names = ("SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH")
    setups = {ops[n] for n in names if n in ops}
    return any(raw[i] in setups for i in range(0, len(raw), 2))


def _handlers(table: bytes) -> list[int]:
    """The handler offsets (in code units) of an exception table: entries of four varints
    (start, length, target, depth and lasti), six bits a byte, 0x40 set on every byte but
    an entry's last, 0x80 on each entry's first (CPython's exception_handling_notes)."""
    targets: list[int] = []
    values: list[int] = []
    value = 0
    for byte in table:
        value = (value << 6) | (byte & 0x3F)
        if not byte & 0x40:  # the varint ends here
            values.append(value)
            value = 0
            if len(values) == 4:
                targets.append(values[2])
                values = []
    return targets


def _outside(reg: Registration, display: str, made: str, notes: list[str] | None) -> None:
    article = "an" if made[0] == "a" else "a"
    message = (
        f"target {display!r}: {reg.describe()} is a plain def around a target whose call "
        f"makes {article} {made}: its original_fn(...) returns that {made} before any of the "
        "target's body runs, so what the hook times, catches or cleans up after is not the "
        f"target's work. {_AROUND_FIX[made][0].upper()}{_AROUND_FIX[made][1:]} (a BEFORE hook "
        "changes arguments)"
    )
    if notes is None:
        raise HookConflictError(message, conflicts=[message])
    notes.append(message)


def _dropped(reg: Registration, display: str, notes: list[str] | None) -> None:
    message = (
        f"target {display!r}: {reg.describe()} never returns a value (no `return` of anything "
        "but None), while the target returns one: each caller gets None instead of its result. "
        "Return what original_fn returns (`return original_fn(*args, **kwargs)`)"
    )
    if notes is None:
        raise HookConflictError(message, conflicts=[message])
    notes.append(message)


def _makes_coroutine(hook: Any) -> bool:
    """Whether calling ``hook`` gives a coroutine: an ``async def``, through partials, bound
    methods and an instance's ``__call__``.  Answered from code flags, without ``inspect``
    (a worker whose targets are all sync never imports it)."""
    if type(hook) is types.FunctionType and not hook.__dict__:  # the common case, first
        return bool(hook.__code__.co_flags & _CO_COROUTINE)
    func = called_function(hook)
    return func is not None and is_async_callable(func)


def called_function(obj: object) -> types.FunctionType | None:
    """The Python function a call of ``obj`` runs: through partials and bound methods, or a
    callable instance's ``__call__``; None for a class or a callable not written in Python.
    Read without ``inspect`` (heavy for a worker); the entry check uses it too (``_entry``)."""
    for _ in range(16):  # a partial of a partial of a bound method ...
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, types.MethodType):
            obj = obj.__func__
        else:
            break
    if type(obj) is types.FunctionType:
        return obj
    if isinstance(obj, type):
        return None
    call = next((vars(k)["__call__"] for k in type(obj).__mro__ if "__call__" in vars(k)), None)
    return call if type(call) is types.FunctionType else None


def _coroutine_on_sync(reg: Registration, original: Any, display: str) -> HookRegistrationError:
    """An ``async def`` hook on a target that is not one: every call would hand its caller an
    unawaited coroutine, and ``status()`` would still say "applied"."""
    code = getattr(original, "__code__", None)
    where, what = "", "not"
    if code is not None:
        where = f" ({code.co_filename}:{code.co_firstlineno})"
        if code.co_flags & _CO_ASYNC_GENERATOR:
            what = "an async generator function"
    return HookRegistrationError(
        f"{reg.describe()} is a coroutine function (async def), but target {display!r}{where} "
        f"is {what}: each call would return the hook's coroutine, never awaited, "
        f"{_SPOILS[reg.hook_type]}. Make the hook a plain def. If the target returns an "
        "awaitable for its callers to await, a plain def may return the hook's coroutine."
    )


def is_async_callable(func: Any) -> bool:
    """``inspect.iscoroutinefunction``, of a function or of a method's function.

    A plain function answers from its code's flags while ``inspect`` is not imported, or while
    its ``__dict__`` is empty: only ``inspect.markcoroutinefunction`` could make it one
    otherwise, and it marks the function with an attribute.  Everything else (a marked
    function, a partial, a compiled callable) asks inspect.
    """
    plain = func.__func__ if isinstance(func, types.MethodType) else func
    if type(plain) is types.FunctionType and ("inspect" not in sys.modules or not plain.__dict__):
        return bool(plain.__code__.co_flags & _CO_COROUTINE)
    import inspect

    return inspect.iscoroutinefunction(func) or (
        isinstance(func, types.MethodType) and inspect.iscoroutinefunction(func.__func__)
    )
