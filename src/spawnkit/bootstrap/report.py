"""``BootstrapReport``: what a worker's bootstrap did, in plain types only, and its building.

The report is sent to the parent and shown by tools, so it must unpickle in
a process that has neither the plugins nor the platform installed: every
field is a builtin container of builtins.  The building functions read a
namespace's platforms, plugins and hooks; they import nothing at module level
so the parent can unpickle a report cheaply.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit.spec._record import as_dict, default, field, field_names, record

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.namespace import Namespace

__all__ = ["BootstrapReport", "Who"]


class Who(NamedTuple):
    """The spec's fields a report repeats.  Never the spec: it carries the payload, which
    nothing here may reach (``tests/test_walks.py`` counts the files that can)."""

    rank: int
    entry: str
    world_size: int
    local_rank: int
    pinned_platform: str | None


@record
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
    default argument, a module-level partial or bound method, a class refusing
    ``setattr``) also has ``unrebound``
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
        for name in field_names(BootstrapReport):
            value = getattr(self, name)
            try:
                dumps(value)
            except Exception as exc:
                # The reason names pickling itself: the exception alone may not (3.13 says
                # "AttributeError: Can't get local object ..." for a lambda).
                unsent[name] = f"could not be pickled: {type(exc).__name__}: {exc}"
                value = default(BootstrapReport, name)
            values[name] = value
        values["unsent"] = unsent
        return BootstrapReport(**values)

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as plain dicts and lists (JSON-serialisable)."""
        return as_dict(self)  # type: ignore[no-any-return]

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
        lines += self._plugin_lines()
        lines.append(self._hooks_line())
        for target, hooks in self.hooks.items():
            lines.append(f"    {target}: " + "; ".join(_hook_text(h) for h in hooks))
            reason = next((h["reason"] for h in hooks if h.get("state") == "partial"), "")
            if reason:
                lines.append(f"      PARTIAL: {reason}")
        lines += self._guard_lines()
        if self.stage_seconds:
            lines.append(
                f"  stages: {self._timing(self.stage_seconds)} "
                f"(total {self.total_seconds * 1e3:.2f} ms)"
            )
        lines += [f"  NOT SENT: field {name!r}: {why}" for name, why in self.unsent.items()]
        inh = self.inherited
        if inh:
            import time

            when = time.strftime("%H:%M:%S", time.localtime(inh.get("server_started", 0.0)))
            lines.append(
                f"  inherited from warm-start server pid {inh.get('server_pid')} "
                f"(bootstrapped at {when}): {self._timing(inh.get('stages', {}))}"
            )
        return "\n".join(lines)

    def _timing(self, stages: dict[str, float]) -> str:
        return ", ".join(f"{k} {v * 1e3:.2f} ms{self._detail(k)}" for k, v in stages.items())

    def _plugin_lines(self) -> list[str]:
        lines = [f"  plugins loaded: {len(self.plugins)}"]
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
        lines += [
            f"    FAILED (lenient) {p['name']}: {p.get('error', '')}" for p in self.failed_plugins
        ]
        lines += [f"    skipped {p['name']}: {p.get('reason', '')}" for p in self.skipped_plugins]
        return lines

    def _guard_lines(self) -> list[str]:
        if not self.guard:
            return []
        g = self.guard
        lines = [
            f"  import guard: policy {g.get('policy')}, "
            f"{'armed' if g.get('armed') else 'not armed'}, "
            f"{len(g.get('violations', []))} violation(s)"
        ]
        repaired = " (warning only: the sweep rebinds every holder it found)"
        for v in g.get("violations", []):
            lines.append(
                f"    early import of {v['module']} at {v.get('first_import')}"
                + (repaired if v.get("rebound_by_sweep") else "")
            )
        for a in g.get("plugin_imports", []):
            lines.append(f"    allowed: {a['module']} imported by {a.get('plugin')}")
        return lines


def _hook_text(hook: dict[str, str]) -> str:
    """``AFTER from plugin 'p'``, with its state and reason unless simply applied."""
    text = f"{hook.get('type')} from {hook.get('source')}"
    state, reason = hook.get("state", "applied"), hook.get("reason", "")
    if state == "partial":
        return text + ": partial"  # the reason follows on its own PARTIAL line
    if state != "applied" or reason:
        text += f": {state}" + (f" ({reason})" if reason else "")
    return text


# ------------------------------------------------------------------ building
def _plain(obj: Any, *drop: str) -> dict[str, Any]:
    """A plugin record as a dict of builtins (tuples become lists), less ``drop``."""
    return {
        k: list(v) if isinstance(v, tuple) else v for k, v in as_dict(obj).items() if k not in drop
    }


def shared_parts(namespace: Namespace, pinned_platform: str | None) -> dict[str, Any]:
    """The parts of a report decided by platform, plugins and hooks (identical per rank)."""
    report = namespace.plugins.report
    return {
        "platform": platform_info(namespace, pinned_platform),
        "plugins": [_plain(p) for p in report.loaded],
        "failed_plugins": [_plain(f, "traceback_text") for f in report.failed],
        "skipped_plugins": [
            {"name": s.name, "dist": s.dist, "status": s.status, "reason": s.reason}
            for s in report.skipped
        ],
        "hooks": hooks_info(namespace),
    }


#: In a warm-start server (and so in its workers): ``shared_parts()`` as the server made them,
#: and the same parts pickled once; see ``to_send``.
_shared_pickled: tuple[dict[str, Any], bytes] | None = None


def keep_pickled(shared: dict[str, Any]) -> None:
    """Pickle a server's shared parts once, for every worker's report to send as they are."""
    global _shared_pickled
    import pickle

    try:
        _shared_pickled = (shared, pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # a part that does not pickle: each worker pickles (or reports) its own
        _shared_pickled = None


def to_send(report: BootstrapReport) -> Any:
    """What a worker puts in its READY: ``report``, or, while every shared field is still the
    very object its warm-start server pickled, a stand-in that unpickles as ``report`` from
    the server's bytes (pickling 100 hook rows cost each warm worker ~0.3 ms before its entry
    could run).  Only the READY goes this way: a report pickled later (the entry sending
    ``current_report()`` somewhere) is pickled as it is then, changes included."""
    kept = _shared_pickled
    if kept is None or not all(getattr(report, k) is v for k, v in kept[0].items()):
        return report
    return _AsServerPickled(report, kept)


class _AsServerPickled:
    __slots__ = ("blob", "rest")

    def __init__(self, report: BootstrapReport, kept: tuple[dict[str, Any], bytes]) -> None:
        self.blob = kept[1]
        self.rest = {
            k: getattr(report, k) for k in field_names(BootstrapReport) if k not in kept[0]
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_with_shared, (self.blob, self.rest))


def _with_shared(blob: bytes, rest: dict[str, Any]) -> BootstrapReport:
    import pickle

    return BootstrapReport(**pickle.loads(blob), **rest)


def build(
    who: Who,
    namespace: Namespace,
    *,
    pid: int,
    host: str,
    stage_seconds: dict[str, float],
    stage_starts: dict[str, float],
    target_imports: list[tuple[str, float, float]],
    guard: dict[str, Any],
    stage_detail: dict[str, dict[str, float]],
    inherited: dict[str, Any] | None,
) -> BootstrapReport:
    """A worker's report as it stands now; ``inherited``: its warm-start server's record."""
    shared: dict[str, Any]
    if inherited is not None:
        # The server's objects themselves: this process is a fork, so they are its own copy,
        # and the READY sends them as the server pickled them (``to_send``).
        shared = dict(inherited["shared"])
        # The server's hook report, unless this worker changed its hooks since (a late
        # registration, an on_import target applied) or its own imports replaced a target
        # (the guard lists it): status() of a hundred hooks costs a forked worker ~0.5 ms,
        # copy-on-write faults included.
        version = inherited.get("hooks_version")
        changed = version is None or version != namespace.hooks._settled_version()
        if changed or guard.get("stale_holders"):
            shared["hooks"] = hooks_info(namespace)
    else:
        shared = shared_parts(namespace, who.pinned_platform)
    report = BootstrapReport(
        rank=who.rank,
        pid=pid,
        host=host,
        namespace=namespace.name,
        entry=who.entry,
        world_size=who.world_size,
        local_rank=who.local_rank,
        **shared,
        stage_seconds=dict(stage_seconds),
        stage_starts=dict(stage_starts),
        target_imports=[list(t) for t in target_imports],
        guard=guard,
        stage_detail={**(inherited or {}).get("stage_detail", {}), **stage_detail},
    )
    if inherited is not None:
        drop = ("identity", "stage_detail", "shared", "hooks_version")
        report.inherited = {k: v for k, v in inherited.items() if k not in drop}
    return report


def platform_info(namespace: Namespace, pinned: str | None) -> dict[str, Any]:
    """Which platform runs, and how it was chosen."""
    try:
        # decision(), not explain(): a worker that succeeds never builds the explanation
        decision = namespace.platforms.decision()
    except Exception as exc:  # the report must not fail the bootstrap
        return {"name": "?", "kind": "?", "how": f"explain() failed: {exc}"}
    winner = decision.get("winner")
    mode = decision.get("mode", "")
    path = " -> ".join(decision.get("path") or [])
    if pinned is not None:
        how = f"pinned by the parent (ProcessSpec.platform={pinned!r})"
    else:
        var = decision.get("selector_var", "")
        value = decision.get("selector_value")
        how = f"{var}={value!r}" if value else "auto-detected in the worker"
    if mode or path:
        how += f"; mode {mode}" + (f": {path}" if path else "")
    if winner is None:
        return {"name": "?", "kind": "?", "how": how}
    fields = ("name", "kind", "qualname", "dist", "version")
    return {**{f: getattr(winner, f) for f in fields}, "how": how}


def hooks_info(namespace: Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every registration by target, with its state and reason (not only the applied ones).

    A ``partial`` entry also lists, as ``unrebound``, the references that
    still call the original, so a reader need not parse the reason.
    """
    hooks: dict[str, list[dict[str, Any]]] = {}
    for row in namespace.hooks.status():
        hooks.setdefault(row.target, []).append(row.to_dict())
    by_target: dict[str, list[str]] = {}
    for h in namespace.hooks.stale_holders():
        by_target.setdefault(h["target"], []).append(f"{h['module']}.{h['name']} ({h['kind']})")
    for target, where in by_target.items():
        for entry in hooks.get(target, []):
            if entry.get("state") == "partial":
                entry["unrebound"] = list(where)
    return hooks
