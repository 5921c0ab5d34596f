"""The platform interface's class-definition contract: what ``__init_subclass__`` checks.

Apart from :mod:`spawnkit.platforms.interface` because only a platform class spawnkit does not
ship is checked as it is defined (a plugin's or an engine's; spawnkit's own are checked by
tests/test_platform_interface.py): a worker on a built-in platform never imports it (#23).
"""

from __future__ import annotations

import types

from spawnkit._compat import TYPE_CHECKING
from spawnkit._names import qualified_name

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

_CONTRACT_FLAG = "_spawnkit_contract"
_DATA_TYPES = (str, int, float, bool, type(None))


def _describe(obj: Any) -> str:
    kind = _kind(obj)
    return f"{type(obj).__name__} value" if kind == "data" else kind


def _kind(obj: Any) -> str:
    """Coarse kind: the override must be of the same kind as the interface attribute."""
    if isinstance(obj, staticmethod):
        return "staticmethod"
    if isinstance(obj, classmethod):
        return "classmethod"
    if isinstance(obj, property):
        return "property"
    if isinstance(obj, types.FunctionType):
        return "method"
    return "data"


def _function_of(obj: Any) -> Any:
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__
    return obj


# inspect.Parameter's kinds, by value; a parameter is (name, kind, has a default)
_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD, _VAR_POSITIONAL, _KEYWORD_ONLY, _VAR_KEYWORD = range(5)
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_Param = tuple[str, int, bool]


def _signature(fn: Any) -> list[_Param]:
    """``inspect.signature(fn)``'s parameters, read from a plain function's code object.

    Every worker defines the built-in platforms, so this check runs in every cold start; it
    reads the code object instead of importing ``inspect`` (6 ms with ``ast``, ``dis`` and
    ``tokenize``).  What a code object cannot tell (a ``__signature__``, a ``__wrapped__``
    function, a builtin or partial) goes to ``inspect`` itself.
    """
    if (
        type(fn) is not types.FunctionType
        or "__signature__" in vars(fn)
        or "__wrapped__" in vars(fn)
    ):
        import inspect

        return [
            (p.name, int(p.kind), p.default is not p.empty)
            for p in inspect.signature(fn).parameters.values()
        ]
    code, flags = fn.__code__, fn.__code__.co_flags
    names, count, kwonly = code.co_varnames, code.co_argcount, code.co_kwonlyargcount
    defaulted = count - len(fn.__defaults__ or ())
    params: list[_Param] = [
        (name, _POSITIONAL_ONLY if i < code.co_posonlyargcount else _POSITIONAL_OR_KEYWORD,
         i >= defaulted)
        for i, name in enumerate(names[:count])
    ]  # fmt: skip
    rest = count + kwonly  # co_varnames: positional, keyword-only, then *args and **kwargs
    if flags & _CO_VARARGS:
        params.append((names[rest], _VAR_POSITIONAL, False))
        rest += 1
    kwdefaults = fn.__kwdefaults__ or {}
    params += [(name, _KEYWORD_ONLY, name in kwdefaults) for name in names[count : count + kwonly]]
    if flags & _CO_VARKEYWORDS:
        params.append((names[rest], _VAR_KEYWORD, False))
    return params


def _params(fn: Any, drop_first: bool) -> list[_Param]:
    params = _signature(fn)
    if drop_first and params and params[0][1] in (_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return params


def _signature_problem(base: Any, override: Any, kind: str) -> str | None:
    """Why ``override`` cannot stand in for ``base`` (None when every base call still works)."""
    drop = kind != "staticmethod"
    try:
        bp = _params(_function_of(base), drop)
        op = _params(_function_of(override), drop)
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        return None
    positional = (_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD)
    o_positional = [p for p in op if p[1] in positional]
    o_by_name = {p[0]: p for p in op if p[1] in (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY)}
    o_varargs = any(p[1] == _VAR_POSITIONAL for p in op)
    o_varkw = any(p[1] == _VAR_KEYWORD for p in op)
    matched: set[str] = set()
    position = 0
    for name, p_kind, has_default in bp:
        if p_kind == _VAR_POSITIONAL:
            if not o_varargs:
                return f"the interface accepts *{name}, the override does not"
            continue
        if p_kind == _VAR_KEYWORD:
            if not o_varkw:
                return f"the interface accepts **{name}, the override does not"
            continue
        if p_kind in positional:
            if position < len(o_positional):
                q_name, q_kind, q_default = o_positional[position]
                if p_kind == _POSITIONAL_OR_KEYWORD and q_name != name and not o_varkw:
                    return (
                        f"parameter {position + 1} is named {q_name!r}, the interface names it "
                        f"{name!r} (callers may pass it by keyword)"
                    )
                if p_kind == _POSITIONAL_OR_KEYWORD and q_kind == _POSITIONAL_ONLY:
                    return f"parameter {name!r} became positional-only"
                if has_default and not q_default:
                    return f"parameter {name!r} lost its default (callers may omit it)"
                matched.add(q_name)
            elif not o_varargs:
                return f"parameter {name!r} is missing"
            position += 1
            continue
        # keyword-only in the interface
        q2 = o_by_name.get(name)
        if q2 is None:
            if not o_varkw:
                return f"keyword parameter {name!r} is missing"
            continue
        if has_default and not q2[2]:
            return f"parameter {name!r} lost its default (callers may omit it)"
        matched.add(q2[0])
    for q_name, q_kind, q_default in op:
        if q_name in matched or q_kind in (_VAR_POSITIONAL, _VAR_KEYWORD):
            continue
        if not q_default:
            return f"extra parameter {q_name!r} has no default (interface callers never pass it)"
    return None


# code flags that change what a call returns, and what it then returns
_FLAVOURS = ((0x80, "async def"), (0x200, "async generator"), (0x20, "generator"))
_RETURNS = {
    "async def": "a coroutine, never run",
    "async generator": "an async generator, never run",
    "generator": "a generator, never run",
    "plain": "its result, not the awaitable or iterator callers expect",
}


_AS = {
    "async def": "an async def",
    "async generator": "an async generator function",
    "generator": "a generator function",
    "plain": "a plain def",
}


def _flavour(fn: Any) -> str:
    flags = getattr(getattr(_function_of(fn), "__code__", None), "co_flags", 0)
    return next((text for bit, text in _FLAVOURS if flags & bit), "plain")


def _flavour_problem(base: Any, override: Any) -> str | None:
    """An ``async def`` or generator override of a plain method returns a coroutine or a
    generator object, which callers never run and which is always true
    (``if platform.support_cuda_graph():``); the reverse breaks ``await``/iteration."""
    want, got = _flavour(base), _flavour(override)
    if want == got:
        return None
    return (
        f"with {_AS[got]}, where the interface's is {_AS[want]}: a call returns {_RETURNS[got]}. "
        f"Define it as the interface does ({_AS[want]})."
    )


def _contract(cls: type, *, skip_self: bool = False) -> dict[str, tuple[type, Any]]:
    """Public interface names visible to ``cls``: name -> (defining interface class, attribute)."""
    names: dict[str, tuple[type, Any]] = {}
    mro = cls.__mro__[1:] if skip_self else cls.__mro__
    for klass in reversed(mro):
        if not klass.__dict__.get(_CONTRACT_FLAG, False):
            continue
        for name, value in klass.__dict__.items():
            if not name.startswith("_"):
                names[name] = (klass, value)
    return names


def _own_names(
    cls: type, where: str, *, defines_contract: bool, mixin: type
) -> list[tuple[str, Any, str, str]]:
    """(name, value, label, source) of the public names ``cls`` brings: its own, and those of a
    plain base it adds (``class NpuPlatform(NpuCommon, Platform)``, ``NpuCommon`` no platform
    class), whose names were never checked: a misspelt method there was accepted and the
    interface's default ran.  An engine's ``contract=True`` base defines names of its own."""
    names = [(k, v, f"{where}.{k}", "") for k, v in vars(cls).items() if not k.startswith("_")]
    if defines_contract:
        return names
    inherited = {k for b in cls.__bases__ if issubclass(b, mixin) for k in b.__mro__}
    for plain in cls.__mro__[1:]:
        if plain is object or plain in inherited or issubclass(plain, mixin):
            continue
        for name, value in vars(plain).items():
            home = next(k for k in cls.__mro__ if name in vars(k))
            if not name.startswith("_") and home is plain:
                names.append((name, value, f"{where}.{name}", f" (in {qualified_name(plain)})"))
    return names


def _unknown_problem(label: str, name: str, contract: dict[str, tuple[type, Any]]) -> str:
    bases = sorted({k.__qualname__ for k, _ in contract.values()})
    import difflib  # only on this error path

    hint = difflib.get_close_matches(name, list(contract), n=1)
    suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
    return (
        f"{label}: {name!r} is not part of the platform interface "
        f"({', '.join(bases) or 'none'}).{suggestion} A public name on a platform class "
        "(or a plain class it derives from) must override an interface method or attribute; "
        "rename helpers with a leading underscore. (Only an engine extends the interface: its "
        "own base, declared `contract=True` and passed as its namespace's platform_base=.)"
    )


def _member_problems(cls: type, where: str, *, defines_contract: bool, mixin: type) -> list[str]:
    """``mixin``: ``DeviceMixin`` (passed in: this module imports nothing of the interface's)."""
    contract = _contract(cls, skip_self=True)
    problems: list[str] = []
    own = _own_names(cls, where, defines_contract=defines_contract, mixin=mixin)
    for name, value, label, source in own:
        entry = contract.get(name)
        if entry is None:
            if not defines_contract:
                problems.append(_unknown_problem(label + source, name, contract))
            continue
        base_cls, base_value = entry
        base_kind, over_kind = _kind(base_value), _kind(value)
        if base_kind == "data":
            if over_kind == "property" or isinstance(value, type(base_value)):
                continue
            if base_value is None and isinstance(value, _DATA_TYPES):
                continue
            problems.append(
                f"{label}{source}: overrides {base_cls.__qualname__}.{name} (a "
                f"{_describe(base_value)}) with a {_describe(value)}; it must be a "
                f"{type(base_value).__name__}."
            )
            continue
        if base_kind != over_kind:
            problems.append(
                f"{label}{source}: overrides {base_cls.__qualname__}.{name} (a {base_kind}) with a "
                f"{_describe(value)}; define it as a {base_kind} with the interface's signature."
            )
            continue
        if base_kind == "property":
            continue
        flavour = _flavour_problem(base_value, value)
        if flavour is not None:
            problems.append(f"{label}{source}: overrides {base_cls.__qualname__}.{name} {flavour}")
            continue
        problem = _signature_problem(base_value, value, base_kind)
        if problem is not None:
            import inspect  # only on this error path

            sig_base = inspect.signature(_function_of(base_value))
            sig_over = inspect.signature(_function_of(value))
            problems.append(
                f"{label}{sig_over}{source}: incompatible override of "
                f"{base_cls.__qualname__}.{name}{sig_base}: {problem}. Keep the interface's "
                "parameters (names, order, defaults); extra parameters need defaults."
            )
    return problems


def _shadowing_problems(
    cls: type, contract: dict[str, tuple[type, Any]], where: str, platform: type
) -> list[str]:
    """A mixin's override hidden behind another class earlier in the MRO is a silent bug.

    Hidden behind an interface class (an engine base) or behind any class that is not its own
    subclass: a built-in (``class VChip(CudaPlatform, VChipMixin)``: CUDA's ``nccl`` won over
    the chip's backend) or the vendor's common base.  A device mixin (no platform itself) is
    there only to supply its methods, so each one it loses this way is reported; a platform
    class hidden by a class listed before it is an override meant so, unless an interface
    class hides it.  A definition that calls ``super()`` hands on, so it hides nothing.
    """
    problems: list[str] = []
    for name in contract:
        owners = [k for k in cls.__mro__ if name in k.__dict__]
        for i, later in enumerate(owners[1:], 1):
            if later.__dict__.get(_CONTRACT_FLAG, False):
                continue
            winner = next((k for k in owners[:i] if not _hands_on(k.__dict__[name])), None)
            if winner is None or issubclass(winner, later):
                continue
            if issubclass(later, platform) and not winner.__dict__.get(_CONTRACT_FLAG, False):
                continue
            hidden = later.__dict__[name]
            if _kind(hidden) == "data" and winner.__dict__[name] == hidden:
                continue  # the same value either way (``device_type = "cuda"`` in both)
            problems.append(_shadowed_text(cls, where, name, winner, later))
    return problems


def _hands_on(value: Any) -> bool:
    """Whether an override calls ``super()`` (so the next definition in the MRO still runs)."""
    fn = _function_of(value)
    return isinstance(fn, types.FunctionType) and "super" in fn.__code__.co_names


def _shadowed_text(cls: type, where: str, name: str, winner: type, later: type) -> str:
    def via(klass: type) -> type:
        return next((b for b in cls.__bases__ if klass in b.__mro__), klass)

    first, second = via(winner), via(later)
    through = f" (through {first.__qualname__})" if first is not winner else ""
    fixes = []
    if first is not second:
        fixes.append(
            f"list {second.__qualname__} before {first.__qualname__} in the bases of "
            f"{cls.__qualname__}"
        )
    if not winner.__module__.startswith("spawnkit."):  # a built-in's own method stays
        fixes.append(f"stop redefining {name!r} in {winner.__qualname__}")
    fixes.append(
        f"define {name} in {cls.__qualname__} itself (calling {later.__qualname__}.{name} "
        "where that is the one meant)"
    )
    order = ", or ".join(fixes)
    order = order[0].upper() + order[1:]
    return (
        f"{where}: {later.__qualname__}.{name} is shadowed by {winner.__qualname__}.{name}"
        f"{through}, which comes first in the MRO, so the override would never run. {order}."
    )
