"""What platform discovery checks about each candidate it imports or activates.

Apart from ``discovery`` so its decision table reads as its rows; every error is made through
:class:`Trace` (``_candidates``), so it carries what the resolution looked at.  Imported by the rows
that run these checks, never by a worker whose platform its launcher pinned (issue #23).
"""

from __future__ import annotations

import contextlib
import sys

import spawnkit._reference as _reference
from spawnkit import _metadata, _steps
from spawnkit._compat import TYPE_CHECKING
from spawnkit._log import DEBUG, LazyLogger
from spawnkit._metadata import EntryPointInfo
from spawnkit._names import qualified_name
from spawnkit.errors import (
    PlatformConflictError,
    PlatformContractError,
    PlatformError,
    PlatformNotFoundError,
    PlatformPluginError,
)
from spawnkit.platforms._candidates import Candidate, Trace, ep_label, exc_text
from spawnkit.platforms.builtin import BUILTINS
from spawnkit.platforms.interface import Platform, PlatformEnum

if TYPE_CHECKING:
    from typing import Any


__all__ = [
    "activate", "activate_all", "available_text", "conflict_error", "for_base",
    "not_found_error", "platform_source", "plugin_class", "reserved_error",
]  # fmt: skip

logger = LazyLogger("spawnkit.platforms")  # logging is imported only if a record is emitted
_NAMES = tuple(row.name for row in BUILTINS)


def activate(
    ep: EntryPointInfo, trace: Trace, strict: bool = True
) -> tuple[Candidate, BaseException | None]:
    """Load and call one ``activate()``; strict: raise, else record the error."""
    outcome = Candidate(ep, "error")
    trace.candidates.append(outcome)
    with platform_source(ep):
        exc = _load_and_call(ep, trace, outcome)
    if outcome.outcome == "error":
        if logger.isEnabledFor(DEBUG):
            logger.debug("platform candidate %s", outcome.describe())
        if strict:
            err = trace.fail(
                PlatformPluginError,
                f"{ep_label(ep)}: {outcome.error}. Fix or reinstall {ep.dist}; a broken "
                "platform plugin is never skipped.",
            )
            raise err from exc
    return outcome, exc


def platform_source(ep: EntryPointInfo) -> contextlib.AbstractContextManager[Any]:
    """Hooks a platform package registers as it is imported here (auto-discovery imports
    every installed one to ask whether its hardware is present) are that platform's: only a
    process whose platform it is applies them (``PluginManager``), as only such a worker
    imports the package."""
    from spawnkit.hooks.types import HookSource, plugin_source  # the hooks' half, at use

    return plugin_source(HookSource(ep.name, ep.dist, ep.version, platform=True))


def _load_and_call(ep: EntryPointInfo, trace: Trace, outcome: Candidate) -> BaseException | None:
    """Import the entry point and call it; ``outcome`` says how that went, the error is returned."""
    try:
        fn = _metadata.load_entry_point(ep)
    except Exception as e:
        outcome.error = f"importing the entry point raised {exc_text(e)}"
        return e
    if not callable(fn):
        outcome.error = f"the entry point is a {type(fn).__name__}, not a callable"
        return None
    try:
        with _steps.activating(ep_label(ep), trace.plugin_group, sys._getframe()):
            result = fn()
    except Exception as e:
        outcome.error = f"activate() raised {exc_text(e).rstrip('.')}"
        return e
    if result is None:
        outcome.outcome = "none"
    elif isinstance(result, str) and result.strip():
        outcome.outcome = "activated"
        outcome.qualname = result.strip()
    else:
        outcome.error = (
            f"activate() returned {result!r} ({type(result).__name__}); it must "
            "return a non-empty class qualname ('pkg.module.Class') or None"
        )
    return None


def for_base(
    name: str,
    builtin: type[Platform],
    base: type[Platform],
    composed: dict[tuple[str, type], type[Platform]],
    trace: Trace,
) -> tuple[type[Platform], str]:
    """The built-in for an engine base: its own (``_builtin_platforms``) or composed, cached;
    with the name of the class that runs, for the selection (a composed class has no import
    path: its bases say what it is)."""
    own = getattr(base, "_builtin_platforms", {}).get(name)
    if own is not None:
        cls: Any = _reference.resolve_name(own) if isinstance(own, str) else own
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise trace.fail(
                PlatformPluginError,
                f"{base.__qualname__}._builtin_platforms[{name!r}] = {own!r} is not a "
                f"subclass of the namespace base {base.__qualname__}.",
            )
        trace.step(f"engine built-in {cls.__qualname__}")
        return cls, f"{cls.__module__}:{cls.__qualname__}"
    key = (name, base)
    made = composed.get(key)
    if made is None:
        clashes = _clashes(builtin, base)
        if clashes:
            raise trace.fail(PlatformPluginError, _clash_text(name, builtin, base, clashes))
        made = type(
            f"{builtin.__name__}For{base.__name__}",
            (builtin, base),
            {"__module__": builtin.__module__, "__doc__": builtin.__doc__},
        )
        composed[key] = made
    trace.step(f"composed {builtin.__name__} with {base.__qualname__}")
    label = f"{made.__name__}({_colon(builtin)}, {_colon(base)})"
    return made, label


def _colon(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _own_names(cls: type) -> set[str]:
    """Public names ``cls``'s chain defines below ``Platform`` (the interface's own are not)."""
    chain = [k for k in cls.__mro__ if k not in Platform.__mro__]
    return {n for k in chain for n in vars(k) if not n.startswith("_")}


def _clashes(builtin: type, base: type) -> list[str]:
    """What the engine base overrides that the built-in defines too: composed as
    ``(builtin, base)``, the built-in's win, so the engine's never run on that device."""
    return sorted(_own_names(builtin) & _own_names(base))


def _clash_text(name: str, builtin: type, base: type, clashes: list[str]) -> str:
    listed = ", ".join(clashes)
    mine = f"{base.__name__.removesuffix('Platform')}{builtin.__name__}"
    pair = f"{builtin.__qualname__}, {base.__qualname__}"
    return (
        f"the namespace's platform base {_colon(base)} overrides {listed}, which the "
        f"built-in {builtin.__qualname__} defines too: the built-in {name!r} runs as a class "
        f"of ({pair}), where {builtin.__qualname__}'s win, so the engine's {listed} would "
        f"never run on {name!r}. Name the engine's own class for it: "
        f"{base.__qualname__}._builtin_platforms = {{{name!r}: '<module>:{mine}'}}, with "
        f"class {mine}({pair}) defining {listed} itself (returning "
        f"{base.__qualname__}.<name>(self) or {builtin.__qualname__}.<name>(self), whichever "
        f"is meant on {name!r})."
    )


def plugin_class(
    ep: EntryPointInfo, qualname: str, base: type[Platform], trace: Trace
) -> type[Platform]:
    """The class a plugin's ``activate()`` named, checked against the namespace's base."""
    label = ep_label(ep)
    try:
        cls = _reference.resolve_name(qualname)
    except PlatformContractError as exc:
        raise trace.fail(
            PlatformPluginError,
            f"{label}: activate() returned {qualname!r}, whose class breaks the platform "
            f"interface: {exc}",
        ) from exc
    except Exception as exc:
        raise trace.fail(
            PlatformPluginError,
            f"{label}: activate() returned {qualname!r}, which does not resolve "
            f"({exc_text(exc)}). Return the platform class as 'package.module.Class'.",
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise trace.fail(
            PlatformPluginError,
            f"{label}: activate() returned {qualname!r}, which is {cls!r}, not a subclass "
            f"of the namespace's platform base {qualified_name(base)}. "
            f"Platforms of namespace {trace.namespace!r} must subclass it.",
        )
    declared = [k for k in cls.__mro__ if vars(k).get(_CONTRACT) and k not in base.__mro__]
    if declared:
        raise trace.fail(PlatformPluginError, _declared_text(label, cls, base, declared))
    in_tree = cls.__module__.startswith("spawnkit.platforms.")
    if not in_tree and getattr(cls, "_enum", None) is not PlatformEnum.OOT:
        raise trace.fail(
            PlatformPluginError,
            f"{label}: {qualified_name(cls)} is an out-of-tree platform but "
            f"its _enum is {getattr(cls, '_enum', None)!r}; declare "
            "`_enum = PlatformEnum.OOT` (is_out_of_tree() would otherwise lie; is_rocm() "
            "and is_cuda() still follow a built-in base class).",
        )
    for attr in ("device_name", "device_type"):
        value = getattr(cls, attr, None)
        if not (isinstance(value, str) and value.strip()):
            raise trace.fail(
                PlatformPluginError,
                f"{label}: {cls.__qualname__}.{attr} is {value!r}; a platform plugin must "
                f"set {attr} to a non-empty string (e.g. 'my_device').",
            )
    return cls


_CONTRACT = "_spawnkit_contract"  # interface._CONTRACT_FLAG: set by contract=True


def _declared_text(label: str, cls: type, base: type, declared: list[type]) -> str:
    """A plugin class (or a class between it and the base) declared ``contract=True``: each
    public name it defines became an interface name, so a misspelt override was accepted."""
    import difflib  # only on this error path

    from spawnkit.platforms._contract import _contract

    known = list(_contract(base))
    new = [(k, n) for k in declared for n in vars(k) if not n.startswith("_") and n not in known]
    shown = []
    for owner, name in new:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        shown.append(f"{owner.__qualname__}.{name}{hint}")
    names = ", ".join(k.__qualname__ for k in declared)
    return (
        f"{label}: {qualified_name(cls)} is declared `contract=True` ({names}), which makes "
        "every public name it defines a new interface name instead of an override, so a "
        "misspelt one is accepted and the interface's method keeps running"
        + (f": {', '.join(shown)}" if shown else "")
        + f". A platform plugin's class overrides the interface of {qualified_name(base)}; "
        "remove contract=True (its class is then checked when it is defined)."
    )


def reserved_error(eps: list[EntryPointInfo], trace: Trace) -> PlatformError:
    listing = "; ".join(ep_label(ep) for ep in eps)
    return trace.fail(
        PlatformPluginError,
        f"platform entry-point names {sorted({ep.name for ep in eps})} are reserved for "
        f"spawnkit's built-ins ({', '.join(_NAMES)}): {listing}. Rename the entry "
        "point in the plugin's pyproject.toml and reinstall it.",
    )


def activate_all(eps: tuple[EntryPointInfo, ...], trace: Trace) -> list[tuple[EntryPointInfo, str]]:
    """Every plugin's ``activate()`` after the names are checked: the activated ones."""
    reserved = [ep for ep in eps if ep.name.lower() in _NAMES]
    if reserved:
        raise reserved_error(reserved, trace)
    results = [(ep, *activate(ep, trace, strict=False)) for ep in eps]
    failed = [(ep, o, e) for ep, o, e in results if o.outcome == "error"]
    if failed:
        ep, first, cause = failed[0]
        more = f" ({len(failed) - 1} more plugin(s) failed too; see below)" if failed[1:] else ""
        err = trace.fail(
            PlatformPluginError,
            f"{ep_label(ep)} failed during auto-discovery: {first.error}.{more} "
            "Discovery stops instead of falling back to another platform, which would run "
            f"the job on the wrong hardware. Fix or uninstall {ep.dist}, or select a "
            f"platform with {trace.selector_var}=<name> (then only that "
            "plugin is imported).",
        )
        raise err from cause
    return [(ep, o.qualname) for ep, o, _ in results if o.qualname is not None]


def conflict_error(active: list[tuple[EntryPointInfo, str]], trace: Trace) -> PlatformError:
    listing = "; ".join(
        f"{ep.name!r} -> {qualname} ({ep.dist} {ep.version})" for ep, qualname in active
    )
    return trace.fail(
        PlatformConflictError,
        f"{len(active)} platform plugins activated in namespace {trace.namespace!r}: {listing}. "
        f"Set {trace.selector_var} to one of {', '.join(repr(ep.name) for ep, _ in active)} "
        "to choose.",
    )


def not_found_error(
    requested: str, how: str, eps: tuple[EntryPointInfo, ...], trace: Trace
) -> PlatformError:
    import difflib  # only on this error path

    close = difflib.get_close_matches(requested, [ep.name for ep in eps] + list(_NAMES), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return trace.fail(
        PlatformNotFoundError,
        f"{how}: no platform named {requested!r} in namespace "
        f"{trace.namespace!r}.{hint} Available: {available_text(eps)}. "
        f"Install the platform's plugin package (e.g. 'pip install <package>'); it "
        f"must declare an entry point {requested} = 'module:activate' in group "
        f"{trace.group!r}.",
    )


def available_text(eps: tuple[EntryPointInfo, ...]) -> str:
    names = [f"{n} (built-in)" for n in _NAMES]
    names += [f"{ep.name} ({ep.dist} {ep.version})" for ep in eps]
    return ", ".join(names)
