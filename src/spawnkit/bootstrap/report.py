"""``BootstrapReport``: what a worker's bootstrap did, in plain types only.

The report is sent to the parent and shown by tools, so it must unpickle in
a process that has neither the plugins nor the platform installed: every
field is a builtin container of builtins.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BootstrapReport"]


@dataclass
class BootstrapReport:
    """One worker's bootstrap: where it ran, what it chose, loaded and patched, and how long.

    ``platform`` has ``name``, ``kind`` and ``how`` (how it was chosen) and,
    where known, ``qualname``, ``dist`` and ``version``.  Each entry of
    ``plugins`` has ``name``, ``value``, ``dist``, ``version``, ``seconds`` and
    ``imported`` (modules its code imported while loading) and
    ``outside_registry`` (what its code changed by hand: ``module:attr`` set,
    replaced or deleted in a module imported before it ran, and
    ``sys.modules:name`` for a module it put into ``sys.modules`` itself).  ``hooks`` maps a
    target to its hooks as ``{"type", "hook", "source", "state", "reason"}``
    dicts: every registration, applied or not (``state`` is ``applied``,
    ``pending``, ``skipped``, ``failed``, ``provided`` or ``partial``; ``reason`` says why).
    A ``partial`` hook (one a known reference still bypasses: a tuple item, a
    default argument, a class refusing ``setattr``) also has ``unrebound``
    (those references).  ``guard`` has
    ``policy``, ``armed``, ``violations`` (each with ``rebound_by_sweep``: True
    when the stale-binding sweep rebinds every holder it found, so the finding
    was only a warning) and ``plugin_imports``.  ``node`` is
    the cluster node the rank ran on, where a launcher knows one (Ray's node
    id); on one machine several nodes share ``host``, so only the node tells
    ranks apart.

    ``stage_seconds`` holds the stages this process ran.  A worker forked from
    a pre-bootstrapped warm-start server did not run platform, plugin and hook
    stages itself: ``inherited`` then has ``server_pid``, ``server_started``
    (Unix time), ``stages`` (those stages with the server's own timings) and
    ``preload_seconds``.  ``stage_detail`` splits a stage where the split
    matters: ``apply_hooks`` into ``import_targets`` (importing the target
    modules, often a heavy framework) and ``patch``.

    ``stage_starts`` (each stage's start), each plugin's ``started`` and
    ``target_imports`` (``[module, start, end]`` for each hook-target module
    the apply stage imported) are ``time.monotonic()`` readings: the clock the
    launcher shares, from which ``trace=`` draws this rank's spans without the
    worker doing anything more when tracing is off.

    ``unsent`` is empty unless a field held a value that could not be pickled
    on its way to the parent: that field then arrives empty, and ``unsent``
    maps its name to the reason, so an empty field is never mistaken for
    "nothing loaded".
    """

    rank: int
    pid: int
    host: str
    namespace: str
    entry: str = ""
    world_size: int = 1
    local_rank: int = 0
    platform: dict[str, Any] = field(default_factory=dict)
    plugins: list[dict[str, Any]] = field(default_factory=list)
    failed_plugins: list[dict[str, Any]] = field(default_factory=list)
    skipped_plugins: list[dict[str, Any]] = field(default_factory=list)
    hooks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    guard: dict[str, Any] = field(default_factory=dict)
    node: str = ""
    inherited: dict[str, Any] = field(default_factory=dict)
    stage_detail: dict[str, dict[str, float]] = field(default_factory=dict)
    unsent: dict[str, str] = field(default_factory=dict)
    stage_starts: dict[str, float] = field(default_factory=dict)
    target_imports: list[list[Any]] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return sum(self.stage_seconds.values())

    def sendable(self, dumps: Any) -> BootstrapReport:
        """A copy whose fields all pickle with ``dumps``; each field that does not is emptied
        and named in ``unsent`` with the reason."""
        unsent = dict(self.unsent)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            try:
                dumps(value)
            except Exception as exc:
                # The reason names pickling itself: the exception alone may not (3.13 says
                # "AttributeError: Can't get local object ..." for a lambda).
                unsent[f.name] = f"could not be pickled: {type(exc).__name__}: {exc}"
                value = f.default_factory() if callable(f.default_factory) else f.default
            values[f.name] = value
        values["unsent"] = unsent
        return BootstrapReport(**values)

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as plain dicts and lists (JSON-serialisable)."""
        return dataclasses.asdict(self)

    def _detail(self, stage: str) -> str:
        parts = self.stage_detail.get(stage)
        if not parts:
            return ""
        return " (" + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in parts.items()) + ")"

    def _hooks_line(self) -> str:
        counts: dict[str, int] = {}
        for hooks in self.hooks.values():
            for h in hooks:
                state = h.get("state", "applied")
                counts[state] = counts.get(state, 0) + 1
        states = ", ".join(f"{n} {state}" for state, n in counts.items())
        return f"  hooks: {len(self.hooks)} target(s)" + (f" ({states})" if states else "")

    def format(self) -> str:
        """A human summary, for logs and ``spawnkit doctor``."""
        lines = [
            f"bootstrap of rank {self.rank}/{self.world_size} (pid {self.pid} on {self.host}"
            f"{', node ' + self.node if self.node else ''}), "
            f"namespace {self.namespace!r}, entry {self.entry or '<by value>'}"
        ]
        p = self.platform
        if p:
            origin = f" from {p['dist']} {p.get('version', '')}".rstrip() if p.get("dist") else ""
            lines.append(f"  platform: {p.get('name')} ({p.get('kind')}{origin}); {p.get('how')}")
        lines.append(f"  plugins loaded: {len(self.plugins)}")
        for plug in self.plugins:
            extra = f", imported {', '.join(plug['imported'])}" if plug.get("imported") else ""
            lines.append(
                f"    {plug['name']} = {plug.get('value', '')} "
                f"({plug.get('dist')} {plug.get('version')}, "
                f"{plug.get('seconds', 0.0) * 1e3:.2f} ms{extra})"
            )
            if plug.get("outside_registry"):
                lines.append(
                    "      changed outside the hook registry (no ledger, no undo, no guard): "
                    + ", ".join(plug["outside_registry"])
                )
        for plug in self.failed_plugins:
            lines.append(f"    FAILED (lenient) {plug['name']}: {plug.get('error', '')}")
        for plug in self.skipped_plugins:
            lines.append(f"    skipped {plug['name']}: {plug.get('reason', '')}")
        lines.append(self._hooks_line())
        for target, hooks in self.hooks.items():
            lines.append(f"    {target}: " + "; ".join(_hook_text(h) for h in hooks))
            reason = next((h["reason"] for h in hooks if h.get("state") == "partial"), "")
            if reason:
                lines.append(f"      PARTIAL: {reason}")
        if self.guard:
            lines.append(
                f"  import guard: policy {self.guard.get('policy')}, "
                f"{'armed' if self.guard.get('armed') else 'not armed'}, "
                f"{len(self.guard.get('violations', []))} violation(s)"
            )
            for v in self.guard.get("violations", []):
                repaired = " (warning only: the sweep rebinds every holder it found)"
                lines.append(
                    f"    early import of {v['module']} at {v.get('first_import')}"
                    + (repaired if v.get("rebound_by_sweep") else "")
                )
            for a in self.guard.get("plugin_imports", []):
                lines.append(f"    allowed: {a['module']} imported by {a.get('plugin')}")
        if self.stage_seconds:
            timing = ", ".join(
                f"{k} {v * 1e3:.2f} ms{self._detail(k)}" for k, v in self.stage_seconds.items()
            )
            lines.append(f"  stages: {timing} (total {self.total_seconds * 1e3:.2f} ms)")
        for name, why in self.unsent.items():
            lines.append(f"  NOT SENT: field {name!r}: {why}")
        inh = self.inherited
        if inh:
            import time

            when = time.strftime("%H:%M:%S", time.localtime(inh.get("server_started", 0.0)))
            timing = ", ".join(
                f"{k} {v * 1e3:.2f} ms{self._detail(k)}" for k, v in inh.get("stages", {}).items()
            )
            lines.append(
                f"  inherited from warm-start server pid {inh.get('server_pid')} "
                f"(bootstrapped at {when}): {timing}"
            )
        return "\n".join(lines)


def _hook_text(hook: dict[str, str]) -> str:
    """``AFTER from plugin 'p'``, with its state and reason unless simply applied."""
    text = f"{hook.get('type')} from {hook.get('source')}"
    state, reason = hook.get("state", "applied"), hook.get("reason", "")
    if state == "partial":
        return text + ": partial"  # the reason follows on its own PARTIAL line
    if state != "applied" or reason:
        text += f": {state}" + (f" ({reason})" if reason else "")
    return text
