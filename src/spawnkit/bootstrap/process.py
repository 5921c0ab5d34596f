"""``bootstrap_process(spec)``: a worker's stages, run in the one order that keeps hooks effective.

The order, and the reason for each step of it, is :data:`~spawnkit.bootstrap.stages.STAGES`;
this module is the work each stage does.  :class:`Bootstrapper` has one method
per stage (the table names it) and refuses to run one early, twice or after a
failure (``BootstrapOrderError`` naming the stage expected), so engines that
drive the stages themselves cannot get the order wrong either.  A failing
stage raises a ``StageError`` (one that is also its cause's type when the
cause is a spawnkit error, so ``except PluginError`` and ``except StageError``
both catch a plugin failure) that carries stage, rank, pid, host and the
formatted traceback and survives pickling, so the parent sees exactly what the
child saw.  An exception raised by the entry itself propagates unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from spawnkit import _metadata, _reference
from spawnkit._names import qualified_name
from spawnkit.bootstrap import guard
from spawnkit.bootstrap.report import BootstrapReport
from spawnkit.bootstrap.stages import SHARED_STAGES, STAGE_ORDER, STAGES, Stage, StageListener
from spawnkit.errors import (
    BootstrapOrderError,
    EntryResolutionError,
    SpawnkitError,
    StageError,
    stage_error_type,
)
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from spawnkit.bootstrap.guard import GuardResult
    from spawnkit.namespace import Namespace
    from spawnkit.spec import ProcessSpec

__all__ = [
    "Bootstrapper",
    "boot_identity",
    "bootstrap_process",
    "current_report",
    "current_spec",
]

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
    return _current_spec


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


#: Each row's stage by the name of its method, and back.
_STAGE_OF: dict[str, Stage] = {row.method: row.stage for row in STAGES}
_METHOD: dict[Stage, str] = {row.stage: row.method for row in STAGES}


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
        self.guard_result: GuardResult | None = None
        # False for a process that ran its own code before bootstrapping (bootstrap_here):
        # objects and closures made there may hold originals no sweep can see.
        self.sweep_repairs_guard = True
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
        return BootstrapOrderError(
            message,
            stage=stage.value,
            rank=self.rank,
            pid=self.pid,
            host=self.host,
            expected=self.next_stage.value if self.next_stage else "",
        )

    def _check_order(self, stage: Stage) -> None:
        order = " -> ".join(s.value for s in STAGE_ORDER)
        if self._failed is not None:
            raise self._order_error(
                stage,
                f"stage {stage.value!r} cannot run: this bootstrap already failed in stage "
                f"{self._failed.value!r}, and no later stage runs after a failure. Start a "
                "new worker after fixing that error.",
            )
        if self._running is not None:
            raise self._order_error(
                stage,
                f"stage {stage.value!r} was called while stage {self._running.value!r} is still "
                f"running; stages run one at a time, in order: {order}.",
            )
        expected = self.next_stage
        if stage is expected:
            return
        if expected is None or STAGE_ORDER.index(stage) < self._next:
            nxt = f"the next stage is {expected.value!r}" if expected else "every stage has run"
            raise self._order_error(
                stage,
                f"stage {stage.value!r} already ran in this bootstrap (each stage runs once); "
                f"{nxt}. Order: {order}.",
            )
        raise self._order_error(
            stage,
            f"stage {stage.value!r} called too early: the stage expected now is "
            f"{expected.value!r}. Stages run in order: {order}.",
        )

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
        self._check_order(stage)
        self._running = stage
        if self.listener is not None:
            self.listener.stage_started(stage.value)
        previous_step = guard.set_step(stage.value)
        start = time.perf_counter()
        try:
            result = action()
        except BaseException as exc:
            self._failed = stage
            self._running = None
            guard.set_step(previous_step)
            if stage is Stage.ENTRY or not isinstance(exc, Exception):
                raise  # the entry's own errors (and interpreter exits) pass unchanged
            err = self._stage_error(stage, exc)
            if err is exc:
                raise
            raise err from exc
        seconds = time.perf_counter() - start
        guard.set_step(previous_step)
        self._running = None
        self._next += 1
        self.stage_seconds[stage.value] = seconds
        if self.listener is not None:
            self.listener.stage_finished(stage.value, seconds)
        return result

    def _stage_error(self, stage: Stage, exc: Exception) -> StageError:
        """A ``StageError`` gets its fields filled in; anything else becomes one (see errors)."""
        import traceback  # only on this failure path: a worker that succeeds never needs it

        tb = "".join(traceback.format_exception(exc))
        who = "the warm-start server" if self._serving else f"rank {self.rank}"
        where = f"{who}, pid {self.pid} on {self.host}"
        if isinstance(exc, StageError):
            exc.stage = stage.value
            exc.rank, exc.pid, exc.host = self.rank, self.pid, self.host
            exc.traceback_text = tb
            return exc
        cls = stage_error_type(type(exc))
        # Exception.__str__: the bare message; a dual type's own __str__ (PlatformError
        # appends its explanation) then renders the extra fields once, at the end.
        text = Exception.__str__(exc) if cls is not StageError else str(exc)
        err = cls.__new__(cls)
        Exception.__init__(
            err,
            f"{type(exc).__name__}: {text}\n(bootstrap stage {stage.value!r} of {where} failed; "
            "later stages did not run)",
        )
        err.__dict__.update(exc.__dict__)  # the cause's fields (plugin, dist, explanation...)
        err.stage, err.rank, err.pid, err.host = stage.value, self.rank, self.pid, self.host
        err.traceback_text = tb
        err.cause_type = qualified_name(exc)
        # The original, when it can travel to the parent (spawnkit's errors always can).
        carry = isinstance(exc, SpawnkitError) or _picklable(exc)
        err.cause = exc if carry else None
        return err

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
            module.arm(self.spec)

    def _enter(self, *, server: bool = False) -> None:
        if self.spec.env:
            os.environ.update(self.spec.env)
        _phase.enter_worker(self.namespace)
        # A server bootstraps for every rank at once: it has no rank (``current_spec()`` is
        # None there), so a plugin callback cannot mistake one rank's state for everyone's.
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
        if self.spec.entry_points is not None:
            # Forking dropped the server's seeded rows (``_metadata`` forgets them in a forked
            # child); put the same rows back so nothing in this worker rescans metadata.
            config = self.namespace.config
            _metadata.seed((config.platform_group, config.plugin_group), self.spec.entry_points)

    def hand_down(self) -> None:
        """In a warm-start server, after the shared stages: what every forked worker inherits.

        Its workers skip the stages recorded here, and their reports name this
        process as the source (see ``_stage`` and ``_check_inherited``).
        """
        global _server_boot, _server_guard
        _set_current(None, None)
        _server_guard = self.guard_result
        _server_boot = {
            # What every forked worker's report repeats; computed here once (a forked worker
            # has lost the seeded entry-point rows, and explaining the platform would rescan).
            "shared": _shared_report_parts(self.namespace, self.spec),
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
        manager = self.namespace.plugins
        # True forces lenient; False leaves the namespace's variable and default in charge.
        # apply_deferred=False: a plugin's own apply_plugin_hooks() call waits for the
        # apply stage, which runs right after the guard has checked every target.
        manager.load(
            names=self.spec.plugins,
            lenient=True if self.spec.lenient_plugins else None,
            apply_deferred=False,
            after_each=getattr(self.listener, "plugin_loaded", None),
        )
        self.guard_result = guard.check(
            self.namespace,
            self.namespace.hooks,
            self._guard_policy(),
            before=manager.report.modules_before,
            plugin_imports=manager.report.plugin_imports,
            extra=self.spec.extra,
            sweep_repairs=self.sweep_repairs_guard,
        )

    @_staged
    def apply_hooks(self) -> None:
        """Patch every registered target (strict: a target that fails stops the bootstrap)."""
        manager = self.namespace.plugins
        clean: frozenset[str] = frozenset()
        result = self.guard_result
        if result is not None and result.policy != "off" and not result.violations:
            # No target module was imported before plugin loading began, so no module
            # imported by then can hold an original: the stale-binding sweep skips them.
            clean = manager.report.modules_before
        # Import the target modules first, apart, so the report can tell a heavy framework
        # imported by a target from the patching itself.  A module that fails here is left to
        # ``apply`` below, which imports it again and reports it with its target and plugin.
        started = time.perf_counter()
        for module in self.namespace.hooks.target_modules(eager=True):
            if module not in sys.modules:
                try:
                    importlib.import_module(module)
                except Exception:
                    pass
        imported = time.perf_counter()
        # <PREFIX>_LENIENT_PLUGINS=1 is this stage's strict=False: a target that fails to patch
        # is logged at ERROR with its plugins and the others run (the knob HookApplyError names).
        from spawnkit.hooks._plugin_selection import is_lenient

        manager.apply(strict=not is_lenient(self.namespace, None), clean_modules=clean)
        self._check_stale()
        _phase.mark_hooks_applied()
        self.stage_detail[Stage.HOOKS.value] = {
            "import_targets": imported - started,
            "patch": time.perf_counter() - imported,
        }

    def _check_stale(self) -> None:
        """What the sweep could not rebind (tuple items, default arguments), per guard policy."""
        holders = self.namespace.hooks.stale_holders()
        if not holders:
            return
        result = self.guard_result
        if result is not None:
            result.stale_holders = holders
        policy = result.policy if result is not None else self._guard_policy()
        guard.check_stale(self.namespace, holders, policy)

    def _guard_policy(self) -> str:
        config = self.namespace.config
        env = os.environ.get(config.guard_var)
        return guard.resolve_policy(
            config.guard_policy, env, self.spec.guard_policy, var=config.guard_var
        )

    @_staged
    def materialize_payload(self) -> None:
        """Unpickle the payload (and a by-value entry): their imports now see patched code."""
        if self.spec.payload is not None:
            self.payload_obj = self.spec.payload.materialize()
        if not self.spec.entry and self.spec.entry_payload is not None:
            self._entry_from_payload = self.spec.entry_payload.materialize()

    @_staged
    def resolve_entry(self) -> Callable[..., Any]:
        """Read the entry from its module now, after patching (READY follows; see ``_ready``)."""
        if not self.spec.entry:
            obj = self._entry_from_payload
            if not callable(obj):
                raise EntryResolutionError(
                    f"the by-value entry holds a {qualified_name(obj)}, which is not callable; "
                    "pass a function or a callable object as the entry"
                )
            return obj  # type: ignore[no-any-return]
        return _resolve_reference(self.spec.entry)

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
            return self.entry(*[self._entry_arg(name) for name in names])
        if self.spec.payload is not None:
            return self.entry(self.payload_obj)
        return self.entry()

    def through_hooks(self) -> BootstrapReport:
        """The stages up to ``apply_hooks``, then this process's report, set as current.

        For a process that runs its own code afterwards instead of an entry:
        a child of a bootstrapping context (its Process target) or the
        engine's own process (``bootstrap_here``).
        """
        for row in STAGES[: STAGE_ORDER.index(Stage.HOOKS) + 1]:
            getattr(self, row.method)()
        self.report = self.build_report()
        _set_current(self.spec, self.report)
        return self.report

    def _entry_arg(self, name: str) -> Any:
        """One named entry argument; the launcher checked that every name exists."""
        spec = self.spec
        if name == "payload":
            return self.payload_obj
        if name in ("rank", "local_rank", "world_size"):
            return getattr(spec, name)
        return spec.extra[name]

    def run(self) -> Any:
        """Every stage, in the order of ``STAGES``; returns the entry's result (the last stage)."""
        result: Any = None
        for row in STAGES:
            result = getattr(self, row.method)()
        return result

    def build_report(self) -> BootstrapReport:
        """The report as it stands now, in plain types."""
        return _build_report(self)


# -------------------------------------------------------------- report
def _shared_report_parts(namespace: Namespace, spec: ProcessSpec) -> dict[str, Any]:
    """The parts of a report decided by platform, plugins and hooks (identical per rank)."""
    manager = namespace.plugins
    return {
        "platform": _platform_info(namespace, spec),
        "plugins": [
            {
                "name": p.name,
                "value": p.value,
                "dist": p.dist,
                "version": p.version,
                "seconds": p.seconds,
                "imported": list(p.imported),
                "registrations": p.registrations,
                "outside_registry": list(p.outside_registry),
            }
            for p in manager.report.loaded
        ],
        "failed_plugins": [
            {
                "name": f.name,
                "value": f.value,
                "dist": f.dist,
                "version": f.version,
                "error": f.error,
                "outside_registry": list(f.outside_registry),
            }
            for f in manager.report.failed
        ],
        "skipped_plugins": [
            {"name": s.name, "dist": s.dist, "status": s.status, "reason": s.reason}
            for s in manager.report.skipped
        ],
        "hooks": _hooks_info(namespace),
    }


def _build_report(boot: Bootstrapper) -> BootstrapReport:
    """``boot``'s report as it stands now, in plain types."""
    spec = boot.spec
    shared: dict[str, Any]
    if boot.inherited is not None:
        shared = {  # fresh containers: this report is the worker's to change
            k: (dict(v) if isinstance(v, dict) else [dict(x) for x in v])
            for k, v in boot.inherited["shared"].items()
        }
        # on_import hooks may have been applied since the server's report (or be late ones)
        shared["hooks"] = _hooks_info(boot.namespace)
    else:
        shared = _shared_report_parts(boot.namespace, spec)
    report = BootstrapReport(
        rank=spec.rank,
        pid=boot.pid,
        host=boot.host,
        namespace=boot.namespace.name,
        entry=spec.entry,
        world_size=spec.world_size,
        local_rank=spec.local_rank,
        **shared,
        stage_seconds=dict(boot.stage_seconds),
        guard=boot.guard_result.to_dict() if boot.guard_result else {},
        stage_detail={**(boot.inherited or {}).get("stage_detail", {}), **boot.stage_detail},
    )
    if boot.inherited is not None:
        report.inherited = {
            k: v
            for k, v in boot.inherited.items()
            if k not in ("identity", "stage_detail", "shared")
        }
    return report


def _platform_info(namespace: Namespace, spec: ProcessSpec) -> dict[str, Any]:
    """Which platform runs, and how it was chosen."""
    try:
        # decision(), not explain(): a worker that succeeds never builds the explanation
        decision = namespace.platforms.decision()
    except Exception as exc:  # the report must not fail the bootstrap
        return {"name": "?", "kind": "?", "how": f"explain() failed: {exc}"}
    winner = decision.get("winner")
    mode = decision.get("mode", "")
    path = " -> ".join(decision.get("path") or [])
    if spec.platform is not None:
        how = f"pinned by the parent (ProcessSpec.platform={spec.platform!r})"
    else:
        var = decision.get("selector_var", "")
        value = decision.get("selector_value")
        how = f"{var}={value!r}" if value else "auto-detected in the worker"
    if mode or path:
        how += f"; mode {mode}" + (f": {path}" if path else "")
    if winner is None:
        return {"name": "?", "kind": "?", "how": how}
    return {
        "name": winner.name,
        "kind": winner.kind,
        "qualname": winner.qualname,
        "dist": winner.dist,
        "version": winner.version,
        "how": how,
    }


def _hooks_info(namespace: Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every registration by target, with its state and reason (not only the applied ones)."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for row in namespace.hooks.status():
        hooks.setdefault(row.target, []).append(row.to_dict())
    _mark_unrebound(hooks, namespace.hooks.stale_holders())
    return hooks


def _mark_unrebound(hooks: dict[str, list[dict[str, Any]]], holders: list[dict[str, str]]) -> None:
    """Name, on each ``partial`` hook entry, the references that still call the original.

    ``status()`` already says ``partial`` and why; ``unrebound`` lists the
    holders (``module.name (kind)``) so a report reader need not parse the reason.
    """
    by_target: dict[str, list[str]] = {}
    for h in holders:
        by_target.setdefault(h["target"], []).append(f"{h['module']}.{h['name']} ({h['kind']})")
    for target, where in by_target.items():
        for entry in hooks.get(target, []):
            if entry.get("state") == "partial":
                entry["unrebound"] = list(where)


def boot_identity(spec: ProcessSpec) -> tuple[Any, ...]:
    """What a pre-bootstrapped server fixed for every worker forked from it."""
    return (
        spec.namespace,
        spec.platform,
        spec.plugins,
        spec.lenient_plugins,
        spec.entry_points,
        spec.guard_policy,
        tuple(sorted((k, v) for k, v in spec.env.items() if k not in _PER_LAUNCH_ENV)),
    )


#: Environment entries of a spec that differ per launch and decide nothing in the bootstrap.
_PER_LAUNCH_ENV = frozenset({"SPAWNKIT_RUN_ID"})


def _resolve_reference(reference: str) -> Callable[..., Any]:
    """``module:qualname`` -> the callable, with errors that say what to change."""
    try:
        module_name, qualname = _reference.parse(reference)
        obj = _reference.resolve(module_name, qualname)
    except _reference.BadReference as exc:
        fix = (
            "Define it at module level, or pass the callable itself so spawnkit sends it by value."
            if "<locals>" in reference
            else "Name it as 'module:function', for example 'mypkg.worker:main'."
        )
        raise EntryResolutionError(f"entry {reference!r}: {exc.why}. {fix}") from None
    except _reference.ImportFailed as exc:
        raise EntryResolutionError(
            f"entry {reference!r}: module {exc.module!r} failed to import "
            f"({type(exc.cause).__name__}: {exc.cause}). Install it in the worker's environment "
            "or fix the entry string."
        ) from exc.cause
    except _reference.MissingAttribute as exc:
        names = [n for n in dir(exc.owner) if not n.startswith("__")]
        import difflib  # only on this error path

        close = difflib.get_close_matches(exc.missing, names, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise EntryResolutionError(f"entry {reference!r}: {exc}.{hint}") from None
    if not callable(obj):
        raise EntryResolutionError(
            f"entry {reference!r} resolves to a {qualified_name(obj)}, which is not callable"
        )
    return obj  # type: ignore[no-any-return]


def bootstrap_process(spec: ProcessSpec, *, listener: StageListener | None = None) -> Any:
    """Run every bootstrap stage for ``spec`` and then its entry; returns the entry's result."""
    return Bootstrapper(spec, listener=listener).run()
