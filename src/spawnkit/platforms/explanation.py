"""What platform discovery decided and why: plain data for humans, JSON and pickling.

A wrong platform is the costliest silent failure (the job runs on the wrong hardware), so every
resolution records candidates, probes and path; plain types pickle without importing a plugin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from spawnkit.platforms._selection import PlatformSelection

__all__ = ["CandidateOutcome", "PlatformExplanation", "PlatformSelection", "ProbeOutcome"]


@dataclass
class CandidateOutcome:
    """One platform entry point and its ``outcome`` (activated, none, error or skipped)."""

    name: str
    value: str
    dist: str
    version: str
    outcome: str
    qualname: str | None = None
    error: str | None = None

    def describe(self) -> str:
        source = f"{self.name!r} = {self.value!r} ({self.dist} {self.version})"
        if self.outcome == "activated":
            return f"{source}: activated -> {self.qualname}"
        if self.outcome == "none":
            return f"{source}: activate() returned None (hardware not available)"
        if self.outcome == "skipped":
            return f"{source}: not imported (another platform was selected by name)"
        return f"{source}: ERROR {self.error}"


@dataclass
class ProbeOutcome:
    """A built-in platform's hardware check; ``failed``: the probe raised (no answer)."""

    name: str
    available: bool
    reason: str
    failed: bool = False

    def describe(self) -> str:
        state = "FAILED" if self.failed else "available" if self.available else "absent"
        return f"{self.name}: {state} ({self.reason})"


@dataclass
class PlatformExplanation:
    """Everything one resolution looked at; ``str()`` for people, ``to_dict()`` for JSON."""

    namespace: str
    group: str
    selector_var: str
    selector_value: str | None
    cpu_engine_var: str
    cpu_engine_value: str | None
    mode: str = "auto"
    requested: str | None = None
    candidates: list[CandidateOutcome] = field(default_factory=list)
    probes: list[ProbeOutcome] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    winner: PlatformSelection | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return self.render()

    def render(self, *, error: bool = True) -> str:
        """The text for people; ``error=False`` for an exception that already starts with it."""
        lines = [
            f"Platform discovery for namespace {self.namespace!r} "
            f"(entry-point group {self.group!r}):",
            f"  {self.selector_var}={self.selector_value or '<unset>'}  "
            f"{self.cpu_engine_var}={self.cpu_engine_value or '<unset>'}  mode: {self.mode}",
        ]
        if self.candidates:
            lines.append("  candidates:")
            lines.extend(f"    - {c.describe()}" for c in self.candidates)
        else:
            lines.append("  candidates: none installed")
        if self.probes:
            lines.append("  built-in probes:")
            lines.extend(f"    - {p.describe()}" for p in self.probes)
        if self.path:
            lines.append("  path: " + " -> ".join(self.path))
        if self.winner is not None:
            w = self.winner
            origin = f" from {w.dist} {w.version}" if w.dist else ""
            lines.append(f"  winner: {w.kind} {w.name!r} ({w.qualname}{origin})")
        if self.error and error:
            lines.append(f"  error: {self.error.splitlines()[0]}")
        return "\n".join(lines)
