"""Platform discovery: the decision table, its validations, and the per-process current platform.

Decision table (``<PREFIX>`` is the namespace's env prefix):

* a name is selected (``set_selection()`` by the parent, else ``<PREFIX>_PLATFORM``):
  only that entry point is imported ("front-loading"); a built-in name
  (``cpu cuda rocm xpu base``) is checked against the hardware; an unknown
  name, or a plugin whose ``activate()`` returns None, is an error;
* nothing selected: every plugin's ``activate()`` runs.  None activated:
  ``<PREFIX>_USE_CPU_ENGINE=1`` -> CPU, else CUDA, ROCm, XPU if present, else
  the namespace's base platform.  One activated: it.  Several: an error.

Never is an error turned into a fallback: a plugin that raises while its
hardware might be present would otherwise run the job on another device.
Nothing here creates an accelerator context, and torch is imported only by
the XPU probe on a torch build with XPU (see ``_probes``).
"""

from __future__ import annotations

import os
import pkgutil
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spawnkit import _metadata
from spawnkit._log import DEBUG, INFO, LazyLogger
from spawnkit._metadata import EntryPointInfo
from spawnkit._once import Once, OnceState
from spawnkit.errors import (
    PlatformConflictError,
    PlatformContractError,
    PlatformError,
    PlatformInitError,
    PlatformNotFoundError,
    PlatformPluginError,
    PlatformUnavailableError,
)
from spawnkit.platforms._probes import Probe
from spawnkit.platforms._selection import PlatformSelection
from spawnkit.platforms.interface import Platform, PlatformEnum

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace
    from spawnkit.platforms.explanation import CandidateOutcome, PlatformExplanation

__all__ = ["RESERVED_NAMES", "PlatformExplanation", "PlatformManager", "PlatformSelection"]

logger = LazyLogger("spawnkit.platforms")  # logging is imported only if a record is emitted

#: Names a plugin may not use: they select the built-ins (and ``base`` the base platform).
RESERVED_NAMES = ("cpu", "cuda", "rocm", "xpu", "base")
_AUTO_ORDER = ("cuda", "rocm", "xpu")
_TRUE = ("1", "true", "yes", "on")


def _ep_label(ep: EntryPointInfo) -> str:
    return (
        f"platform plugin {ep.name!r} (entry point {ep.value!r} in group {ep.group!r}, "
        f"distribution {ep.dist} {ep.version})"
    )


def _exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Candidate:
    """One candidate's outcome while resolving (the fields of ``CandidateOutcome``).

    A plain class: the explanation dataclasses are built from these only when
    someone asks (``explain()``, doctor, an error), never in a worker whose
    resolution succeeds.
    """

    __slots__ = ("dist", "error", "name", "outcome", "qualname", "value", "version")

    def __init__(self, ep: EntryPointInfo, outcome: str) -> None:
        self.name, self.value, self.dist, self.version = ep.name, ep.value, ep.dist, ep.version
        self.outcome = outcome
        self.qualname: str | None = None
        self.error: str | None = None

    def record(self) -> CandidateOutcome:
        from spawnkit.platforms.explanation import CandidateOutcome

        return CandidateOutcome(
            self.name, self.value, self.dist, self.version, self.outcome, self.qualname, self.error
        )

    def describe(self) -> str:
        return self.record().describe()


class _Trace:
    """Records what one resolution looked at; errors are made through it so they carry it."""

    def __init__(self, manager: PlatformManager, mode: str, requested: str | None) -> None:
        cfg = manager.namespace.config
        self.namespace = cfg.name
        self.group = cfg.platform_group
        self.selector_var = cfg.platform_var
        self.selector_value = os.environ.get(cfg.platform_var)
        self.cpu_engine_var = cfg.cpu_engine_var
        self.cpu_engine_value = os.environ.get(cfg.cpu_engine_var)
        self.mode = mode
        self.requested = requested
        self.candidates: list[_Candidate] = []
        self.probes: list[tuple[str, bool, str]] = []
        self.path: list[str] = []
        self.winner: PlatformSelection | None = None
        self.error: str | None = None
        self._built: PlatformExplanation | None = None

    def step(self, text: str) -> None:
        self.path.append(text)

    def explanation(self) -> PlatformExplanation:
        """The explanation of this resolution; the same object once it has finished."""
        if self._built is not None:
            return self._built
        from spawnkit.platforms.explanation import PlatformExplanation, ProbeOutcome

        expl = PlatformExplanation(
            namespace=self.namespace,
            group=self.group,
            selector_var=self.selector_var,
            selector_value=self.selector_value,
            cpu_engine_var=self.cpu_engine_var,
            cpu_engine_value=self.cpu_engine_value,
            mode=self.mode,
            requested=self.requested,
            candidates=[c.record() for c in self.candidates],
            probes=[ProbeOutcome(*probe) for probe in self.probes],
            path=list(self.path),
            winner=self.winner,
            error=self.error,
        )
        if self.winner is not None or self.error is not None:
            self._built = expl  # finished: nothing changes it any more
        return expl

    def fail(self, cls: type[PlatformError], message: str) -> PlatformError:
        self.error = message
        text = self.explanation().render(error=False)
        return cls(message, explanation=text, namespace=self.namespace)


_managers: weakref.WeakSet[PlatformManager] = weakref.WeakSet()


class PlatformManager:
    """Discovery, selection and the current platform of one namespace (``ns.platforms``)."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self._lock = threading.RLock()
        self._local = threading.local()
        #: Hardware probes by built-in name.  Per manager so a test can simulate a GPU
        #: for one namespace without touching the process-wide functions.
        from spawnkit.platforms.builtin import BUILTIN_PROBES

        self._probes: dict[str, Callable[[], Probe]] = dict(BUILTIN_PROBES)
        self._composed: dict[tuple[str, type], type[Platform]] = {}
        self._reset_state()
        _managers.add(self)

    def _reset_state(self) -> None:
        self._pinned: str | None = None
        self._pinned_by = ""
        self._selections: dict[str | None, tuple[PlatformSelection, type[Platform]]] = {}
        self._current: PlatformSelection | None = None
        self._trace: _Trace | None = None  # the last resolution's record
        name = self.namespace.config.name
        self._current_once: Once[Platform] = Once(
            f"{name}: resolve platform", again=self._again("resolution")
        )
        self._init_once: Once[Platform] = Once(
            f"{name}: initialize platform", again=self._again("initialization (init_backend)")
        )

    def _again(self, what: str) -> Callable[[BaseException], BaseException]:
        def build(first: BaseException) -> BaseException:
            return PlatformInitError(
                f"platform {what} for namespace {self.namespace.name!r} previously failed in "
                f"this process ({_exc_text(first).splitlines()[0]}); it is not retried, so "
                "every caller sees the same outcome. Fix the cause (chained below) and start "
                "a new process.",
                explanation=getattr(first, "explanation", ""),
                namespace=self.namespace.name,
            )

        return build

    def reset_for_tests(self) -> None:
        """Forget every decision, pin, instance and probe override, as in a fresh process."""
        from spawnkit.platforms.builtin import BUILTIN_PROBES

        with self._lock:
            self._reset_state()
            self._probes = dict(BUILTIN_PROBES)

    # ------------------------------------------------------------ metadata
    def _entry_points(self) -> tuple[EntryPointInfo, ...]:
        return _metadata.entry_points(self.namespace.config.platform_group)

    def platform_dists(self) -> dict[str, str]:
        """Entry name -> distribution for every platform entry point (metadata only)."""
        dists: dict[str, str] = {}
        for ep in self._entry_points():
            dists.setdefault(ep.name, ep.dist)
        return dists

    # ----------------------------------------------------------- selection
    def set_selection(self, name: str | None, *, by: str = "") -> None:
        """Pin the platform by name (a child pinning its parent's decision); None unpins.

        Must come before the platform is first resolved in this process:
        afterwards the pin could not change what callers already hold.
        ``by`` says, in the user's terms, who decided (explanations and
        reports show it); default: this call.
        """
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise PlatformError(
                    f"set_selection() needs a platform name or None, got {name!r}",
                    namespace=self.namespace.name,
                )
            name = name.strip()
        with self._lock:
            once_state = self._current_once.state
            if once_state is not OnceState.NOT_STARTED:
                current = self._current.name if self._current is not None else None
                if current == name and once_state is OnceState.DONE:
                    self._pinned, self._pinned_by = name, by
                    return
                raise PlatformError(
                    f"set_selection({name!r}) for namespace {self.namespace.name!r} came after "
                    f"the platform was already resolved ({once_state.value}, "
                    f"selected: {current!r}). Pin the selection before the first use of "
                    "current_platform / initialize_current_platform().",
                    namespace=self.namespace.name,
                )
            self._pinned, self._pinned_by = name, by

    def _requested(self, name: str | None) -> tuple[str | None, str]:
        if name is not None:
            return name.strip(), f"selected by argument {name.strip()!r}"
        if self._pinned is not None:
            by = self._pinned_by or f"set_selection({self._pinned!r})"
            return self._pinned, f"{self._pinned!r} chosen by {by}"
        var = self.namespace.config.platform_var
        env = os.environ.get(var, "").strip()
        if env:
            return env, f"{var}={env}"
        return None, "auto-discovery"

    def select(self, name: str | None = None) -> PlatformSelection:
        """Resolve the platform without instantiating it or running ``init_backend()``."""
        return self._select(name)[0]

    def _select(self, name: str | None) -> tuple[PlatformSelection, type[Platform]]:
        requested, how = self._requested(name)
        cached = self._selections.get(requested)
        if cached is not None:
            return cached
        with self._lock:
            cached = self._selections.get(requested)
            if cached is not None:
                return cached
            if getattr(self._local, "resolving", False):
                raise PlatformError(
                    f"platform of namespace {self.namespace.name!r} requested while it is being "
                    "resolved (from a plugin's activate() or a platform module import). "
                    "activate() must only check for hardware and return a qualname or None.",
                    namespace=self.namespace.name,
                )
            self._local.resolving = True
            mode = "auto" if requested is None else "selected"
            trace = _Trace(self, mode, requested)
            trace.step(how)
            self._trace = trace
            try:
                if requested is None:
                    result = self._resolve_auto(trace)
                else:
                    result = self._resolve_named(requested, how, trace)
            finally:
                self._local.resolving = False
            trace.winner = result[0]
            self._selections[requested] = result
            if logger.isEnabledFor(INFO):  # every worker selects: no logging import for it
                logger.info(
                    "namespace %r: platform %s %r (%s) [%s]",
                    self.namespace.name,
                    result[0].kind,
                    result[0].name,
                    result[0].qualname,
                    " -> ".join(result[0].path),
                )
            return result

    def selected_dist(self) -> str | None:
        """The winning plugin's distribution, or None for a built-in or the base platform."""
        selection = self._current if self._current is not None else self.select()
        return selection.dist if selection.kind == "plugin" else None

    # ------------------------------------------------------------ resolution
    def _base_class(self, trace: _Trace) -> type[Platform]:
        qualname = self.namespace.config.platform_base
        try:
            base: Any = pkgutil.resolve_name(qualname)
        except Exception as exc:
            raise trace.fail(
                PlatformPluginError,
                f"the platform base {qualname!r} of namespace {self.namespace.name!r} does not "
                f"import ({_exc_text(exc)}). The engine declaring the namespace must pass an "
                "importable Platform subclass as platform_base=.",
            ) from exc
        if not (isinstance(base, type) and issubclass(base, Platform)):
            raise trace.fail(
                PlatformPluginError,
                f"the platform base {qualname!r} of namespace {self.namespace.name!r} is "
                f"{base!r}, not a subclass of spawnkit.platforms.Platform.",
            )
        return base

    def _builtin(self, name: str, trace: _Trace, how: str) -> tuple[PlatformSelection, type]:
        from spawnkit.platforms.builtin import BUILTIN_PLATFORMS

        base = self._base_class(trace)
        if name == "base":
            qualname = self.namespace.config.platform_base
            trace.step("base platform")
            sel = PlatformSelection("base", "base", qualname, path=list(trace.path))
            return sel, base
        qualname = BUILTIN_PLATFORMS[name]
        cls = pkgutil.resolve_name(qualname)
        if not issubclass(cls, base):
            cls = self._for_base(name, cls, base, trace)
        trace.step(f"built-in {name!r}")
        return PlatformSelection(name, "builtin", qualname, path=list(trace.path)), cls

    def _for_base(
        self, name: str, builtin: type[Platform], base: type[Platform], trace: _Trace
    ) -> type[Platform]:
        """The built-in for an engine base: the base's own (``_builtin_platforms``) or composed."""
        own = getattr(base, "_builtin_platforms", {}).get(name)
        if own is not None:
            cls: Any = pkgutil.resolve_name(own) if isinstance(own, str) else own
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise trace.fail(
                    PlatformPluginError,
                    f"{base.__qualname__}._builtin_platforms[{name!r}] = {own!r} is not a "
                    f"subclass of the namespace base {base.__qualname__}.",
                )
            trace.step(f"engine built-in {cls.__qualname__}")
            return cls
        key = (name, base)
        composed = self._composed.get(key)
        if composed is None:
            composed = type(
                f"{builtin.__name__}For{base.__name__}",
                (builtin, base),
                {"__module__": builtin.__module__, "__doc__": builtin.__doc__},
            )
            self._composed[key] = composed
        trace.step(f"composed {builtin.__name__} with {base.__qualname__}")
        return composed

    def _probe(self, name: str, trace: _Trace) -> Probe:
        try:
            probe = self._probes[name]()
        except Exception as exc:
            probe = Probe(False, f"probe raised {_exc_text(exc)}")
        trace.probes.append((name, probe.available, probe.reason))
        return probe

    def _available_text(self) -> str:
        names = [f"{n} (built-in)" for n in RESERVED_NAMES]
        names += [f"{ep.name} ({ep.dist} {ep.version})" for ep in self._entry_points()]
        return ", ".join(names)

    def _resolve_named(
        self, requested: str, how: str, trace: _Trace
    ) -> tuple[PlatformSelection, type]:
        eps = self._entry_points()
        var = self.namespace.config.platform_var
        group = self.namespace.config.platform_group
        for ep in eps:
            if ep.name != requested:
                trace.candidates.append(_Candidate(ep, "skipped"))
        lowered = requested.lower()
        if lowered in RESERVED_NAMES:
            claims = [ep for ep in eps if ep.name.lower() == lowered]
            if claims:
                raise self._reserved_error(claims, trace)
            if lowered not in ("base", "cpu"):
                probe = self._probe(lowered, trace)
                if not probe.available:
                    raise trace.fail(
                        PlatformUnavailableError,
                        f"{how} selects the built-in {lowered!r} platform, but its hardware is "
                        f"not available in this process: {probe.reason}. Select a platform that "
                        f"is present, or unset {var} to auto-detect. Available names: "
                        f"{self._available_text()}.",
                    )
            return self._builtin(lowered, trace, how)
        matches = [ep for ep in eps if ep.name == requested]
        if not matches:
            import difflib  # only on this error path

            close = difflib.get_close_matches(
                requested, [ep.name for ep in eps] + list(RESERVED_NAMES), n=1
            )
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise trace.fail(
                PlatformNotFoundError,
                f"{how}: no platform named {requested!r} in namespace "
                f"{self.namespace.name!r}.{hint} Available: {self._available_text()}. "
                f"Install the platform's plugin package (e.g. 'pip install <package>'); it "
                f"must declare an entry point {requested} = 'module:activate' in group "
                f"{group!r}.",
            )
        if len(matches) > 1:
            raise self._duplicate_error(requested, matches, trace)
        ep = matches[0]
        outcome, _ = self._activate(ep, trace)
        if outcome.qualname is None:
            raise trace.fail(
                PlatformUnavailableError,
                f"{how}: {_ep_label(ep)} is installed, but activate() returned None: its "
                "hardware is not available in this process (driver, runtime or visible-device "
                f"settings). Check the device, or unset {var} to auto-detect.",
            )
        trace.step(f"plugin {ep.name!r} activated")
        cls = self._plugin_class(ep, outcome.qualname, trace)
        sel = PlatformSelection(
            ep.name, "plugin", outcome.qualname, ep.dist, ep.version, list(trace.path)
        )
        return sel, cls

    def _resolve_auto(self, trace: _Trace) -> tuple[PlatformSelection, type]:
        eps = self._entry_points()
        reserved = [ep for ep in eps if ep.name.lower() in RESERVED_NAMES]
        if reserved:
            raise self._reserved_error(reserved, trace)
        by_name: dict[str, list[EntryPointInfo]] = {}
        for ep in eps:
            by_name.setdefault(ep.name, []).append(ep)
        for name, group in by_name.items():
            if len(group) > 1:
                raise self._duplicate_error(name, group, trace)
        results = [(ep, *self._activate(ep, trace, strict=False)) for ep in eps]
        outcomes = [(ep, o) for ep, o, _ in results]
        failed = [(ep, o, e) for ep, o, e in results if o.outcome == "error"]
        if failed:
            ep, first, cause = failed[0]
            more = (
                f" ({len(failed) - 1} more plugin(s) failed too; see below)" if failed[1:] else ""
            )
            err = trace.fail(
                PlatformPluginError,
                f"{_ep_label(ep)} failed during auto-discovery: {first.error}.{more} "
                "Discovery stops instead of falling back to another platform, which would run "
                f"the job on the wrong hardware. Fix or uninstall {ep.dist}, or select a "
                f"platform with {self.namespace.config.platform_var}=<name> (then only that "
                "plugin is imported).",
            )
            raise err from cause
        active = [(ep, o) for ep, o in outcomes if o.outcome == "activated"]
        if len(active) > 1:
            listing = "; ".join(
                f"{ep.name!r} -> {o.qualname} ({ep.dist} {ep.version})" for ep, o in active
            )
            raise trace.fail(
                PlatformConflictError,
                f"{len(active)} platform plugins activated in namespace "
                f"{self.namespace.name!r}: {listing}. Set "
                f"{self.namespace.config.platform_var} to one of "
                f"{', '.join(repr(ep.name) for ep, _ in active)} to choose.",
            )
        if active:
            ep, outcome = active[0]
            assert outcome.qualname is not None
            trace.step(f"1 plugin activated: {ep.name!r}")
            cls = self._plugin_class(ep, outcome.qualname, trace)
            sel = PlatformSelection(
                ep.name, "plugin", outcome.qualname, ep.dist, ep.version, list(trace.path)
            )
            return sel, cls
        trace.step(f"0 of {len(eps)} plugin(s) activated")
        cfg = self.namespace.config
        cpu_engine = os.environ.get(cfg.cpu_engine_var, "").strip().lower()
        if cpu_engine in _TRUE:
            trace.step(f"{cfg.cpu_engine_var}={os.environ[cfg.cpu_engine_var].strip()}")
            return self._builtin("cpu", trace, "cpu engine")
        for name in _AUTO_ORDER:
            if self._probe(name, trace).available:
                trace.step(f"{name} available")
                return self._builtin(name, trace, "probe")
        trace.step("no accelerator found")
        return self._builtin("base", trace, "fallback")

    def _activate(
        self, ep: EntryPointInfo, trace: _Trace, strict: bool = True
    ) -> tuple[_Candidate, BaseException | None]:
        """Load and call one ``activate()``; strict: raise, else record the error."""
        outcome = _Candidate(ep, "error")
        trace.candidates.append(outcome)
        exc: BaseException | None = None
        try:
            fn = _metadata.load_entry_point(ep)
        except Exception as e:
            exc = e
            outcome.error = f"importing the entry point raised {_exc_text(e)}"
        else:
            if not callable(fn):
                outcome.error = f"the entry point is a {type(fn).__name__}, not a callable"
            else:
                try:
                    result = fn()
                except Exception as e:
                    exc = e
                    outcome.error = f"activate() raised {_exc_text(e)}"
                else:
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
        if outcome.outcome == "error":
            if logger.isEnabledFor(DEBUG):
                logger.debug("platform candidate %s", outcome.describe())
            if strict:
                err = trace.fail(
                    PlatformPluginError,
                    f"{_ep_label(ep)}: {outcome.error}. Fix or reinstall {ep.dist}; a broken "
                    "platform plugin is never skipped.",
                )
                raise err from exc
        return outcome, exc

    def _plugin_class(self, ep: EntryPointInfo, qualname: str, trace: _Trace) -> type[Platform]:
        base = self._base_class(trace)
        label = _ep_label(ep)
        try:
            cls = pkgutil.resolve_name(qualname)
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
                f"({_exc_text(exc)}). Return the platform class as 'package.module.Class'.",
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise trace.fail(
                PlatformPluginError,
                f"{label}: activate() returned {qualname!r}, which is {cls!r}, not a subclass "
                f"of the namespace's platform base {base.__module__}.{base.__qualname__}. "
                f"Platforms of namespace {self.namespace.name!r} must subclass it.",
            )
        in_tree = cls.__module__.startswith("spawnkit.platforms.")
        if not in_tree and getattr(cls, "_enum", None) is not PlatformEnum.OOT:
            raise trace.fail(
                PlatformPluginError,
                f"{label}: {cls.__module__}.{cls.__qualname__} is an out-of-tree platform but "
                f"its _enum is {getattr(cls, '_enum', None)!r}; declare "
                "`_enum = PlatformEnum.OOT` (is_cuda() etc. would otherwise lie).",
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

    def _reserved_error(self, eps: list[EntryPointInfo], trace: _Trace) -> PlatformError:
        listing = "; ".join(_ep_label(ep) for ep in eps)
        return trace.fail(
            PlatformPluginError,
            f"platform entry-point names {sorted({ep.name for ep in eps})} are reserved for "
            f"spawnkit's built-ins ({', '.join(RESERVED_NAMES)}): {listing}. Rename the entry "
            "point in the plugin's pyproject.toml and reinstall it.",
        )

    def _duplicate_error(
        self, name: str, eps: list[EntryPointInfo], trace: _Trace
    ) -> PlatformError:
        listing = "; ".join(f"{ep.value!r} from {ep.dist} {ep.version}" for ep in eps)
        return trace.fail(
            PlatformPluginError,
            f"{len(eps)} platform entry points are named {name!r} in group "
            f"{eps[0].group!r}: {listing}. Names must be unique; uninstall one of the "
            "distributions or rename its entry point.",
        )

    # --------------------------------------------------------- the instance
    def current(self) -> Platform:
        """The current platform, resolved and instantiated once per process (thread-safe)."""
        once = self._current_once
        result = once.result if once.state is OnceState.DONE else once.run(self._build_current)
        if result is None:
            raise PlatformError(
                f"current platform of namespace {self.namespace.name!r} requested while it is "
                "being constructed (from the platform's __init__ or a plugin's activate()).",
                namespace=self.namespace.name,
            )
        return result

    def _build_current(self) -> Platform:
        selection, cls = self._select(None)
        try:
            instance = cls()
        except Exception as exc:
            what = (
                f"platform plugin {selection.name!r} ({selection.dist} {selection.version})"
                if selection.kind == "plugin"
                else f"{selection.kind} platform {selection.name!r}"
            )
            raise PlatformInitError(
                f"constructing {selection.qualname} for {what} raised {_exc_text(exc)}.",
                explanation=self._explanation_text(),
                namespace=self.namespace.name,
            ) from exc
        instance.__dict__["_selection"] = selection
        self._current = selection
        return instance

    def initialize(self) -> Platform:
        """Resolve the platform and run its ``init_backend()`` once; a failure is final."""
        once = self._init_once
        result = once.result if once.state is OnceState.DONE else once.run(self._run_init_backend)
        if result is None:  # re-entered from init_backend(): the instance exists
            return self.current()
        return result

    def _run_init_backend(self) -> Platform:
        platform = self.current()
        try:
            platform.init_backend()
        except Exception as exc:
            sel = self._current
            origin = f" from {sel.dist} {sel.version}" if sel is not None and sel.dist else ""
            raise PlatformInitError(
                f"{type(platform).__qualname__}.init_backend(){origin} failed in namespace "
                f"{self.namespace.name!r}: {_exc_text(exc)}. The platform is resolved but not "
                "usable; this failure is final for the process.",
                explanation=self._explanation_text(),
                namespace=self.namespace.name,
            ) from exc
        return platform

    def explain(self) -> PlatformExplanation:
        """What the last resolution did; runs one (errors recorded, not raised) if none ran."""
        return self._last_trace().explanation()

    def decision(self) -> dict[str, Any]:
        """How the last resolution chose, in plain fields, without building its explanation.

        Keys: ``winner`` (a :class:`PlatformSelection` or None), ``mode``,
        ``path``, ``selector_var`` and ``selector_value``: what a worker's
        report needs (``explain()`` has the rest).  Runs a resolution as
        ``explain()`` does if none ran.
        """
        trace = self._last_trace()
        return {
            "winner": trace.winner,
            "mode": trace.mode,
            "path": list(trace.path),
            "selector_var": trace.selector_var,
            "selector_value": trace.selector_value,
        }

    def _last_trace(self) -> _Trace:
        if self._trace is None:
            try:
                self.select()
            except PlatformError:
                pass
        assert self._trace is not None
        return self._trace

    def _explanation_text(self) -> str:
        return str(self._trace.explanation()) if self._trace is not None else ""


def _after_fork() -> None:
    for manager in list(_managers):
        manager._lock = threading.RLock()
        manager._local = threading.local()
        manager._selections = {}
        manager._current = None
        manager._trace = None


os.register_at_fork(after_in_child=_after_fork)


def __getattr__(name: str) -> Any:
    if name == "PlatformExplanation":  # in __all__; loaded on first use (see _Trace)
        from spawnkit.platforms.explanation import PlatformExplanation

        return PlatformExplanation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
