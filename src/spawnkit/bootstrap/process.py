"""``bootstrap_process(spec)``: the work of each stage of a worker's bootstrap.

The order, and the reason for each step, is ``stages.STAGES``.  ``Bootstrapper``
has one method per row and refuses a stage run early, twice or after a
failure (``BootstrapOrderError``), so an engine driving the stages itself
cannot get the order wrong either.  A failing stage raises a picklable
``StageError`` (also its cause's type for a spawnkit cause, so ``except
PluginError`` still works) carrying stage, rank, pid, host and traceback; the
entry's own exceptions pass unchanged.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import socket
import time
import warnings
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager

import spawnkit._collector as _collector
from spawnkit import _metadata
from spawnkit._compat import TYPE_CHECKING
from spawnkit._names import qualified_name
from spawnkit.bootstrap import _entry, _hooked_ctors, _plain_children, guard
from spawnkit.bootstrap import report as reports
from spawnkit.bootstrap.report import BootstrapReport
from spawnkit.bootstrap.stages import SHARED_STAGES, STAGE_ORDER, STAGES, Stage, StageListener
from spawnkit.errors import (
    BootstrapOrderError,
    HookConflictError,
    HookConflictWarning,
    SpawnkitError,
    StageError,
    stage_error_type,
)
from spawnkit.hooks._slots import atexit_kept
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from typing import Any, TypeVar

    from spawnkit.bootstrap.guard import GuardResult
    from spawnkit.namespace import Namespace
    from spawnkit.spec import ProcessSpec
    from spawnkit.spec.payload import Payload
else:
    from spawnkit._compat import TypeVar

__all__ = [
    "Bootstrapper", "boot_identity", "bootstrap_process", "current_report", "current_spec",
    "note_rankless_reads", "take_rankless_reads",
]  # fmt: skip

_UNSET: Any = object()
_current_spec: ProcessSpec | None = None
_current_report: BootstrapReport | None = None
_PARENT_DEATH_MODULE = "spawnkit.bootstrap._parent_death"
_R = TypeVar("_R")

# Set in a warm-start server by ``Bootstrapper.hand_down()``; a worker forked from it
# inherits these and skips the stages they record (see ``Bootstrapper._stage``).
_server_boot: dict[str, Any] | None = None
_server_guard: GuardResult | None = None


def current_spec() -> ProcessSpec | None:
    """The spec this worker was started with (rank, world size, ...), for the entry function."""
    if _rankless is not None and _current_spec is None:
        _note_rankless_read()
    return _current_spec


# In a warm-start server, from its bootstrap until it forks: who called ``current_spec()`` there
# (the step, and the plugin whose callback ran), for the launcher to warn about (a cold
# worker's plugin gets its rank; the server's gets None, and decides for every rank at once).
_rankless: list[tuple[str, str]] | None = None


def _note_rankless_read() -> None:
    from spawnkit.hooks.types import current_plugin_source

    source = current_plugin_source.get()
    who = (guard.current_step(), "" if source is None else str(source))
    if _rankless is not None and who not in _rankless:
        _rankless.append(who)


def note_rankless_reads() -> None:
    """In a warm server that bootstraps no plugin (``WARM_BOOTSTRAP=worker``) but imports the
    preloads, once, for every rank: who asks ``current_spec()`` there is noted all the same."""
    global _rankless
    _rankless = []


def take_rankless_reads() -> list[tuple[str, str]]:
    """``(step, plugin)`` of each ``current_spec()`` call this warm server answered with None;
    the server calls it once, before it forks: its workers have a rank and record nothing."""
    global _rankless
    found, _rankless = list(_rankless or ()), None
    return found


def current_report() -> BootstrapReport | None:
    """This worker's bootstrap report; set right before the entry is called."""
    return _current_report


def _set_current(spec: ProcessSpec | None, report: BootstrapReport | None) -> None:
    global _current_spec, _current_report
    _current_spec, _current_report = spec, report


def _picklable(exc: BaseException) -> bool:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


#: The rows up to and including ``apply_hooks``: what ``through_hooks()`` runs.
_THROUGH_HOOKS = STAGE_ORDER.index(Stage.HOOKS) + 1

#: Each row's stage by the name of its method, and back.
_STAGE_OF: dict[str, Stage] = {row.method: row.stage for row in STAGES}


def _staged(work: Callable[[Bootstrapper], _R]) -> Callable[[Bootstrapper], _R]:
    """``work`` run as the stage ``STAGES`` names it for: in order, timed, its failure typed."""
    stage = _STAGE_OF[work.__name__]  # a method missing from the table fails at import

    def run_stage(self: Bootstrapper) -> _R:
        result: _R = self._stage(stage, lambda: work(self))
        if stage is Stage.RESOLVE_ENTRY:
            self._ready(result)  # type: ignore[arg-type]
        return result

    run_stage.__name__, run_stage.__qualname__ = work.__name__, work.__qualname__
    run_stage.__doc__ = work.__doc__
    return run_stage


def _vouched(result: GuardResult | None) -> bool:
    """No target module was imported before plugin loading began, so no module imported by
    then can hold an original: the stale-binding sweep skips them.  A target module another
    namespace's hooks imported (``imported_by``) may be held since: swept, not vouched."""
    return (
        result is not None
        and result.policy != "off"
        and not result.violations
        and not any(found.get("imported_by") for found in result.plugin_imports)
    )


def _plugins_for_node(namespace: Namespace, spec: ProcessSpec) -> Any:
    """The namespace's plugin manager, once a rank whose node decides its platform has been
    checked against the launcher's platform's plugins (``_node_platform``; imported only for
    such a rank: torchrun across nodes, ``spawn_spec_on_ray``)."""
    if spec.platform is None and spec._control.detected_platform is not None:
        from spawnkit.bootstrap._node_platform import check_node_platform

        check_node_platform(namespace, spec)
    return namespace.plugins


class Bootstrapper:
    """The staged bootstrap of one worker; one method per row of ``STAGES``, run in its order.

    ``run()`` walks the table; tests and engines that need to interleave
    their own work call the stage methods one by one.
    """

    def __init__(
        self, spec: ProcessSpec, *, listener: StageListener | None = None, server: bool = False
    ) -> None:
        from spawnkit.namespace import Namespace, default_namespace

        self.spec = spec
        self.listener = listener
        self.namespace: Namespace = (
            Namespace.from_config(spec.namespace) if spec.namespace else default_namespace()
        )
        self.rank = spec.rank
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.stage_seconds: dict[str, float] = {}
        # Start times on CLOCK_MONOTONIC, the clock the launcher's trace shares (spawnkit._trace).
        self.stage_starts: dict[str, float] = {}
        self.target_imports: list[tuple[str, float, float]] = []
        self.guard_result: GuardResult | None = None
        # False for a process that ran its own code before bootstrapping (bootstrap_here):
        # objects and closures made there may hold originals no sweep can see.
        self.sweep_repairs_guard = True
        self.freeze_gc = False  # see _gc_paused: set by child_main and a context's child
        self.payload_obj: Any = _UNSET
        self.entry: Callable[..., Any] | None = None
        self.report: BootstrapReport | None = None
        self._entry_from_payload: Any = _UNSET
        self._next = 0
        self._running: Stage | None = None
        self._failed: Stage | None = None
        self.stage_detail: dict[str, dict[str, float]] = {}
        # A pre-bootstrapped server's record, when this worker was forked from one.
        self.inherited: dict[str, Any] | None = _server_boot
        # server=True: a warm-start server, which runs only the shared stages, for every rank
        # (parent death is each forked worker's own), then ``hand_down()``.
        self._serving = server
        self._server_started = time.time()
        if server:
            self._enter(server=True)
            self._next = STAGE_ORDER.index(SHARED_STAGES[0])

    # ------------------------------------------------------------ ordering
    @property
    def next_stage(self) -> Stage | None:
        """The stage that may run now (``None`` once the entry ran)."""
        return STAGE_ORDER[self._next] if self._next < len(STAGE_ORDER) else None

    def _order_error(self, stage: Stage, message: str) -> BootstrapOrderError:
        expected = self.next_stage.value if self.next_stage else ""
        return BootstrapOrderError(
            message, stage=stage.value, expected=expected, rank=self.rank, pid=self.pid,
            host=self.host,
        )  # fmt: skip

    def _stage(self, stage: Stage, action: Callable[[], Any]) -> Any:
        if (
            self.inherited is not None
            and stage in SHARED_STAGES
            and self.next_stage is stage
            and self._failed is None
        ):
            # Done once in the server this worker was forked from: nothing to run here.
            self._next += 1
            if stage is Stage.HOOKS:
                _phase.mark_hooks_applied()
            return None
        problem = _order_problem(stage, self._next, self._running, self._failed)
        if problem:
            raise self._order_error(stage, problem)
        self._running = stage
        name = stage.value  # an enum's value is a property: read once a stage
        if self.listener is not None:
            self.listener.stage_started(name)
        previous_step = guard.set_step(name)
        start = self.stage_starts[name] = time.monotonic()
        try:
            result = action()
        except BaseException as exc:
            self._failed = stage
            self._running = None
            guard.set_step(previous_step)
            if stage is Stage.ENTRY or not isinstance(exc, Exception):
                raise  # the entry's own errors (and interpreter exits) pass unchanged
            who = "the warm-start server" if self._serving else f"rank {self.rank}"
            err = _stage_error(stage, exc, self.rank, self.pid, self.host, who)
            if err is exc:
                raise
            raise err from exc
        seconds = time.monotonic() - start
        guard.set_step(previous_step)
        self._running = None
        self._next += 1
        self.stage_seconds[name] = seconds
        if self.listener is not None:
            self.listener.stage_finished(name, seconds)
        return result

    # -------------------------------------------------------------- stages
    # One method per row of STAGES, named there; ``@_staged`` runs its body as that stage.
    @_staged
    def arm_parent_death(self) -> None:
        """Apply ``spec.env``, mark this process a worker, and arm parent-death handling."""
        self._enter()
        if self.inherited is not None:
            self._check_inherited()
        if importlib.util.find_spec(_PARENT_DEATH_MODULE) is not None:
            module = importlib.import_module(_PARENT_DEATH_MODULE)
            spec, control = self.spec, self.spec._control  # its fields: the payload stays here
            module.arm(
                spec.run_id, spec.death_conn, spec.rank, control.parent_pid, control.pdeathsig
            )

    def _enter(self, *, server: bool = False) -> None:
        _apply_env(self.spec, forked=self.inherited is not None, server=server)
        _phase.enter_worker(self.namespace)
        # A server bootstraps for every rank at once: it has no rank (``current_spec()`` is
        # None there; who asked anyway is kept for the launcher: ``take_rankless_reads``).
        global _rankless
        _rankless = [] if server else None
        _set_current(None if server else self.spec, None)

    def _check_inherited(self) -> None:
        """A worker forked from a server must want exactly what the server bootstrapped."""
        boot = self.inherited or {}
        mine = boot_identity(self.spec)
        if boot.get("identity") != mine:
            raise BootstrapOrderError(
                f"this worker was forked from warm-start server pid {boot.get('server_pid')}, "
                "which was bootstrapped for another platform, plugin set, entry points or "
                "environment than this worker's spec asks for. Launch it through "
                "spawn_with_plugins(start_method='forkserver'), which picks the server by key."
            )
        self.guard_result = _server_guard
        _as_the_server(self.namespace, self.spec)

    def hand_down(self) -> None:
        """In a warm-start server, after the shared stages: what every forked worker inherits.

        Its workers skip the stages recorded here, and their reports name this
        process as the source (see ``_stage`` and ``_check_inherited``).
        """
        global _server_boot, _server_guard
        _set_current(None, None)
        _server_guard = self.guard_result
        shared = reports.shared_parts(self.namespace, self.spec.platform)
        reports.keep_pickled(shared)
        _server_boot = {
            # What every forked worker's report repeats; computed here once (a forked worker
            # has lost the seeded entry-point rows, and explaining the platform would rescan).
            "shared": shared,
            "hooks_version": self.namespace.hooks._settled_version(),
            "server_pid": os.getpid(),
            "server_started": self._server_started,
            "stages": {s.value: self.stage_seconds[s.value] for s in SHARED_STAGES},
            "stage_detail": dict(self.stage_detail),
            "identity": boot_identity(self.spec),
        }

    @_staged
    def initialize_platform(self) -> None:
        """Pin the parent's platform choice (if any) and initialise it."""
        if self.spec.entry_points is not None:
            config = self.namespace.config
            _metadata.seed((config.platform_group, config.plugin_group), self.spec.entry_points)
        platforms = self.namespace.platforms
        if self.spec.platform is not None:
            platforms.set_selection(self.spec.platform, by="the launcher")
        platforms.initialize()

    @_staged
    def load_plugins(self) -> None:
        """Register every selected plugin's hooks, then run the import guard over the targets."""
        manager = _plugins_for_node(self.namespace, self.spec)
        # True forces lenient; False leaves the namespace's variable and default in charge.
        # apply_deferred=False: a plugin's own apply_plugin_hooks() waits for the apply stage.
        with atexit_kept:  # exit callbacks of modules a plugin imports stay rebindable
            manager.load(
                names=self.spec.plugins,
                lenient=True if self.spec.lenient_plugins else None,
                apply_deferred=False,
                after_each=getattr(self.listener, "plugin_loaded", None),
            )
        self.guard_result = guard.check(
            self.namespace,
            self.namespace.hooks,
            _guard_policy(self.namespace, self.spec),
            before=manager.report.modules_before,
            plugin_imports=manager.report.plugin_imports,
            extra=self.spec.extra,
            sweep_repairs=self.sweep_repairs_guard,
        )

    @_staged
    def apply_hooks(self) -> None:
        """Patch every registered target (strict: a target that fails stops the bootstrap)."""
        manager, clean, result = self.namespace.plugins, frozenset[str](), self.guard_result
        if _vouched(result):
            clean = manager.report.modules_before
        started = time.monotonic()
        # <PREFIX>_LENIENT_PLUGINS=1 (or the spec's lenient_plugins, as load read it):
        # strict=False, a failed target logged at ERROR (the knob HookApplyError names), but
        # the selected platform's own (PluginManager.apply); what import missed a module
        # provided now: _tried_provisions
        from spawnkit.hooks._plugin_selection import is_lenient

        tried = _tried_provisions(self.namespace)
        try:  # it imports the target modules, each patched as it finishes (hooks._apply)
            lenient = is_lenient(self.namespace, True if self.spec.lenient_plugins else None)
            manager.apply(strict=not lenient, clean_modules=clean)
        finally:
            self.target_imports += self.namespace.hooks._take_import_spans()
        _check_stale(self.namespace, self.spec, self.guard_result, tried)
        _check_platform_replaced(self.namespace)
        _phase.mark_hooks_applied()
        _plain_children.arm(self.namespace)  # a plain spawn child of this process lacks them
        _plain_children.arm_subprocess(self.namespace, self.spec.entry)  # subprocess's too
        self.stage_detail[Stage.HOOKS.value] = _split(self.target_imports, started)

    @_staged
    def materialize_payload(self) -> None:
        """Unpickle the payload (and a by-value entry): their imports now see patched code."""
        if self.spec.payload is not None:
            self.payload_obj = self.spec.payload.materialize()
        if not self.spec.entry and self.spec.entry_payload is not None:
            self._entry_from_payload = self.spec.entry_payload.materialize()

    @_staged
    def resolve_entry(self) -> Callable[..., Any]:
        """Read the entry from its module now, after patching (READY follows; see ``_ready``);
        then check that the payload's and the entry's imports replaced no hooked target."""
        ref = self.spec.entry
        entry = _entry.by_reference(ref) if ref else _entry.by_value(self._entry_from_payload)
        _check_in_effect(self, entry, by_value=not ref)
        return entry

    def _ready(self, entry: Callable[..., Any]) -> None:
        """After ``resolve_entry`` finished (so its time is in it): the report, to the listener."""
        self.entry = entry
        self.report = self.build_report()
        _set_current(self.spec, self.report)
        if self.listener is not None:
            self.listener.ready(self.report)

    @_staged
    def call_entry(self) -> Any:
        """Call the entry: ``entry(payload)`` with a payload, ``entry()`` without, or with the
        arguments the launcher named (``entry_args``: the seed's
        ``run_scheduler_process(local_rank, rank, server_args, pipe_writer)``)."""
        assert self.entry is not None
        names = self.spec._control.entry_args
        if names is not None:
            return self.entry(*[_entry_arg(self.spec, self.payload_obj, n) for n in names])
        if self.spec.payload is not None:
            return self.entry(self.payload_obj)
        return self.entry()

    def through_hooks(self) -> BootstrapReport:
        """The stages up to ``apply_hooks``, then this process's report, set as current.

        For a process that runs its own code afterwards instead of an entry:
        a child of a bootstrapping context (its Process target) or the
        engine's own process (``bootstrap_here``).
        """
        with _gc_paused(self.freeze_gc):
            for row in STAGES[:_THROUGH_HOOKS]:
                getattr(self, row.method)()
        self.report = self.build_report()
        _set_current(self.spec, self.report)
        return self.report

    def run(self) -> Any:
        """Every stage, in the order of ``STAGES``; returns the entry's result (the last stage)."""
        with _gc_paused(self.freeze_gc):  # until the heap is frozen after the entry's imports
            for row in STAGES[:-1]:
                getattr(self, row.method)()
        return getattr(self, STAGES[-1].method)()

    def build_report(self) -> BootstrapReport:
        """The report as it stands now, in plain types."""
        spec = self.spec
        who = reports.Who(spec.rank, spec.entry, spec.world_size, spec.local_rank, spec.platform)
        return reports.build(
            who,
            self.namespace,
            pid=self.pid,
            host=self.host,
            stage_seconds=self.stage_seconds,
            stage_starts=self.stage_starts,
            target_imports=self.target_imports,
            guard=self.guard_result.to_dict() if self.guard_result else {},
            stage_detail=self.stage_detail,
            inherited=self.inherited,
        )


def _as_the_server(namespace: Namespace, spec: ProcessSpec) -> None:
    """In a warm worker, what forking dropped of its server's bootstrap: the seeded entry-point
    rows (``_metadata`` forgets them in a forked child; put back, nothing here rescans
    metadata), and the platform the server built and initialised (``PlatformManager.inherit``)."""
    if spec.entry_points is not None:
        config = namespace.config
        _metadata.seed((config.platform_group, config.plugin_group), spec.entry_points)
    namespace.platforms.inherit()


def _split(spans: list[tuple[str, float, float]], started: float) -> dict[str, float]:
    """``apply_hooks``'s time: importing the target modules (the call's top-level imports,
    each patched as it finished) and the rest, for the report's stage detail."""
    importing = sum(end - begun for _, begun, end in spans if begun >= started)
    return {"import_targets": importing, "patch": time.monotonic() - started - importing}


def _check_stale(
    namespace: Namespace,
    spec: ProcessSpec,
    result: GuardResult | None,
    tried: dict[str, guard.ImportSite],
) -> None:
    """What the sweep could not rebind (tuple items, default arguments, partials, bound
    methods), per guard policy; and a module provided now that an import missed before."""
    if tried:
        _check_provisions(namespace, spec, tried)
    holders = namespace.hooks.stale_holders()
    if not holders:
        return
    if result is not None:
        result.stale_holders = holders
    policy = result.policy if result is not None else _guard_policy(namespace, spec)
    before = namespace.plugins.report.modules_before
    layered = _layered(namespace)
    for holder in holders:
        if holder["target"] in layered:  # made between the two bootstraps: no early import
            holder["imported_by"] = layered[holder["target"]]
    defined = _defined_early(namespace, before, layered)
    guard.check_stale(namespace, holders, policy, defined=defined)


def _layered(namespace: Namespace) -> dict[str, str]:
    """Target (as displayed) -> the namespace whose hooked object its original is
    (``bootstrap_here(A)`` then ``bootstrap_here(B)``: B's chain wraps A's), so what holds it
    was made after A's apply.  Asked only when there are holders, with two registries."""
    from spawnkit.hooks import _layers, _state

    if len(_state.REGISTRIES) < 2:
        return {}
    st = namespace.hooks._state
    chains = _layers.chains_of_others(st)
    return {
        rec.display: chains[id(rec.original)][0]
        for rec in list(st.applied.values())
        if id(rec.original) in chains
    }


def _defined_early(
    namespace: Namespace, before: frozenset[str], layered: Collection[str] = ()
) -> dict[str, str]:
    """Target (as displayed) -> the module defining its original, where that is not the
    module the target names and was imported before plugins loaded: a target named by its
    re-export, whose defining module the guard's check of the named module did not see.  Not
    a target in ``layered``: its original is another namespace's chain, made by spawnkit."""
    out: dict[str, str] = {}
    for rec in list(namespace.hooks._state.applied.values()):
        if rec.display in layered:
            continue
        original = rec.original
        glob = getattr(original, "__globals__", None)
        home = glob.get("__name__") if type(glob) is dict else None
        home = home if isinstance(home, str) else getattr(original, "__module__", None)
        if isinstance(home, str) and home in before and home != rec.res.module:
            out[rec.display] = home
    return out


def _tried_provisions(namespace: Namespace) -> dict[str, guard.ImportSite]:
    """The modules ``provide_module()`` will place that an import already asked for (a
    plugin's top-level engine import, as it loaded): read before the apply's own lookups."""
    from spawnkit.hooks._decide import provisions

    pending = [name for name, state in provisions(namespace.hooks._state) if state == "pending"]
    return guard.tried_before(pending) if pending else {}


def _check_provisions(
    namespace: Namespace, spec: ProcessSpec, tried: dict[str, guard.ImportSite]
) -> None:
    from spawnkit.hooks._decide import provisions

    placed = {name for name, state in provisions(namespace.hooks._state) if state == "provided"}
    found = {name: site for name, site in tried.items() if name in placed}
    guard.check_provisions(namespace, found, _guard_policy(namespace, spec))


def _check_in_effect(boot: Bootstrapper, entry: object, *, by_value: bool) -> None:
    """The payload's and the entry's imports ran after the hooks: a hook target they assigned
    their own object over no longer runs its hooks (per guard policy, as stale holders), and
    a subclass they defined may override a hooked method without calling it (a conflict).
    An entry sent by value from the launching script runs the script's copy of its module."""
    namespace, spec, result = boot.namespace, boot.spec, boot.guard_result
    if by_value:
        from spawnkit.bootstrap import _script_copy  # by-value entries only

        _script_copy.check_entry(namespace, spec, entry, Stage.RESOLVE_ENTRY.value)
    _check_overrides(namespace)
    ctors = _hooked_ctors.hooked_constructors(namespace)
    rebuilt = _hooked_ctors.replaced_classes(namespace)
    carried = [(spec.payload, "payload"), (spec.entry_payload, "by-value entry")]
    if ctors or rebuilt or any(p is not None and p.instances for p, _ in carried):
        _check_payloads(namespace, spec, ctors, rebuilt, carried)
    from spawnkit.hooks._decide import REPLACED

    replaced = [h for h in namespace.hooks.stale_holders() if h["kind"].startswith(REPLACED)]
    if not replaced:
        return
    if result is not None:
        result.stale_holders = [*result.stale_holders, *replaced]
    policy = result.policy if result is not None else _guard_policy(namespace, spec)
    guard.check_stale(namespace, replaced, policy, stage=Stage.RESOLVE_ENTRY.value)


def _check_payloads(
    namespace: Any,
    spec: ProcessSpec,
    ctors: list[Any],
    rebuilt: list[Any],
    carried: list[tuple[Payload | None, str]],
) -> None:
    """What unpickling the payloads did not run, and the module-level instances they carry as
    copies (``_payload_hooks``, imported only where a constructor is hooked, a class REPLACE
    builds otherwise or a payload holds such an instance: issue #23)."""
    from spawnkit.bootstrap import _payload_hooks

    if (ctors or rebuilt) and spec.extra:  # rank_extra's values: unpickled after the hooks
        carried = [*carried, *_payload_hooks.extra_payloads(spec)]  # in a forkserver's worker
    for payload, what in carried if ctors or rebuilt else ():  # what unpickling did not run
        if payload is not None:
            lines, fix = _payload_hooks.unrun(ctors, payload, rebuilt, namespace.name, what)
            _report_conflicts(namespace, lines, fix)
    for payload, what in carried[:2]:  # module-level instances the launcher put there: copies
        if payload is not None and payload.instances:
            _report_conflicts(namespace, *_payload_hooks.copied_instances(namespace, payload, what))


def _check_platform_replaced(namespace: Namespace) -> None:
    """A class REPLACE of the platform class, built before plugins loaded, per
    ``<PREFIX>_HOOK_CONFLICTS``; asked of the ledger only, so free where nothing is replaced.
    In a warm server too: its workers take on its platform (``_as_the_server``)."""
    replaced = namespace.hooks._replaced_classes()
    if replaced:
        from spawnkit.bootstrap import _platform_replaced  # a class REPLACE: few workers

        _report_conflicts(namespace, *_platform_replaced.left_behind(namespace, replaced))


def _check_overrides(namespace: Namespace) -> None:
    """Subclass overrides that never call a hooked method, per ``<PREFIX>_HOOK_CONFLICTS``."""
    found = namespace.hooks._bypass_report()
    if not found:
        return
    lines = [f"target {target!r}: {reason}" for target, (_, reason, _) in found.items()]
    fixes = dict.fromkeys(fix for _, _, fix in found.values())  # each kind's fix once
    _report_conflicts(namespace, lines, "\n".join(fixes))


def _report_conflicts(namespace: Namespace, lines: list[str], fix: str) -> None:
    """Hooks that will not run where the engine expects them, per ``<PREFIX>_HOOK_CONFLICTS``."""
    if not lines:
        return
    from spawnkit.hooks._conflicts import parse_policy

    var = namespace.config.hook_conflicts_var
    policy = parse_policy(var, os.environ.get(var))
    if policy == "error":
        raise HookConflictError(
            "\n".join([f"refused because {var}=error:", *lines, fix]), conflicts=lines
        )
    if policy == "warn":
        knobs = f"Silence with {var}=ignore; refuse with {var}=error."
        warnings.warn("\n".join([*lines, fix, knobs]), HookConflictWarning, stacklevel=2)


def _guard_policy(namespace: Namespace, spec: ProcessSpec) -> str:
    config = namespace.config
    env = os.environ.get(config.guard_var)
    return guard.resolve_policy(config.guard_policy, env, spec.guard_policy, var=config.guard_var)


def _entry_arg(spec: ProcessSpec, payload: Any, name: str) -> Any:
    """One named entry argument; the launcher checked that every name exists."""
    if name == "payload":
        return payload
    if name in ("rank", "local_rank", "world_size"):
        return getattr(spec, name)
    return spec.extra[name]


def _order_problem(
    stage: Stage, next_index: int, running: Stage | None, failed: Stage | None
) -> str:
    """Why ``stage`` may not run now ('' when it may)."""
    in_order = next_index < len(STAGE_ORDER) and stage is STAGE_ORDER[next_index]
    if in_order and failed is None and running is None:
        return ""  # in order, as every stage of a worker is: no message (the order) to build
    order = " -> ".join(s.value for s in STAGE_ORDER)
    if failed is not None:
        return (
            f"stage {stage.value!r} cannot run: this bootstrap already failed in stage "
            f"{failed.value!r}, and no later stage runs after a failure. Start a "
            "new worker after fixing that error."
        )
    if running is not None:
        return (
            f"stage {stage.value!r} was called while stage {running.value!r} is still "
            f"running; stages run one at a time, in order: {order}."
        )
    expected = STAGE_ORDER[next_index] if next_index < len(STAGE_ORDER) else None
    if stage is expected:
        return ""
    if expected is None or STAGE_ORDER.index(stage) < next_index:
        nxt = f"the next stage is {expected.value!r}" if expected else "every stage has run"
        return (
            f"stage {stage.value!r} already ran in this bootstrap (each stage runs once); "
            f"{nxt}. Order: {order}."
        )
    return (
        f"stage {stage.value!r} called too early: the stage expected now is "
        f"{expected.value!r}. Stages run in order: {order}."
    )


def _stage_error(
    stage: Stage, exc: Exception, rank: int, pid: int, host: str, who: str
) -> StageError:
    """A ``StageError`` gets its fields filled in; anything else becomes one (see errors)."""
    import traceback  # only on this failure path: a worker that succeeds never needs it

    tb = "".join(traceback.format_exception(exc))
    if isinstance(exc, StageError):
        exc.stage, exc.rank, exc.pid, exc.host = stage.value, rank, pid, host
        exc.traceback_text = tb
        return exc
    cls = stage_error_type(type(exc))
    # Exception.__str__: the bare message; a dual type's own __str__ (PlatformError
    # appends its explanation) then renders the extra fields once, at the end.
    text = Exception.__str__(exc) if cls is not StageError else str(exc)
    err = cls.__new__(cls)
    Exception.__init__(
        err,
        f"{type(exc).__name__}: {text}\n(bootstrap stage {stage.value!r} of {who}, pid {pid} "
        f"on {host} failed; later stages did not run)",
    )
    err.__dict__.update(exc.__dict__)  # the cause's fields (plugin, dist, explanation...)
    err.stage, err.rank, err.pid, err.host = stage.value, rank, pid, host
    err.traceback_text = tb
    err.cause_type = qualified_name(exc)
    # The original, when it can travel to the parent (spawnkit's errors always can).
    err.cause = exc if isinstance(exc, SpawnkitError) or _picklable(exc) else None
    return err


def _apply_env(spec: ProcessSpec, *, forked: bool, server: bool) -> None:
    """``spec.env`` into ``os.environ``, and ``PYTHONPATH``'s entries onto ``sys.path``:
    multiprocessing gave this process the launcher's (see ``spawnkit._environ``); and a
    rank's own numbers (``rank_env``: a server has no rank, each forked worker sets its own).

    ``forked``: a worker forked from a warm server, which applied the same entries (its key)
    before its plugins loaded; they may have changed them since, as a spawned worker's would,
    and its ``sys.path`` is the server's again (``protocol/_fork_prepare``): the launch's own
    entries only."""
    env = spec.env
    if not server:
        os.environ.update(rank_env(spec))
    if forked:
        env = {k: v for k, v in env.items() if k in _PER_LAUNCH_ENV}
    if not env:
        return
    zone = os.environ.get("TZ")
    os.environ.update(env)
    if env.get("TZ", zone) != zone:
        # The C library and ``time`` read TZ once (``time.tzname``, ``localtime()``): a
        # forked worker or a warm server (whose forks the workers are), a torchrun rank, kept
        # the zone they started with while ``os.environ`` showed this one.
        time.tzset()
    if "PYTHONPATH" in env:
        from spawnkit._environ import put_on_path

        put_on_path(env["PYTHONPATH"])


def rank_env(spec: ProcessSpec) -> dict[str, str]:
    """A rank's own ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``, as
    torchrun gives its ranks, for a rank a spawnkit launcher started (its ``_control`` names
    a local world; none for torchrun's own ranks, a context's child, the engine's process):
    one started by a launcher that is itself a rank (under torchrun, SLURM) otherwise
    inherited that launcher's, and ``init_process_group("env://")`` or a GPU picked by
    ``LOCAL_RANK`` took another process's numbers.  A name ``env=`` sets stays as set."""
    local_world = spec._control.local_world_size
    if local_world is None:
        return {}
    own = (
        ("RANK", spec.rank),
        ("LOCAL_RANK", spec.local_rank),
        ("WORLD_SIZE", spec.world_size),
        ("LOCAL_WORLD_SIZE", local_world),
    )
    return {name: str(value) for name, value in own if name not in spec.env}


def boot_identity(spec: ProcessSpec) -> tuple[Any, ...]:
    """What a pre-bootstrapped server fixed for every worker forked from it; the ``env=``
    entries last (``warm.server_key`` keys them with the environment)."""
    return (
        spec.namespace,
        spec.platform,
        spec.plugins,
        spec.lenient_plugins,
        spec.entry_points,
        spec.guard_policy,
        tuple(sorted((k, v) for k, v in spec.env.items() if k not in _PER_LAUNCH_ENV)),
    )


#: Environment entries of a spec that differ per launch and decide nothing in the bootstrap:
#: a warm server is not keyed on them (a traced launch's W3C context is new each launch, which
#: started a new server for every traced launch), and each forked worker sets its own.
_PER_LAUNCH_ENV = frozenset({"SPAWNKIT_RUN_ID", "TRACEPARENT", "TRACESTATE"})


@contextmanager
def _gc_paused(freeze_gc: bool) -> Iterator[None]:
    """The stages of a process spawnkit started (``freeze_gc``) up to the entry (or up to
    ``apply_hooks``, ``through_hooks``): the heap frozen (``gc.freeze()``) before them and
    again after, and no automatic collection in between (:mod:`spawnkit._collector`).

    Everything alive before them (the interpreter, spawnkit, the spec) and everything they
    import (plugins, hook targets, the payload's and the entry's modules, and the frameworks
    those import) stays for the worker's life: frozen, no collection walks it again.  Before
    the stages that is ~0.7 ms of a 7 ms bootstrap with 10 plugins and 100 hooks (a collection
    the hooks' allocations set off walked all of spawnkit); an ``import torch`` during them
    ran ~80 ms of collections.  The price: cyclic garbage made meanwhile is frozen with the
    rest instead of collected (after ``import torch``: ~7,100 objects, 0.67 MB by
    ``sys.getsizeof``); reference counting still frees everything else.  The entry itself
    runs with the collector as it was.  Never in a process that ran its own code first
    (``bootstrap_here``, user code calling ``bootstrap_process``).
    """
    if freeze_gc:
        gc.freeze()
    paused = _collector.pause() if freeze_gc else None
    try:
        yield
    finally:
        if freeze_gc:
            gc.freeze()
        _collector.resume(paused)


def bootstrap_process(spec: ProcessSpec, *, listener: StageListener | None = None) -> Any:
    """Run every bootstrap stage for ``spec`` and then its entry; returns the entry's result."""
    return Bootstrapper(spec, listener=listener).run()
