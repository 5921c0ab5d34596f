"""Turning a target string into (owner, attribute, raw value) without binding anything.

Raw values because ``getattr(Class, "m")`` binds a classmethod to *that* class and unwraps a
staticmethod, so a wrapper assigned back would break subclasses and static calls; the MRO's
``__dict__`` gives the descriptor itself and where an inherited method lives.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time
import types

from spawnkit import _reference
from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit._names import one_edit as _one_edit
from spawnkit.errors import HookRegistrationError, HookTargetError, ImportWaitError
from spawnkit.hooks import _dispatch_base
from spawnkit.hooks.types import HookType

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


class TargetMissing(HookTargetError):
    """The target's module (or a parent package) is not installed, or it lacks the attribute.

    Its own type because ``optional=True`` skips exactly this case (an import that raises is
    never "missing"); ``reason`` is the phrase a skipped hook's status carries.
    """

    def __init__(
        self, message: str, *, target: str = "", missing: str = "", reason: str = "", near: str = ""
    ):
        super().__init__(message, target=target, missing=missing)
        self.reason = reason
        self.near = near  # a name the owner has that is close to the missing one: a typo?


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
    if not all(map(str.isidentifier, parts)):  # register() parses every hook's target
        bad = next(p for p in parts if not p.isidentifier())
        raise HookTargetError(
            f"hook target {target!r} is malformed: {bad!r} is not a Python identifier",
            target=target,
        )
    return TargetPath(text if hint is None else ".".join(parts), parts, hint)


def guess_module(path: TargetPath) -> str:
    """The module a target lives in, by string parsing only (for the import guard).

    Exact for the ``:`` form or an imported non-package prefix; else the first CapWords part
    starts the qualified name, else the last part does.
    """
    if path.module_hint is not None:
        return path.module_hint
    parts = path.parts
    prefix = path.key  # the parts joined by '.': each shorter prefix is a slice of it
    # No prefix is imported while the first part is not (the usual case as plugins load).
    for i in range(len(parts) - 1 if parts[0] in sys.modules else 0, 0, -1):
        prefix = prefix[: prefix.rindex(".")]
        mod = sys.modules.get(prefix)
        if mod is None:
            continue
        # A package is the module when the next part is one of its non-module attributes
        # (``pkg.platforms.current_platform.is_cuda``, with ``current_platform`` an instance).
        if not hasattr(mod, "__path__") or not isinstance(
            vars(mod).get(parts[i], sys), types.ModuleType
        ):
            return prefix
    for i, part in enumerate(parts[1:], start=1):
        if part[:1].isupper():
            return ".".join(parts[:i])
    return ".".join(parts[:-1])


class _Unimportable(NamedTuple):
    module: str  # the module whose import failed (or the first one missing)
    cause: BaseException | None  # None: no prefix of the target exists at all
    not_found: bool  # the named module itself is missing (not one of its dependencies)


def _find_module(
    path: TargetPath, failed: dict[str, BaseException]
) -> tuple[types.ModuleType, int] | _Unimportable:
    """The longest importable module prefix of ``path`` and its length, or why there is none.

    ``failed`` (imports that raised in this apply call) keeps a module from executing twice.
    """
    hint = path.module_hint
    if hint is not None:
        exc = failed.get(hint)
        if exc is None:
            try:
                _await_other_import(hint)
                return importlib.import_module(hint), hint.count(".") + 1
            except Exception as err:
                exc = note_failure(hint, err, failed)
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
                _await_other_import(name)
                return importlib.import_module(name), i
            except Exception as err:
                exc = note_failure(name, err, failed)
        if isinstance(exc, ModuleNotFoundError):
            missing = exc.name or name
            if missing == name or name.startswith(missing + "."):
                first_missing = missing
                continue
        return _Unimportable(name, exc, not_found=False)
    return _Unimportable(first_missing or parts[0], None, not_found=True)


#: Bound on waiting for another thread's import of a target module: an import that registers
#: hooks while this thread applies them would otherwise deadlock both threads.
IMPORT_WAIT_S = 60.0


def _await_other_import(name: str) -> None:
    """Wait, bounded, while another thread executes ``name`` or one of its parent packages.

    ``import_module`` waits on the module lock unbounded, and Python detects only cycles of
    import locks, not ones through any other lock.
    """
    parts = name.split(".")
    deadline: float | None = None
    me = threading.get_ident()
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        while True:
            mod = sys.modules.get(prefix)
            owner = _import_owner(prefix) if mod is not None and _initializing(mod) else None
            if owner is None or owner == me:
                break
            now = time.monotonic()
            deadline = now + IMPORT_WAIT_S if deadline is None else deadline
            if now >= deadline:
                raise _import_wait_error(name, prefix, owner)
            time.sleep(0.005)


def _import_owner(name: str) -> int | None:
    import importlib._bootstrap as bootstrap  # the only place the lock's owner is kept

    ref = getattr(bootstrap, "_module_locks", {}).get(name)
    lock = ref() if ref is not None else None
    owner = getattr(lock, "owner", None)
    return owner if isinstance(owner, int) else None


def _import_wait_error(name: str, prefix: str, owner: int) -> ImportWaitError:
    thread = next((t for t in threading.enumerate() if t.ident == owner), None)
    who = f"thread {thread.name!r} (ident {owner})" if thread else f"thread ident {owner}"
    return ImportWaitError(
        f"module {prefix!r} (needed for hook target module {name!r}) is still being imported "
        f"by {who} after {IMPORT_WAIT_S:g} s; applying hooks gave up waiting instead of "
        "deadlocking. That import is most likely blocked on something this thread holds "
        "(registering a hook while hooks are applied, or a lock of your own). Import the "
        "module, or register its hooks, before apply_plugin_hooks() runs, not concurrently.",
        module=prefix,
        thread=thread.name if thread else str(owner),
        waited_s=IMPORT_WAIT_S,
    )


def _initializing(module: types.ModuleType) -> bool:
    """Whether a thread may still be executing ``module`` (half its names missing)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


#: Modules whose code has run, still marked initialising while the on_import finder applies
#: their hooks (``HookRegistry._module_imported``): an apply that runs inside that (its late
#: round) resolves them, where it would wait for a first import that is already over.
FINISHED: set[str] = set()


def note_failure(name: str, exc: Exception, failed: dict[str, BaseException]) -> Exception:
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
    near = near_module(why.module)
    guess = f" (did you mean {near!r}?)" if near else ""
    reason = f"module {why.module!r} is not installed{guess}"
    if why.cause is None:
        return TargetMissing(
            f"hook target {display!r}: no module named {why.module!r}{guess}, so no prefix of "
            "the target can be imported. Install the package that provides it, fix the "
            "spelling, or register the hook with optional=True if that package may be absent.",
            target=display,
            missing=why.module,
            reason=reason,
            near=near,
        )
    hint = path.module_hint
    if why.not_found and hint is not None:
        # Missing itself (or a parent package); a dependency it imports is another matter.
        absent = hint == why.module or hint.startswith(why.module + ".")
        return (TargetMissing if absent else HookTargetError)(
            f"hook target {display!r}: module {hint!r} cannot be imported "
            f"({why.cause}). Install the package that provides it or fix the target.",
            target=display,
            missing=why.module,
            **({"reason": reason, "near": near} if absent else {}),
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
    """Where a target lives and its raw value; ``had_own`` False: inherited or ``__getattr__``."""

    owner: Any
    attr: str
    raw: Any
    had_own: bool
    module: str
    qualname: str
    defined_on: Any  # the class whose __dict__ holds ``raw`` (== owner unless inherited)


class _Owner(NamedTuple):
    module: types.ModuleType
    n: int  # how many parts of the target the module name takes
    owner: Any
    walked: str


class _BadOwner(NamedTuple):
    owner: Any
    walked: str
    name: str | None  # None: ``walked`` is an instance the walk may not go through


def is_instance_owner(owner: Any) -> bool:
    """Whether ``owner`` is an instance (only module-level ones pass ``Resolver._walk``)."""
    return not isinstance(owner, (type, types.ModuleType))


_Found = _Owner | _BadOwner | _Unimportable


class Resolver:
    """Resolves the targets of one ``apply_hooks()`` call, caching per module and owner.

    Targets cluster (ten methods of one class), so each module imports once and each owner is
    walked once. A class REPLACE changes what a walk finds: the caller then calls
    :meth:`forget_owners`.
    """

    def __init__(self) -> None:
        # imports that raised: never run twice (a module's side effects, such as an operator
        # it registers, would fail the second run with an error that hides the first)
        self._failed: dict[str, BaseException] = {}
        # (module hint, the target's parts but the last) -> what the walk there found
        self._owners: dict[tuple[str | None, tuple[str, ...]], _Found] = {}

    def forget_owners(self) -> None:
        self._owners.clear()

    def load(self, path: TargetPath) -> str:
        """Import the module ``path`` lives in; its name, as far as known.  A failure is kept
        for :meth:`resolve` to report, not raised, and the module is not run again."""
        guess = guess_module(path)  # first: 'eng.ops.tok' tried as a module costs an exception
        if guess not in sys.modules and guess not in self._failed:
            try:
                _await_other_import(guess)
                importlib.import_module(guess)
                return guess  # resolve() finds the rest of the way
            except Exception as exc:
                note_failure(guess, exc, self._failed)
        found = _find_module(path, self._failed)
        return found.module if isinstance(found, _Unimportable) else found[0].__name__

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
        names = path.parts[n:-1]
        for i, name in enumerate(names):
            parent = owner
            try:
                owner = getattr(owner, name)
            except AttributeError:
                return _BadOwner(owner, walked, name)
            walked = f"{walked}.{name}"
            if is_instance_owner(owner):
                # A module-level instance (a platform singleton) owns its attribute; an
                # instance further down, or one reached through a class, is no stable owner.
                last = i == len(names) - 1
                if not (last and isinstance(parent, types.ModuleType)):
                    return _BadOwner(owner, walked, None)
        return _Owner(module, n, owner, walked)

    def resolve(self, path: TargetPath, display: str) -> Resolved:
        """Import what is needed and find the target's owner and raw value.

        Once per target (a hundred in a worker's apply stage), so the owner cache is read
        here rather than through ``_owner``, and a module or class owner is told apart
        with one check each before the instance case."""
        parts = path.parts
        found = self._owners.get((path.module_hint, parts[:-1]))
        if found is None:
            found = self._owner(path)
        if type(found) is _Owner:
            _module, n, owner, _walked = found
            if n < len(parts):
                attr = parts[-1]
                qualname = attr if n == len(parts) - 1 else ".".join(parts[n:])
                if isinstance(owner, types.ModuleType):
                    d = vars(owner)
                    if attr in d:
                        return Resolved(owner, attr, d[attr], True, owner.__name__, qualname, owner)
        return self._resolve_slow(path, display, found)

    def _resolve_slow(self, path: TargetPath, display: str, found: _Found) -> Resolved:
        """Every case but a module's own attribute: a class member, an instance's, a module
        ``__getattr__``'s, and each error."""
        if isinstance(found, _Unimportable):
            raise _unimportable_error(path, display, found) from found.cause
        if isinstance(found, _BadOwner):
            if found.name is not None:
                raise _missing(display, found.owner, found.walked, found.name)
            raise HookTargetError(
                f"hook target {display!r}: {found.walked!r} is a {type(found.owner).__name__} "
                "instance that is not a module-level object; hooks patch attributes of "
                "classes, modules and module-level instances only. Name the instance "
                "through the module that holds it, or hook the method on its class "
                f"('{type(found.owner).__module__}.{type(found.owner).__qualname__}."
                f"{display.rpartition('.')[2]}').",
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
        if is_instance_owner(owner):
            return _instance_attribute(display, module, owner, walked, attr, qualname)
        d = vars(owner)
        if attr in d:
            return Resolved(owner, attr, d[attr], True, owner.__name__, qualname, owner)
        try:
            raw = getattr(owner, attr)  # a module __getattr__ (PEP 562) may provide it
        except AttributeError:
            raise _missing(display, owner, walked, attr) from None
        return Resolved(owner, attr, raw, False, owner.__name__, qualname, owner)


def _instance_attribute(
    display: str, module: types.ModuleType, owner: Any, walked: str, attr: str, qualname: str
) -> Resolved:
    """An attribute of a module-level instance, patched in the instance's own ``__dict__``.

    ``raw`` is already bound, so the chain calls it without ``self`` as ``instance.attr()`` does.
    """
    try:
        raw = getattr(owner, attr)
    except AttributeError:
        raise _missing(display, owner, walked, attr) from None
    if not isinstance(getattr(owner, "__dict__", None), dict):
        raise HookTargetError(
            f"hook target {display!r}: {walked!r} is a {type(owner).__name__} instance without "
            "a __dict__ (it uses __slots__), so the attribute cannot be patched on the "
            f"instance alone. Hook the method on its class instead ('{type(owner).__module__}."
            f"{type(owner).__qualname__}.{attr}').",
            target=display,
        )
    if attr[:2] == attr[-2:] == "__" and len(attr) > 4:
        # Python's syntax finds a special method on the type, never in the instance's
        # __dict__: ``model(x)``, ``len(model)`` and ``with model:`` would skip the patch
        # while only ``model.__call__(x)`` ran it, and status() would say "applied".
        cls = type(owner)
        raise HookTargetError(
            f"hook target {display!r}: {attr} of the {cls.__name__} instance {walked!r} is "
            f"looked up on its class by Python ({_SPECIAL_USE.get(attr, 'the syntax that uses it')}"
            f"), not on the instance, so a hook patched on the instance would never run there. "
            f"Hook the class's method instead ('{cls.__module__}.{cls.__qualname__}.{attr}': "
            f"every instance), and test 'self is {walked.rpartition('.')[2]}' in the hook "
            "if it is meant for this one.",
            target=display,
        )
    had_own = attr in vars(owner)
    return Resolved(owner, attr, raw, had_own, module.__name__, qualname, type(owner))


_SPECIAL_USE = {  # what a reader writes that calls the special method: for the message only
    "__call__": "obj(...)",
    "__len__": "len(obj)",
    "__iter__": "for x in obj",
    "__getitem__": "obj[key]",
    "__enter__": "with obj:",
    "__exit__": "with obj:",
    "__contains__": "x in obj",
}


def _missing(display: str, owner: Any, walked: str, name: str) -> HookTargetError:
    if isinstance(owner, types.ModuleType):
        what = "module"
    elif isinstance(owner, type):
        what = "class"
    else:
        what = f"{type(owner).__name__} instance"
    near = _near(name, owner)
    guess = f" Did you mean {near!r}?" if near else ""
    if near and near == _mangled(name, owner):
        guess += f" (Python stores {name!r}, written in the class body, under that name.)"
    return TargetMissing(
        f"hook target {display!r}: {what} {walked!r} has no attribute {name!r} "
        f"(resolved {walked!r}, missing {name!r}).{guess} Check the spelling, and that the "
        "installed version of that package still defines it.",
        target=display,
        missing=f"{walked}.{name}",
        reason=f"{what} {walked!r} has no attribute {name!r}"
        + (f" (did you mean {near!r}?)" if near else ""),
        near=near,
    )


def _near(name: str, owner: Any) -> str:
    """The owner's name closest to ``name`` (its attributes; a package's submodules too), or ""."""
    import difflib  # only when a target is missing

    try:
        names = set(dir(owner))
        if isinstance(owner, types.ModuleType) and hasattr(owner, "__path__"):
            import pkgutil

            names.update(info.name for info in pkgutil.iter_modules(owner.__path__))
    except Exception:  # a dir() or a package path that raises: no suggestion, the error stands
        return ""
    if _mangled(name, owner) in names:  # Engine.__step: a private name, stored mangled
        return _mangled(name, owner)
    ordered = sorted(names)
    for other in ordered:  # one slip first: difflib rates "lbi" against "lib" at 0.67
        if _one_edit(name, other):
            return other
    close = difflib.get_close_matches(name, ordered, n=1, cutoff=0.8)
    return close[0] if close else ""


def _mangled(name: str, owner: Any) -> str:
    """``_Engine__step`` for ``__step`` on class ``Engine``; "" where Python mangles nothing."""
    if not isinstance(owner, type) or not name.startswith("__") or name.endswith("__"):
        return ""
    stripped = owner.__name__.lstrip("_")
    return f"_{stripped}{name}" if stripped else ""


def near_module(name: str) -> str:
    """An importable module one slip from ``name``, which is not (``vlm`` for ``vllm``), or "".

    A package's submodules are its own (``_near``); a top-level name is compared with every
    top-level module on ``sys.path``, built in or imported: a misspelt package is otherwise
    "not installed", which an ``optional=True`` hook skips without a word.
    """
    parent, _, last = name.rpartition(".")
    if parent:
        owner = sys.modules.get(parent)
        near = _near(last, owner) if owner is not None else ""
        return f"{parent}.{near}" if near else ""
    import importlib.util  # only when a target's package is missing

    names = _listed().union(n for n in sys.modules if "." not in n)
    for other in sorted(n for n in names if _one_edit(name, n)):
        try:
            if importlib.util.find_spec(other) is not None:  # a real module, not a file stem
                return other
        except (ImportError, ValueError):
            continue
    return ""


_listing: tuple[tuple[str, ...], frozenset[str]] = ((), frozenset())


def _listed() -> frozenset[str]:
    """The top-level names ``sys.path``'s folders list (file stems), once per ``sys.path``: a
    plugin with several optional targets in one missing package asks for each."""
    global _listing
    key = tuple(sys.path)
    if _listing[0] != key or not _listing[1]:
        names = set(sys.builtin_module_names)
        for entry in key:  # listings only (pkgutil.iter_modules took 20-35 ms here)
            try:
                names.update(n.partition(".")[0] for n in os.listdir(entry or "."))
            except OSError:  # a zip file, a folder that is gone: nothing listed
                continue
        _listing = key, frozenset(names)
    return _listing[1]


def watch_names(path: TargetPath) -> tuple[str, ...]:
    """The modules whose first import may make ``path`` resolvable (``on_import`` waits on them)."""
    if path.module_hint is not None:
        return (path.module_hint,)
    return tuple(".".join(path.parts[:i]) for i in range(1, len(path.parts)))


def imported(path: TargetPath, done: str | None = None) -> bool:
    """Whether ``path`` can be resolved now without importing anything.

    ``done``: a module that just finished running but is still marked initialising. A package
    lacking the next part may still get it from a submodule import, so it is not ready yet.
    """
    modules = sys.modules
    hint = path.module_hint
    if hint is not None:
        mod = modules.get(hint)
        return mod is not None and (hint == done or hint in FINISHED or not _initializing(mod))
    parts = path.parts
    name = path.key  # the parts joined by '.': each shorter prefix is a slice of it
    for i in range(len(parts) - 1, 0, -1):
        name = name[: name.rindex(".")]
        mod = modules.get(name)
        if mod is None or (name != done and name not in FINISHED and _initializing(mod)):
            continue
        if i == len(parts) - 1 or not hasattr(mod, "__path__"):
            return True
        return parts[i] in vars(mod)
    return False


def cannot_come(path: TargetPath, done: str | None = None) -> bool:
    """Whether no import can ever make ``path`` resolvable: the deepest module on it imported
    so far is a package that finished running with no such attribute, no module
    ``__getattr__`` and no such submodule on its ``__path__``.  An ``on_import`` hook on it
    (``eng.layers.atention``, misspelt, or a module this version of the engine renamed)
    would wait "pending" for the whole run.  Its finders are asked with the package already
    imported, so nothing runs (``done``: see ``imported``)."""
    parts = (path.module_hint or path.key).split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        mod = sys.modules.get(parent)
        if mod is None:
            continue
        if (parent != done and _initializing(mod)) or not hasattr(mod, "__path__"):
            return False  # still running, or a module: its attributes are the resolver's to say
        names = vars(mod)
        if parts[i] in names or "__getattr__" in names:
            return False
        try:
            return importlib.util.find_spec(f"{parent}.{parts[i]}") is None
        except (ImportError, ValueError):
            return False
    return False


# Kinds of wrappable targets.
CLASS = "class"
FUNCTION = "function"
METHOD = "method"
CLASSMETHOD = "classmethod"
STATICMETHOD = "staticmethod"
CALLABLE = "callable"  # non-descriptor callable in a class: behaves like a staticmethod
INSTANCE = "instance attribute"  # a callable attribute of a module-level instance

_SLOT_TYPES: tuple[type, ...] = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    types.MethodWrapperType,
)


# The standard library's own ``partial.__get__`` (None before 3.13, which added one).
_PARTIAL_GET = getattr(functools.partial, "__get__", None)


def _partial_kind(raw: functools.partial[Any]) -> str | None:
    """How a ``functools.partial`` stored in a class behaves when read through an instance.

    Before 3.14 ``obj.attr(x)`` calls it unbound (``CALLABLE``; 3.13's ``__get__`` returns
    it unchanged); 3.14 binds ``obj`` like a function (``METHOD``). A subclass's own
    ``__get__`` is asked with a probe; anything else (None) is refused.
    """
    get = getattr(type(raw), "__get__", None)
    if get is None:  # not reached from classify(), which checks this first
        return CALLABLE
    if get is _PARTIAL_GET:
        return METHOD if sys.version_info >= (3, 14) else CALLABLE
    probe = _Probe()
    try:
        bound = get(raw, probe, _Probe)
    except Exception:
        return None
    if bound is raw:
        return CALLABLE
    if isinstance(bound, types.MethodType) and bound.__func__ is raw and bound.__self__ is probe:
        return METHOD
    return None


class _Probe:
    """An instance nobody else holds, to see what a partial subclass's ``__get__`` returns."""


def classify(res: Resolved, display: str) -> tuple[str, Any]:
    """The kind of target and the plain callable to build a chain around.

    Refuses what a function wrapper cannot stand in for: properties, builtin slots and
    unknown descriptors.
    """
    raw = res.raw
    if type(raw) is types.FunctionType:  # nearly every target: a module's function, a method
        owner = res.owner
        if isinstance(owner, types.ModuleType):
            return FUNCTION, raw
        if isinstance(owner, type):
            return METHOD, raw
    if isinstance(raw, type):
        return CLASS, raw
    plain = _on_object(res, display)
    if plain is not None:
        return plain
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
    if isinstance(raw, (*_SLOT_TYPES, types.BuiltinFunctionType)):  # inspect.isbuiltin
        raise HookTargetError(
            f"hook target {display!r} is a builtin slot ({type(raw).__name__}){where}: it "
            "binds differently from a Python function and cannot be wrapped faithfully. Define "
            f"{res.attr!r} in Python on the class, or REPLACE the class with a subclass.",
            target=display,
        )
    if callable(raw) and not hasattr(type(raw), "__get__"):
        return CALLABLE, raw
    if isinstance(raw, functools.partial):
        kind = _partial_kind(raw)
        if kind is not None:
            return kind, raw
    if isinstance(raw, functools.singledispatchmethod):
        text = _dispatch_base.method_refusal(raw, res.owner, res.attr, display, where)
        raise HookTargetError(text, target=display)
    raise HookTargetError(
        f"hook target {display!r} is a {type(raw).__name__} descriptor{where}; only plain, "
        "class and static methods (sync or async) can be wrapped. REPLACE the class instead.",
        target=display,
    )


def _on_object(res: Resolved, display: str) -> tuple[str, Any] | None:
    if is_instance_owner(res.owner):
        if callable(res.raw):
            return INSTANCE, res.raw
        raise HookTargetError(
            f"hook target {display!r} is a {type(res.raw).__name__} attribute of a "
            f"{type(res.owner).__name__} instance, not a method or function; only callables "
            "can be hooked",
            target=display,
        )
    if isinstance(res.owner, types.ModuleType):
        if callable(res.raw):
            return FUNCTION, res.raw
        raise HookTargetError(
            f"hook target {display!r} is a {type(res.raw).__name__}, not a function or class; "
            "only callables can be hooked",
            target=display,
        )
    return None


def import_hook(spec: str) -> Any:
    """Import a ``"module:qualname"`` hook; errors say which part was missing."""
    try:
        return _reference.resolve(*_reference.parse(spec))
    except _reference.ImportFailed as exc:
        raise HookRegistrationError(f"hook {spec!r} cannot be imported: {exc}") from exc.cause
    except (_reference.BadReference, _reference.MissingAttribute) as exc:
        why = exc.why if isinstance(exc, _reference.BadReference) else str(exc)
        raise HookRegistrationError(f"hook {spec!r} cannot be imported: {why}") from None


def check_hook_spec(hook: str) -> None:
    """Validate the spelling of a string hook at register time (no import)."""
    if hook in WELL_SPELLED:
        return  # a plugin registers one hook on many targets
    try:
        _reference.parse(hook)
    except _reference.BadReference as exc:
        raise HookRegistrationError(
            f"hook {hook!r} is not a valid 'module:qualname' string (e.g. "
            f"'my_plugin.hooks:timer'): {exc.why}"
        ) from None
    WELL_SPELLED.add(hook)


#: String hooks ``check_hook_spec`` passed: spelling does not change.
WELL_SPELLED: set[str] = set()


def coerce_hook_type(hook_type: object) -> HookType:
    if isinstance(hook_type, HookType):
        return hook_type
    if isinstance(hook_type, str) and hook_type.upper() in HookType.__members__:
        return HookType[hook_type.upper()]
    raise HookRegistrationError(
        f"unknown hook type {hook_type!r}; use HookType.BEFORE, HookType.AFTER, "
        "HookType.AROUND or HookType.REPLACE"
    )
