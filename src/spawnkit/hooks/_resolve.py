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

from spawnkit import _reference
from spawnkit.errors import HookRegistrationError, HookTargetError

__all__: list[str] = []

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


class _Unimportable(NamedTuple):
    """Why no module prefix of a target imports; turned into an error per target."""

    module: str  # the module whose import failed (or the first one missing)
    cause: BaseException | None  # None: no prefix of the target exists at all
    not_found: bool  # the named module itself is missing (not one of its dependencies)


def _find_module(
    path: TargetPath, failed: dict[str, BaseException]
) -> tuple[types.ModuleType, int] | _Unimportable:
    """The longest importable module prefix of ``path`` and its length, or why there is none.

    ``failed`` holds the modules whose import already raised in this apply
    call: they are not executed again for the next target that needs them.
    """
    hint = path.module_hint
    if hint is not None:
        exc = failed.get(hint)
        if exc is None:
            try:
                return importlib.import_module(hint), hint.count(".") + 1
            except Exception as err:
                exc = _note_failure(hint, err, failed)
        if isinstance(exc, ModuleNotFoundError):
            return _Unimportable(exc.name or hint, exc, not_found=True)
        return _Unimportable(hint, exc, not_found=False)
    parts = path.parts
    first_missing: str | None = None
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        if mod is not None and not _initializing(mod):
            return mod, i
        # Absent, or half-built by another thread's import: import_module (waits) decides.
        parent = sys.modules.get(".".join(parts[: i - 1])) if i > 1 else None
        if mod is None and parent is not None and not hasattr(parent, "__path__"):
            continue  # a plain module has no submodules: no import attempt needed
        exc = failed.get(name)
        if exc is None:
            try:
                return importlib.import_module(name), i
            except Exception as err:
                exc = _note_failure(name, err, failed)
        if isinstance(exc, ModuleNotFoundError):
            missing = exc.name or name
            if missing == name or name.startswith(missing + "."):
                first_missing = missing
                continue
        return _Unimportable(name, exc, not_found=False)
    return _Unimportable(first_missing or parts[0], None, not_found=True)


def _initializing(module: types.ModuleType) -> bool:
    """Whether another thread may still be executing ``module`` (half its names missing).

    ``import_module`` waits for that thread to finish; in the importing thread
    itself (a module that applies hooks while it imports) it returns at once.
    """
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _note_failure(name: str, exc: Exception, failed: dict[str, BaseException]) -> Exception:
    """Remember a failed import for ``name`` and for each of its parents that failed with it."""
    failed[name] = exc
    if not isinstance(exc, ModuleNotFoundError):
        # 'pkg.mod.Cls' tried as a module fails because 'pkg.mod' raised: a sibling target
        # 'pkg.mod.f' must get the same error, not a second execution of 'pkg.mod'.
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            parent = ".".join(parts[:i])
            if parent in sys.modules:
                break
            failed.setdefault(parent, exc)
    return exc


def _unimportable_error(path: TargetPath, display: str, why: _Unimportable) -> HookTargetError:
    if why.cause is None:
        return HookTargetError(
            f"hook target {display!r}: no module named {why.module!r}, so no prefix of the "
            "target can be imported. Install the package that provides it, or fix the spelling.",
            target=display,
            missing=why.module,
        )
    if why.not_found and path.module_hint is not None:
        return HookTargetError(
            f"hook target {display!r}: module {path.module_hint!r} cannot be imported "
            f"({why.cause}). Install the package that provides it or fix the target.",
            target=display,
            missing=why.module,
        )
    return _import_failed(display, why.module, why.cause)


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


class _Owner(NamedTuple):
    """A target's module and the object holding its attribute (the module or a class)."""

    module: types.ModuleType
    n: int  # how many parts of the target the module name takes
    owner: Any
    walked: str


class _BadOwner(NamedTuple):
    """The walk to a target's owner stopped: ``name`` is missing, or ``walked`` is no owner."""

    owner: Any
    walked: str
    name: str | None  # None: ``walked`` is an instance, not a class or module


_Found = _Owner | _BadOwner | _Unimportable


class Resolver:
    """Resolves the targets of one ``apply_hooks()`` call, one module at a time.

    Why: targets cluster (a plugin hooks ten methods of one scheduler class),
    so each module is imported once and each owner (module or class) is
    walked once for every target under it, and a module that fails to import
    is executed once and named in the error of every target it holds.  A
    class REPLACE changes what a walk through that class finds, so the caller
    drops the cached owners (:meth:`forget_owners`) after installing one.
    """

    def __init__(self) -> None:
        self._failed: dict[str, BaseException] = {}
        # (module hint, the target's parts but the last) -> what the walk there found
        self._owners: dict[tuple[str | None, tuple[str, ...]], _Found] = {}

    def forget_owners(self) -> None:
        self._owners.clear()

    def _owner(self, path: TargetPath) -> _Found:
        key = (path.module_hint, path.parts[:-1])
        found = self._owners.get(key)
        if found is None:
            found = self._owners[key] = self._walk(path)
        return found

    def _walk(self, path: TargetPath) -> _Found:
        found = _find_module(path, self._failed)
        if isinstance(found, _Unimportable):
            return found
        module, n = found
        owner: Any = module
        walked = module.__name__
        for name in path.parts[n:-1]:
            try:
                owner = getattr(owner, name)
            except AttributeError:
                return _BadOwner(owner, walked, name)
            walked = f"{walked}.{name}"
            if not isinstance(owner, (type, types.ModuleType)):
                return _BadOwner(owner, walked, None)
        return _Owner(module, n, owner, walked)

    def resolve(self, path: TargetPath, display: str) -> Resolved:
        """Import what is needed and find the target's owner and raw value."""
        found = self._owner(path)
        if isinstance(found, _Unimportable):
            raise _unimportable_error(path, display, found) from found.cause
        if isinstance(found, _BadOwner):
            if found.name is not None:
                raise _missing(display, found.owner, found.walked, found.name)
            raise HookTargetError(
                f"hook target {display!r}: {found.walked!r} is a {type(found.owner).__name__} "
                "instance, not a class or module; hooks patch attributes of classes and "
                "modules only",
                target=display,
            )
        module, n, owner, walked = found
        if n >= len(path.parts):
            raise HookTargetError(
                f"hook target {display!r} names the module {walked!r} itself; hooks apply to "
                "functions, methods and classes inside a module",
                target=display,
            )
        attr = path.parts[-1]
        qualname = ".".join(path.parts[n:])
        if isinstance(owner, type):
            for klass in owner.__mro__:
                if attr in klass.__dict__:
                    raw = klass.__dict__[attr]
                    return Resolved(
                        owner, attr, raw, klass is owner, module.__name__, qualname, klass
                    )
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
    try:
        return _reference.resolve(*_reference.parse(spec))
    except _reference.ImportFailed as exc:
        raise HookRegistrationError(f"hook {spec!r} cannot be imported: {exc}") from exc.cause
    except (_reference.BadReference, _reference.MissingAttribute) as exc:
        # MissingAttribute: ``{walked} has no attribute {name!r}``.
        why = exc.why if isinstance(exc, _reference.BadReference) else str(exc)
        raise HookRegistrationError(f"hook {spec!r} cannot be imported: {why}") from None


def check_hook_spec(hook: str) -> None:
    """Validate the spelling of a string hook at register time (no import)."""
    try:
        _reference.parse(hook)
    except _reference.BadReference as exc:
        raise HookRegistrationError(
            f"hook {hook!r} is not a valid 'module:qualname' string (e.g. "
            f"'my_plugin.hooks:timer'): {exc.why}"
        ) from None
