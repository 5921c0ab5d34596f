"""``spawn_with_plugins()``: the parent's decisions, frozen into one spec per rank, and the start.

The first leg of a payload's trip (then ``protocol/popen.py`` ->
``protocol/child.py`` -> ``bootstrap/process.py``).  ``build_spec`` is what
every launcher (``write_launch_spec`` for torchrun, ``spawn_on_ray``) builds
from, so they all make the same decisions; ``_start_rank`` gives each rank
its copy with its own pipes; :class:`~spawnkit.launch.group.WorkerGroup`
supervises the result.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MethodType

from spawnkit import _metadata, _reference
from spawnkit._compat import TYPE_CHECKING
from spawnkit._flags import check_flag
from spawnkit.bootstrap import _plain_children
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import ConfigError, EntryResolutionError
from spawnkit.launch._checks import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_READY_TIMEOUT,
    check_count,
    check_entry_module,
    check_env_form,
    check_env_values,
    check_preload,
    check_run_id,
    check_seconds,
)
from spawnkit.namespace import Namespace, get_namespace
from spawnkit.spec import NamespaceConfig, Payload, ProcessSpec
from spawnkit.spec._control import LaunchControl

# A launching script that imports this module at its top is re-imported by every spawned
# worker (as __mp_main__): what only the parent runs (the group, its ranks and relays, the
# selection, the Popen side) is imported where it is called, not here (about 16 ms a worker).
if TYPE_CHECKING:
    from typing import Any

    from spawnkit.launch._here import Applied
    from spawnkit.launch._output import OutputRelay
    from spawnkit.launch._progress import ProgressCallback
    from spawnkit.launch._rank import Rank
    from spawnkit.launch.group import WorkerGroup
    from spawnkit.protocol.popen import LaunchContext

__all__ = ["build_spec", "entry_reference", "spawn_with_plugins"]


# --------------------------------------------------------------- launching
def spawn_with_plugins(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    nprocs: int = 1,
    namespace: Namespace | NamespaceConfig | str | None = None,
    start_method: str = "spawn",
    preload: Sequence[str] = (),
    context: str = "multiprocessing",
    env: dict[str, str] | None = None,
    ready_timeout: float | None = DEFAULT_READY_TIMEOUT,
    join_timeout: float | None = None,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    rank_extra: Callable[[int], Mapping[str, Any]] | None = None,
    progress: ProgressCallback | None = None,
    prefix_output: bool = False,
    entry_args: Sequence[str] | None = None,
    bootstrap_parent: bool = False,
    trace: str | os.PathLike[str] | None = None,
) -> WorkerGroup:
    """Start ``nprocs`` workers that each bootstrap (platform, plugins, hooks) and run ``entry``.

    The arguments are described in README's "Launch workers" section.
    """
    from spawnkit.launch import _interrupt, _selection
    from spawnkit.launch._output import OutputRelay
    from spawnkit.launch.group import WorkerGroup
    from spawnkit.protocol.popen import get_launch_context

    _check_limits(nprocs, ready_timeout, join_timeout, grace_period, rank_extra)
    _check_flags(prefix_output=prefix_output, bootstrap_parent=bootstrap_parent)
    call_names = None if entry_args is None else _entry_args(entry_args)
    preload = check_preload(preload)
    tracer, env = _open_trace(trace, env)
    with _trace_if_failing(tracer):  # until the group exists, which then writes the trace
        ns = get_namespace(namespace)  # may load it from its entry point: work, traced
        here = _bootstrap_parent(ns) if bootstrap_parent else None  # this process too, first
        with _metadata.one_look():  # the spec's rows and the warm server's key: one scan
            with _span(tracer, "build_spec"), _selection.launching(start_method, ready_timeout):
                template = build_spec(entry, payload, nprocs=nprocs, namespace=ns, env=env)
            if here is not None:  # its workers select as it did, or none starts
                here.check_launch(ns, template, env)
            with _span(tracer, "launch_context", start_method=start_method):
                lctx = get_launch_context(context, start_method, preload, template, ready_timeout)
        # Spawned workers start with SIGINT blocked, a terminal's Ctrl-C being ours to handle.
        deaf = lctx.server is None and _interrupt.will_start_deaf()
        group = WorkerGroup(
            run_id=template.run_id, context=lctx, ready_timeout=ready_timeout,
            join_timeout=join_timeout, grace_period=grace_period, progress=progress,
            output=OutputRelay(prefix=prefix_output), trace=tracer,
        )  # fmt: skip
    _plain_children.arm_launcher(  # a plain child of this launcher running engine code
        ns.name, template.plugins or (), {ns.name.partition(".")[0], _top(template.entry)}
    )
    control = _launch_control(start_method, context, deaf, call_names).replace(
        local_world_size=nprocs,  # each rank's own RANK... (bootstrap.process.rank_env)
        extra_hooked=_built_hooked() if rank_extra is not None else (),
    )
    _start_ranks(group, lctx, template.replace(_control=control), rank_extra, deaf)
    return group


def _built_hooked() -> tuple[tuple[str, str], ...]:
    """The constructors this launcher had applied as ``rank_extra``'s objects were built: a
    worker names each other hooked constructor of a class they hold (``Payload.hooked``'s)."""
    from spawnkit.spec import _phase

    return _phase.built_hooked()


def _bootstrap_parent(ns: Namespace) -> Applied | None:
    """``bootstrap_parent=True``: ``bootstrap_here()`` in this process before anything is
    spawned; what it applied (None in a worker of ``ns``), which the workers' selection is
    then held to: ``env=`` selects theirs, not this process's (``_here``)."""
    from spawnkit.launch import _here
    from spawnkit.launch.context import bootstrap_ns

    bootstrap_ns(ns, decide=False)
    return _here.applied_here(ns)


def _top(entry: str) -> str:
    """The top-level package of an entry reference (``"pkg.mod:fn"``): the engine's code."""
    return entry.partition(":")[0].partition(".")[0]


def _open_trace(trace: str | os.PathLike[str] | None, env: dict[str, str] | None) -> Any:
    """The launch's tracer (None when off) and the env carrying its trace context to ranks:
    ``env=``'s form checked first (its values are build_spec's, or the trace's TRACEPARENT's)."""
    check_env_form(env)
    if trace is None:
        return None, env
    from spawnkit.launch._trace import open_trace  # only when asked for: see spawnkit._trace

    tracer = open_trace(trace)
    return tracer, tracer.child_env(env)  # the W3C trace context, when OpenTelemetry is on


def _span(tracer: Any, name: str, **args: Any) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext() if tracer is None else tracer.span(name, **args)


@contextlib.contextmanager
def _trace_if_failing(tracer: Any) -> Iterator[None]:
    """A launch that fails before its group exists (a preload that raised or hung, a spec
    that cannot be built, Ctrl-C) writes its trace too: the launcher's spans so far are
    where it spent its time, and its OpenTelemetry root span is ended (else never exported)."""
    try:
        yield
    except BaseException as exc:
        if tracer is not None:
            tracer.finish((), error=exc)
        raise


def _launch_control(
    start_method: str, context: str, deaf: bool, entry_args: tuple[str, ...] | None = None
) -> LaunchControl:
    return LaunchControl(
        entry_args=entry_args,
        parent_pid=os.getpid(),
        # Only a spawned worker's parent is this process (a forkserver worker's is the
        # server): there it checks getppid() against our pid, to catch a launcher that
        # died before the worker armed its watch.
        pdeathsig=start_method == "spawn" and threading.current_thread() is threading.main_thread(),
        context=context,
        sigint_restore=deaf,
    )


_RANK_ARGS = ("rank", "local_rank", "world_size", "payload")


def _entry_args(names: Sequence[str]) -> tuple[str, ...]:
    """``entry_args=`` as a tuple of names; anything else is refused before any rank starts.

    Made a tuple before it is checked: an iterator (``iter(names)``, ``map(...)``) was used up
    by the check, so every rank's entry was called with no argument at all.  A set has no
    order of its own (names go by hash), so the entry got its arguments shuffled.
    """
    why = ""
    if isinstance(names, str | bytes):
        why = "one string, which would be read as its letters"
    elif isinstance(names, set | frozenset):
        why = "a set, whose order is its hash order: the entry's arguments would be shuffled"
    else:
        try:
            got = tuple(names)
        except TypeError:
            why = f"an object of type {type(names).__name__}, not a sequence"
        else:
            if all(isinstance(n, str) and n for n in got):
                return got
            why = f"{got!r} holds a name that is no non-empty str"
    raise ConfigError(
        f"entry_args={names!r}: {why}. Pass a sequence of argument names in the entry's order, "
        f"such as ('local_rank', 'rank', 'payload', 'pipe_writer'); each one of {_RANK_ARGS} "
        "or a key of rank_extra(rank). No worker was started.",
        setting="entry_args",
    )


def _rank_extra(rank_extra: Callable[[int], Mapping[str, Any]] | None, rank: int) -> dict[str, Any]:
    """What ``rank_extra(rank)`` gives rank ``rank``, refused as a ConfigError when it is not a
    mapping with str keys (before: a bare TypeError from deep in the launch)."""
    if rank_extra is None:
        return {}
    got = rank_extra(rank)
    if not isinstance(got, Mapping) or not all(isinstance(k, str) for k in got):
        raise ConfigError(
            f"rank_extra({rank}) returned {got!r}: it must return a mapping with str keys "
            "(each rank's spec.extra), e.g. {'port': 8000 + rank}.",
            setting="rank_extra",
        )
    return dict(got)


def _check_entry_args(names: tuple[str, ...] | None, extra: Mapping[str, Any], rank: int) -> None:
    """Every named entry argument exists for ``rank``, and means one thing: checked here, not
    as a worker KeyError, nor as a ``rank_extra`` value the launcher's own replaced."""
    shadowed = [n for n in names or () if n in _RANK_ARGS and n in extra]
    if shadowed:
        # ``rank_extra=lambda r: {"rank": node * 8 + r}`` with entry_args=("rank", ...): the
        # entry got the launcher's 0..nprocs-1, a second node's ranks the first node's
        raise ConfigError(
            f"entry_args names {shadowed}, which the launcher passes itself (this rank's "
            f"{', '.join(shadowed)} in the group), and rank_extra({rank}) returns "
            f"{', '.join(f'{n}={extra[n]!r}' for n in shadowed)} as well, which the entry "
            "would never get: give that key another name (e.g. 'global_rank') and name that "
            "in entry_args.",
            setting="rank_extra",
        )
    missing = [n for n in names or () if n not in _RANK_ARGS and n not in extra]
    if missing:
        raise ConfigError(
            f"entry_args names {missing} for rank {rank}, but rank_extra({rank}) returned "
            f"only {sorted(extra)}; each name must be one of {_RANK_ARGS} or a key "
            "rank_extra returns for every rank. Add it to rank_extra, or fix entry_args.",
            setting="entry_args",
        )


def _check_sendable(lctx: LaunchContext, extra: Mapping[str, Any], rank: int) -> None:
    """Each ``rank_extra`` value goes to its rank pickled with the context's reducer: one that
    cannot (a ``threading.Lock``, an open socket's wrapper) was a bare ``TypeError`` from
    multiprocessing's reduction after the ranks before it had started (and were stopped),
    naming neither ``rank_extra``, the rank nor the key."""
    for key, value in extra.items():
        try:
            lctx.dry_pickle(value)
        except Exception as exc:
            from spawnkit._names import qualified_name  # failure path only

            raise ConfigError(
                f"rank_extra({rank}) returned {key!r}: a {qualified_name(type(value))}, which "
                f"cannot be sent to rank {rank}'s process: {type(exc).__name__}: {exc}. Each value "
                f"travels to its worker pickled ({lctx.package}'s reducer, as a Process's "
                "arguments do): pass one that pickles (plain data, a Pipe end, a Lock, Queue or "
                f"Event of a '{lctx.start_method}' context), or make the object in the worker. "
                "No worker was started.",
                setting="rank_extra",
            ) from exc


def _check_flags(**flags: object) -> None:
    """On/off keywords are bools: read by truth value, ``prefix_output="no"`` meant on."""
    for name, value in flags.items():
        check_flag(name, value, call="spawn_with_plugins")


def _check_limits(
    nprocs: int,
    ready_timeout: float | None,
    join_timeout: float | None,
    grace_period: float,
    rank_extra: object,
) -> None:
    """Refused by their values alone, before the trace opens (no file, no span: nothing ran)."""
    if rank_extra is not None and not callable(rank_extra):
        raise ConfigError(
            f"rank_extra={rank_extra!r}: must be a function of the rank returning a mapping, "
            "e.g. rank_extra=lambda rank: {'port': 8000 + rank}. No worker was started.",
            setting="rank_extra",
        )
    check_count("nprocs", nprocs)
    check_seconds("ready_timeout", ready_timeout, none="no startup limit")
    check_seconds("join_timeout", join_timeout, none="no limit")
    if (
        grace_period is None
        or check_seconds("grace_period", grace_period, none="", zero_ok=True) is None
    ):
        raise ConfigError(
            "grace_period=None: must be a number of seconds (0: SIGKILL right after SIGTERM).",
            setting="grace_period",
        )


def _start_ranks(
    group: WorkerGroup,
    lctx: LaunchContext,
    template: ProcessSpec,
    rank_extra: Callable[[int], Mapping[str, Any]] | None,
    deaf: bool,
) -> None:
    """Start every rank into ``group``; any failure (Ctrl-C included) tears down those started."""
    from spawnkit.launch import _interrupt, _sigterm
    from spawnkit.launch.group import _live_groups

    _live_groups.add(group)
    _sigterm.watch()  # a SIGTERM to the launcher tears the group down, as Ctrl-C does
    try:
        extras = [_rank_extra(rank_extra, rank) for rank in range(template.world_size)]
        for rank, extra in enumerate(extras):  # every rank's, before any process starts
            _check_entry_args(template._control.entry_args, extra, rank)
            _check_sendable(lctx, extra, rank)
        if deaf and lctx.start_method == "spawn":
            _interrupt.tracker_first(lctx.package)  # first: it unblocks SIGINT
        for rank, extra in enumerate(extras):
            begun = time.monotonic()
            with _interrupt.children_start_deaf(deaf):
                started = _start_rank(lctx, template, rank, extra, group._output)
                group._adopt(started)
            if group._trace is not None:
                popen = getattr(started.proc, "_popen", None)  # its marks: protocol.popen
                group._trace.started(rank, started.pid, begun, getattr(popen, "marks", ()))
        # psutil is imported here, not at module level: a launching script that imports this
        # module is re-imported by every spawned worker, which should not pay for it.  Inside
        # the try: a Ctrl-C during that import must not leave the started workers running.
        from spawnkit.launch._cleanup import record_run

        record_run(group.run_id, group.pids)
    except BaseException as exc:
        group._stopped(exc)  # the launch raised: its trace's error (no rank's failure is)
        group.__exit__(*sys.exc_info())  # as leaving its ``with``: Ctrl-C marks the teardown
        raise


def _start_rank(
    lctx: LaunchContext,
    template: ProcessSpec,
    rank: int,
    extra: dict[str, Any],
    output: OutputRelay | None = None,
) -> Rank:
    from spawnkit.launch._rank import Rank

    report_r, report_w = lctx.pipe()
    death_r, death_w = lctx.pipe()
    fault_r, fault_w = lctx.pipe()
    out_r, out_w = lctx.pipe() if output is not None else (None, None)
    err_r, err_w = lctx.pipe() if output is not None else (None, None)
    spec = template.replace(
        rank=rank,
        local_rank=rank,
        report_conn=report_w,
        death_conn=death_r,
        extra=extra,
        _control=template._control.replace(
            fault_conn=fault_w, stdout_conn=out_w, stderr_conn=err_w
        ),
    )
    proc = lctx.process(spec, f"spawnkit-{template.run_id}-rank{rank}")
    try:
        lctx.start(proc)
    except BaseException:
        for conn in (report_r, report_w, death_r, death_w, fault_r, fault_w, out_r, err_r):
            if conn is not None:
                conn.close()
        raise
    finally:
        # The child has its own copies now; ours must go, or EOF would never arrive.
        for conn in (report_w, death_r, fault_w, out_w, err_w):
            with contextlib.suppress(OSError):
                if conn is not None:
                    conn.close()
    if output is not None and out_r is not None and err_r is not None:
        output.add(rank, os.dup(out_r.fileno()), os.dup(err_r.fileno()))
        out_r.close()
        err_r.close()
    os.set_blocking(fault_r.fileno(), False)
    now = time.monotonic()
    return Rank(rank, proc, report_r, death_w, fault_r, proc.pid, started=now, stage_since=now)


# --------------------------------------------------------------- the spec template
_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})


def build_spec(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    nprocs: int = 1,
    namespace: Namespace | NamespaceConfig | str | None = None,
    env: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> ProcessSpec:
    """The rank-0 spec template for a group of ``nprocs`` ranks running ``entry(payload)``."""
    import uuid

    from spawnkit.bootstrap._parent_death import RUN_ID_VAR
    from spawnkit.launch._selection import parent_selection

    check_count("nprocs", nprocs)
    check_run_id(run_id, "build_spec")
    ns = get_namespace(namespace)
    entry_str, entry_payload = entry_reference(entry)
    if entry_str:
        check_entry_module(entry_str)
    captured: Payload | None
    if payload is None or isinstance(payload, Payload):
        captured = payload
    else:
        captured = Payload.capture(payload)
    child_env = check_env_values(env)
    platform, plugins, entry_points = parent_selection(ns, child_env)
    detected = None if _platform_chosen(ns.config, child_env) else platform
    run_id = run_id or uuid.uuid4().hex[:16]
    child_env[RUN_ID_VAR] = run_id
    return ProcessSpec(
        entry=entry_str,
        world_size=nprocs,
        namespace=ns.config,
        platform=platform,
        plugins=plugins,
        entry_points=entry_points,
        env=child_env,
        payload=captured,
        entry_payload=entry_payload,
        run_id=run_id,
        _control=LaunchControl(detected_platform=detected),
    )


def _platform_chosen(config: Any, env: Mapping[str, str]) -> bool:
    """Whether the user chose the platform (``<PREFIX>_PLATFORM``, or ``_USE_CPU_ENGINE``, in
    ``env=`` or this process's environment), not this machine's detection."""
    from spawnkit.launch._checks import namespace_value
    from spawnkit.platforms._table import _TRUE

    chosen = (namespace_value(env, os.environ, config.platform_var) or "").strip()
    cpu = (namespace_value(env, os.environ, config.cpu_engine_var) or "").strip().lower()
    return bool(chosen) or cpu in _TRUE


def entry_reference(entry: str | Callable[..., Any]) -> tuple[str, Payload | None]:
    """``"module:qualname"`` when the child can import it; otherwise the callable by value.

    By reference only when it resolves back to this very object: a decorated or re-bound
    function would otherwise make the workers import something else under its name.
    """
    if isinstance(entry, str):
        try:
            _reference.parse(entry)
        except _reference.BadReference as exc:
            raise ConfigError(
                f"entry must be 'module:function' (for example 'myengine.worker:run'), "
                f"got {entry!r}: {exc.why}",
                setting="entry",
            ) from None
        return entry, None
    if not callable(entry):
        raise EntryResolutionError(
            f"entry {entry!r} (type {type(entry).__name__}) is not callable; pass a "
            "'module:function' string (for example 'myengine.worker:run') or a callable",
            stage=Stage.RESOLVE_ENTRY.value,
        )
    from spawnkit.bootstrap import _entry  # the parent's only: a re-run script imports less

    # refused here, once, not in every rank after its bootstrap
    what = f"entry {getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', entry)}"
    _entry.refuse_unrun(entry, what, stage=Stage.RESOLVE_ENTRY.value)
    reference = _by_name(entry)
    if reference:
        return reference, None
    return "", Payload.capture(entry, by_value=True)


def _by_name(entry: Callable[..., Any]) -> str:
    """The entry's ``"module:qualname"`` when it resolves back to it, else ``""``.

    A bound method is a new object at each attribute read, so ``Engine.serve`` (a classmethod)
    is matched by equality (same function, same ``__self__``): by identity it went by value,
    and cloudpickle copied the original function, so the workers ran it unhooked."""
    owner: Any = getattr(entry, "__module__", None)
    name: Any = getattr(entry, "__qualname__", None)
    if (
        isinstance(owner, str)
        and isinstance(name, str)
        and owner not in _MAIN_MODULES
        and "<" not in name
    ):
        obj: Any = sys.modules.get(owner)
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is entry or (isinstance(entry, MethodType) and obj == entry):
            return f"{owner}:{name}"
    return _instance_method_name(entry) if isinstance(entry, MethodType) else ""


def _instance_method_name(method: MethodType) -> str:
    """``"module:NAME.meth"`` for a method of a module-level instance (``ENGINE.run``).

    By value the instance travelled as a copy the worker's hooks never saw (a hook on
    ``"eng.sched:ENGINE.run"`` patches that module's instance), so its original method ran."""
    instance, func = method.__self__, method.__func__
    meth = getattr(func, "__name__", "")
    homes = (getattr(type(instance), "__module__", None), getattr(func, "__module__", None))
    for home in dict.fromkeys(homes):
        module = sys.modules.get(home) if isinstance(home, str) else None
        if module is None or home in _MAIN_MODULES:
            continue
        for global_name, value in list(vars(module).items()):
            named = value is instance and global_name.isidentifier()
            if named and getattr(instance, meth, None) == method:
                return f"{home}:{global_name}.{meth}"
    return ""
