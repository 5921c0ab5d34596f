"""Turning a target string into (owner, attribute, raw value) without binding anything.

Why raw values: ``getattr(Class, "m")`` on a classmethod returns a method bound
to *that* class and on a staticmethod a plain function, so a wrapper built from
it and assigned back breaks subclasses (wrong ``cls``) and static calls (an
extra ``self``).  We read the class ``__dict__`` along the MRO instead, which
gives the descriptor itself and also tells us where an inherited method lives
(so it is patched on the named class only).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any, NamedTuple

from spawnkit.errors import HookRegistrationError, HookTargetError

__all__: list[str] = []

_ABSENT: Any = object()


class TargetPath(NamedTuple):
    """A parsed target: ``key`` is the canonical dotted form both spellings share."""

    key: str
    parts: tuple[str, ...]
    module_hint: str | None  # the module of the ``pkg.mod:Qual.name`` form, else None


def parse_target(target: object) -> TargetPath:
    """Validate the spelling of a target; nothing is imported."""
    if not isinstance(target, str):
        raise HookRegistrationError(
            f"hook target must be a string such as 'pkg.mod.func' or 'pkg.mod:Class.method', "
            f"got {type(target).__name__} {target!r}"
        )
    text = target.strip()
    hint: str | None = None
    if ":" in text:
        module, _, qual = text.partition(":")
        if ":" in qual or not module or not qual:
            raise HookTargetError(
                f"hook target {target!r} is malformed: "
                "use 'pkg.mod:Qual.name' with exactly one ':'",
                target=target,
            )
        hint = module
        parts = (*module.split("."), *qual.split("."))
    else:
        parts = tuple(text.split("."))
        if len(parts) < 2:
            raise HookTargetError(
                f"hook target {target!r} names no attribute: use 'pkg.mod.func', "
                "'pkg.mod.Class.method' or 'pkg.mod:Class.method'",
                target=target,
            )
    bad = [p for p in parts if not p.isidentifier()]
    if bad:
        raise HookTargetError(
            f"hook target {target!r} is malformed: {bad[0]!r} is not a Python identifier",
            target=target,
        )
    return TargetPath(".".join(parts), parts, hint)


def guess_module(path: TargetPath) -> str:
    """The module a target lives in, by string parsing only (for the import guard).

    The ``:`` form is exact.  Otherwise the longest prefix that is an imported
    non-package module is exact too; failing that, the first capitalised part is
    taken to start the qualified name (classes are CapWords), else the last part.
    """
    if path.module_hint is not None:
        return path.module_hint
    parts = path.parts
    for i in range(len(parts) - 1, 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None and not hasattr(mod, "__path__"):
            return ".".join(parts[:i])
    for i, part in enumerate(parts[1:], start=1):
        if part[:1].isupper():
            return ".".join(parts[:i])
    return ".".join(parts[:-1])


def _import_longest_prefix(path: TargetPath, display: str) -> tuple[types.ModuleType, int]:
    """Import the longest importable module prefix of ``path``; return it and its length."""
    parts = path.parts
    if path.module_hint is not None:
        n = path.module_hint.count(".") + 1
        try:
            return importlib.import_module(path.module_hint), n
        except ModuleNotFoundError as exc:
            raise HookTargetError(
                f"hook target {display!r}: module {path.module_hint!r} cannot be imported "
                f"({exc}). Install the package that provides it or fix the target.",
                target=display,
                missing=exc.name or path.module_hint,
            ) from exc
        except Exception as exc:
            raise _import_failed(display, path.module_hint, exc) from exc
    first_missing: str | None = None
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        if mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", 0):
            return mod, i
        # Absent, or still being imported by another thread (a plugin's thread applying while
        # the bootstrap imports the target modules): import_module waits for it to finish
        # instead of handing out a half-initialized module whose classes do not exist yet.
        parent = sys.modules.get(".".join(parts[: i - 1])) if i > 1 else None
        if mod is None and parent is not None and not hasattr(parent, "__path__"):
            continue  # a plain module has no submodules: no import attempt needed
        try:
            return importlib.import_module(name), i
        except ModuleNotFoundError as exc:
            missing = exc.name or name
            if missing == name or name.startswith(missing + "."):
                first_missing = missing
                continue
            raise _import_failed(display, name, exc) from exc
        except Exception as exc:
            raise _import_failed(display, name, exc) from exc
    missing = first_missing or parts[0]
    raise HookTargetError(
        f"hook target {display!r}: no module named {missing!r}, so no prefix of the target "
        "can be imported. Install the package that provides it, or fix the spelling.",
        target=display,
        missing=missing,
    )


def _import_failed(display: str, module: str, exc: BaseException) -> HookTargetError:
    return HookTargetError(
        f"hook target {display!r}: importing module {module!r} raised "
        f"{type(exc).__name__}: {exc}. The target cannot be patched until that module imports.",
        target=display,
        missing=module,
    )


class Resolved(NamedTuple):
    """Where a target lives, and the raw value found there.

    ``had_own`` is False for an inherited method (restore = delete from the named
    class) or a module attribute provided by a module ``__getattr__``.
    """

    owner: Any
    attr: str
    raw: Any
    had_own: bool
    module: str
    qualname: str
    defined_on: Any  # the class whose __dict__ holds ``raw`` (== owner unless inherited)


def resolve(path: TargetPath, display: str) -> Resolved:
    """Import what is needed and find the target's owner and raw value."""
    module, n = _import_longest_prefix(path, display)
    owner: Any = module
    walked = module.__name__
    names = path.parts[n:]
    if not names:
        raise HookTargetError(
            f"hook target {display!r} names the module {walked!r} itself; hooks apply to "
            "functions, methods and classes inside a module",
            target=display,
        )
    for name in names[:-1]:
        try:
            owner = getattr(owner, name)
        except AttributeError:
            raise _missing(display, owner, walked, name) from None
        walked = f"{walked}.{name}"
        if not isinstance(owner, (type, types.ModuleType)):
            raise HookTargetError(
                f"hook target {display!r}: {walked!r} is a {type(owner).__name__} instance, "
                "not a class or module; hooks patch attributes of classes and modules only",
                target=display,
            )
    attr = names[-1]
    qualname = ".".join(path.parts[n:])
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                raw = klass.__dict__[attr]
                return Resolved(owner, attr, raw, klass is owner, module.__name__, qualname, klass)
        raise _missing(display, owner, walked, attr)
    d = vars(owner)
    if attr in d:
        return Resolved(owner, attr, d[attr], True, owner.__name__, qualname, owner)
    try:
        raw = getattr(owner, attr)  # a module __getattr__ (PEP 562) may provide it
    except AttributeError:
        raise _missing(display, owner, walked, attr) from None
    return Resolved(owner, attr, raw, False, owner.__name__, qualname, owner)


def _missing(display: str, owner: Any, walked: str, name: str) -> HookTargetError:
    what = "module" if isinstance(owner, types.ModuleType) else "class"
    return HookTargetError(
        f"hook target {display!r}: {what} {walked!r} has no attribute {name!r} "
        f"(resolved {walked!r}, missing {name!r}). Check the spelling, and that the installed "
        "version of that package still defines it.",
        target=display,
        missing=f"{walked}.{name}",
    )


# Kinds of wrappable targets.
CLASS = "class"
FUNCTION = "function"
METHOD = "method"
CLASSMETHOD = "classmethod"
STATICMETHOD = "staticmethod"
CALLABLE = "callable"  # non-descriptor callable in a class: behaves like a staticmethod

_SLOT_TYPES: tuple[type, ...] = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    types.MethodWrapperType,
)


def classify(res: Resolved, display: str) -> tuple[str, Any]:
    """The kind of target and the plain callable to build a chain around.

    Refuses what a function wrapper cannot stand in for without changing
    behaviour: properties and other data descriptors (attribute access, not
    calls), builtin slots (C-level descriptors with their own binding rules),
    and unknown descriptors.
    """
    raw = res.raw
    if isinstance(raw, type):
        return CLASS, raw
    if isinstance(res.owner, types.ModuleType):
        if callable(raw):
            return FUNCTION, raw
        raise HookTargetError(
            f"hook target {display!r} is a {type(raw).__name__}, not a function or class; "
            "only callables can be hooked",
            target=display,
        )
    where = "" if res.had_own else f" (inherited from {res.defined_on.__qualname__})"
    if isinstance(raw, staticmethod):
        return STATICMETHOD, raw.__func__
    if isinstance(raw, classmethod):
        func = raw.__func__
        if not callable(func):
            raise HookTargetError(
                f"hook target {display!r} is a classmethod wrapping a {type(func).__name__}; "
                "only classmethods of functions can be hooked",
                target=display,
            )
        return CLASSMETHOD, func
    if isinstance(raw, types.FunctionType):
        return METHOD, raw
    if isinstance(raw, property):
        raise HookTargetError(
            f"hook target {display!r} is a property{where}: a function wrapper would turn "
            "attribute access into a method. Hook the function the property calls, or REPLACE "
            "the class with a subclass that overrides the property.",
            target=display,
        )
    if isinstance(raw, _SLOT_TYPES) or inspect.isbuiltin(raw):
        raise HookTargetError(
            f"hook target {display!r} is a builtin slot ({type(raw).__name__}){where}: it "
            "binds differently from a Python function and cannot be wrapped faithfully. Define "
            f"{res.attr!r} in Python on the class, or REPLACE the class with a subclass.",
            target=display,
        )
    if callable(raw) and not hasattr(type(raw), "__get__"):
        return CALLABLE, raw
    raise HookTargetError(
        f"hook target {display!r} is a {type(raw).__name__} descriptor{where}; only plain, "
        "class and static methods (sync or async) can be wrapped. REPLACE the class instead.",
        target=display,
    )


def import_hook(spec: str) -> Any:
    """Import a ``"module:qualname"`` hook; errors say which part was missing."""
    module_name, _, qual = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise HookRegistrationError(
            f"hook {spec!r} cannot be imported: importing {module_name!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    walked = module_name
    for name in qual.split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise HookRegistrationError(
                f"hook {spec!r} cannot be imported: {walked!r} has no attribute {name!r}"
            ) from None
        walked = f"{walked}.{name}"
    return obj


def check_hook_spec(hook: str) -> None:
    """Validate the spelling of a string hook at register time (no import)."""
    module, sep, qual = hook.partition(":")
    parts = [*module.split("."), *qual.split(".")]
    if not sep or not module or not qual or not all(p.isidentifier() for p in parts):
        raise HookRegistrationError(
            f"hook {hook!r} is not a valid 'module:qualname' string (e.g. 'my_plugin.hooks:timer')"
        )


def absent() -> Any:
    """Sentinel for 'the attribute did not exist' in the ledger."""
    return _ABSENT
