"""What every platform decision keeps while it checks (``Trace``), and the checks every row runs.

A worker whose platform was pinned by its launcher decides through these alone: the trace, the
namespace's platform base, and the refusal of a platform name two distributions declare.  The
checks of a candidate that is imported or activated (a plugin's ``activate()``, its class,
a built-in composed with the base, the errors of the rows that found none or several) are in
``_checks``, imported by the rows that run them (issue #23: 26 kB of bytecode a pinned
worker never ran).
"""

from __future__ import annotations

import os

import spawnkit._reference as _reference
from spawnkit._compat import TYPE_CHECKING
from spawnkit._metadata import EntryPointInfo
from spawnkit.errors import PlatformError, PlatformPluginError
from spawnkit.platforms.interface import Platform

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.platforms._selection import PlatformSelection
    from spawnkit.platforms.explanation import CandidateOutcome, PlatformExplanation
    from spawnkit.spec import NamespaceConfig

__all__ = [
    "Candidate", "Trace", "base_class", "duplicate_error", "ep_label", "exc_text",
    "refuse_duplicates",
]  # fmt: skip


def ep_label(ep: EntryPointInfo) -> str:
    return (
        f"platform plugin {ep.name!r} (entry point {ep.value!r} in group {ep.group!r}, "
        f"distribution {ep.dist} {ep.version})"
    )


def exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Candidate:
    """One candidate's outcome; a ``CandidateOutcome`` is built from it only when asked for."""

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


class Trace:
    """Records what one resolution looked at; errors are made through it so they carry it."""

    def __init__(self, cfg: NamespaceConfig, mode: str, requested: str | None) -> None:
        self.namespace = cfg.name
        self.group = cfg.platform_group
        self.plugin_group = cfg.plugin_group
        self.selector_var = cfg.platform_var
        self.selector_value = os.environ.get(cfg.platform_var)
        self.cpu_engine_var = cfg.cpu_engine_var
        self.cpu_engine_value = os.environ.get(cfg.cpu_engine_var)
        self.mode = mode
        self.requested = requested
        self.candidates: list[Candidate] = []
        self.probes: list[tuple[str, bool, str, bool]] = []
        #: What the last built-in probe raised (None: it answered).
        self.probe_error: Exception | None = None
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


def base_class(cfg: NamespaceConfig, trace: Trace) -> type[Platform]:
    """The namespace's platform base (``platform_base=``), checked to be a ``Platform``."""
    qualname = cfg.platform_base
    if not qualname:
        return Platform
    try:
        base: Any = _reference.resolve_name(qualname)
    except Exception as exc:
        raise trace.fail(
            PlatformPluginError,
            f"the platform base {qualname!r} of namespace {cfg.name!r} does not "
            f"import ({exc_text(exc)}). The engine declaring the namespace must pass an "
            "importable Platform subclass as platform_base=.",
        ) from exc
    if not (isinstance(base, type) and issubclass(base, Platform)):
        raise trace.fail(
            PlatformPluginError,
            f"the platform base {qualname!r} of namespace {cfg.name!r} is "
            f"{base!r}, not a subclass of spawnkit.platforms.Platform.",
        )
    return base


def duplicate_error(name: str, eps: list[EntryPointInfo], trace: Trace) -> PlatformError:
    listing = "; ".join(f"{ep.value!r} from {ep.dist} {ep.version}" for ep in eps)
    return trace.fail(
        PlatformPluginError,
        f"{len(eps)} platform entry points are named {name!r} in group "
        f"{eps[0].group!r}: {listing}. Names must be unique, whichever platform "
        f"{trace.selector_var} selects: which distribution the name stands for, and so "
        "which of their general plugins the platform rule leaves out, would depend on the "
        "order of sys.path. Uninstall one of the distributions or rename its entry point.",
    )


def refuse_duplicates(eps: tuple[EntryPointInfo, ...], trace: Trace) -> None:
    """A platform name two distributions declare, in every row of the table (metadata only).

    Refused only where the name was at stake (auto-discovery, or the name selected), a
    launch on another platform ran: the rule that leaves out the general plugins of every
    distribution shipping an unselected platform kept the first of the two by ``sys.path``
    (directory listing) order, so the other's plugins loaded on the wrong device, unsaid.
    """
    by_name: dict[str, list[EntryPointInfo]] = {}
    for ep in eps:
        by_name.setdefault(ep.name, []).append(ep)
    for name, group in by_name.items():
        if len(group) > 1:
            raise duplicate_error(name, group, trace)
