"""A spawnkit worker group on a Ray cluster: one fresh actor per rank, same spec, same bootstrap.

Usage::

    import ray, spawnkit.ray
    ray.init(address="auto")
    group = spawnkit.ray.spawn_on_ray("myengine.worker:run", args, nprocs=4,
                                      resources={"GPU": 1}, ready_timeout=120, join_timeout=3600)
    reports = group.wait_ready()
    results = group.results()

The spec, the bootstrap, the errors and the group's contract (``GroupContract``) are the
local ones: each actor runs :func:`spawnkit.bootstrap.bootstrap_process` on the same
picklable ``ProcessSpec``; a dead actor is a ``ChildExitedError`` (``NodeLostError`` when Ray
marks its node dead).  Each group's actors get a runtime env of their own, so Ray starts new
worker processes for them; a process that already holds applied hooks refuses to bootstrap.

Environment: on top of what Ray gives every worker on their node (its
raylet's environment: for a local cluster, the driver's at ``ray.init``), the
actors get ``spec.env`` plus ``env=`` (later wins), minus
:data:`spawnkit.scaleout.env.NEVER_COPY_ENV` (device visibility, rank
variables: Ray assigns devices per actor, and ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE``/``LOCAL_WORLD_SIZE`` are set from each actor's rank), plus
``RAY_ADDRESS`` so an engine that spawns further Ray work from inside a rank
joins the same cluster.  Put ``PYTHONPATH`` into ``env`` when plugins or the
entry live outside the installed packages.

The namespace's own variables set in the driver (``<PREFIX>_PLUGINS``,
``_HOOK_CONFLICTS``, ``_IMPORT_GUARD``, ``_LENIENT_PLUGINS``, ...,
the engine's ``extra_env``) are forwarded into the ranks' environment where
``env=`` does not set them, as a local launcher's workers inherit them: a
raylet's environment is not the driver's on a cluster joined by address, nor
for a variable set after ``ray.init()`` (see ``_ray_settings``).  The plugin
selection they make is resolved here once (a name nothing installed provides
is a ``PluginError`` here) and pinned in the spec, so the plugin-set record
the ranks check covers exactly the plugins they load.

Platform selection is *not* pinned from the driver by default: a Ray driver
often runs on a node without the accelerators of its workers.  Each rank
resolves its platform from its own environment unless ``platform=`` is given;
a ``<PREFIX>_PLATFORM`` (or ``_USE_CPU_ENGINE``) set in the driver is the
user's choice, not the driver's detection, and is forwarded like the others
for each rank to resolve on its own node (unset it in the driver to leave
each node's own).

``ray`` is an optional dependency: ``pip install "spawnkit[ray]"``.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spawnkit._waits import in_slices
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import (
    ChildError,
    ChildExitedError,
    ConfigError,
    LauncherUnavailableError,
)
from spawnkit.launch._checks import check_seconds
from spawnkit.launch.group import GroupContract
from spawnkit.launch.launcher import entry_reference
from spawnkit.protocol import failure
from spawnkit.protocol.failure import PRE_BOOTSTRAP
from spawnkit.scaleout._node_selection import node_decides_platform
from spawnkit.scaleout._ray_nodes import dead_nodes, wait_node_dead
from spawnkit.scaleout._ray_place import not_placed, release, start_actors
from spawnkit.scaleout._ray_ranks import LAUNCHER as _LAUNCHER
from spawnkit.scaleout._ray_ranks import RankOutput, RankTable
from spawnkit.scaleout.env import split_env
from spawnkit.spec import Payload, ProcessSpec

if TYPE_CHECKING:
    from spawnkit.bootstrap.report import BootstrapReport
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["INSTALL_HINT", "RayWorkerGroup", "spawn_on_ray", "spawn_spec_on_ray"]

_log = logging.getLogger("spawnkit.ray")

INSTALL_HINT = 'pip install "spawnkit[ray]"'
#: Extra seconds the driver waits beyond a deadline for an actor's own answer to arrive.
_RPC_SLACK_S = 5.0
#: How long a dead rank's already-returned ``run`` result is waited for before blaming the death.
_RETURNED_WAIT_S = 0.5
#: Ray's placement strategies; anything else is refused before a placement group is made.
_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
#: How often the wait loops ask Ray's node table whether a running rank's node died.
_NODE_POLL_S = 2.0
#: How long a wait loop's poll of the ranks' output waits for their answers (a busy rank's
#: output comes with the next poll, or with its outcome).
_OUTPUT_POLL_S = 1.0
#: How long an unreachable rank's node is given to be declared dead before blaming the rank.
_NODE_VERDICT_S = 5.0


def _ray() -> Any:
    """``import ray`` with the install hint; Ray is optional and heavy."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"spawnkit.ray needs Ray, which is not installed in this environment "
            f"({exc}). Install it with: {INSTALL_HINT}"
        ) from exc
    return ray


def build_template(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    namespace: Namespace | NamespaceConfig | str | None = None,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
    plugins: Sequence[str] | None = None,
    run_id: str | None = None,
) -> ProcessSpec:
    """The spec every rank starts from (rank fields are filled in per actor)."""
    from spawnkit.launch._checks import check_env_values
    from spawnkit.launch._env_check import check_env
    from spawnkit.namespace import get_namespace
    from spawnkit.scaleout._plugin_set import plugin_digest, plugin_rows
    from spawnkit.scaleout._ray_settings import driver_settings, plugin_selection
    from spawnkit.spec._control import LaunchControl

    env = check_env_values(env)  # text, before anything reads it
    ns = get_namespace(namespace)
    check_env(ns, env)  # typos and other namespaces' variables, once
    entry_str, entry_payload = entry_reference(entry)
    if payload is not None and not isinstance(payload, Payload):
        payload = Payload.capture(payload)
    config = ns.config
    # A rank sees its raylet's environment, not this one: the namespace's settings made
    # here travel in env= (see _ray_settings), and the plugin selection is resolved here.
    env = {**driver_settings(config, env), **env}
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    selected = plugin_selection(ns, env, plugin_rows(config, None, pythonpath), plugins)
    # The launcher's plugin set, for each rank to compare with its own node's.
    rows = plugin_rows(config, selected, pythonpath)
    return ProcessSpec(
        entry=entry_str,
        entry_payload=entry_payload,
        namespace=config,
        platform=platform,
        plugins=selected,
        env=env,
        payload=payload,
        run_id=run_id or f"ray-{uuid.uuid4().hex[:12]}",
        _control=LaunchControl(plugin_rows=rows, plugin_digest=plugin_digest(rows)),
    )


def spawn_on_ray(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    nprocs: int,
    namespace: Namespace | NamespaceConfig | str | None = None,
    resources: Mapping[str, float] | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float | None = 300.0,
    join_timeout: float | None = None,
    platform: str | None = None,
    plugins: Sequence[str] | None = None,
    strategy: str = "PACK",
    prefix_output: bool = False,
) -> RayWorkerGroup:
    """Start ``nprocs`` ranks of ``entry`` on the connected Ray cluster (see module docstring).

    ``resources`` is what *one* rank needs (default ``{"CPU": 1}``); ``strategy`` as in Ray.
    """
    from spawnkit._flags import check_flag

    check_flag("prefix_output", prefix_output, call="spawn_on_ray")  # before the spec's work
    template = build_template(
        entry, payload, namespace=namespace, env=env, platform=platform, plugins=plugins
    )
    return spawn_spec_on_ray(
        template,
        nprocs=nprocs,
        resources=resources,
        ready_timeout=ready_timeout,
        join_timeout=join_timeout,
        strategy=strategy,
        prefix_output=prefix_output,
    )


def _bundle(resources: Mapping[str, float] | None) -> dict[str, float]:
    """One rank's bundle; each amount a finite number: ``float()`` read ``{"GPU": True}`` as
    one GPU, ``"2"`` as two and let NaN through (no comparison with it is true)."""
    for key, value in (resources or {}).items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            what = (
                f"a bool would be read as {int(value)}"
                if isinstance(value, bool)
                else f"a {type(value).__name__} is none"
                if not number
                else "this one is not finite"
            )
            raise ConfigError(
                f"spawn_on_ray(resources={{{key!r}: {value!r}}}): an amount of a resource is a "
                f"finite number of units per rank, and {what}; pass e.g. "
                f"resources={{{key!r}: 1}}. No actor was started.",
                setting="resources",
            )
    bundle = {str(k): float(v) for k, v in (resources or {"CPU": 1.0}).items()}
    bad = {k: v for k, v in bundle.items() if v < 0}
    if bad or not any(v > 0 for v in bundle.values()):
        raise ValueError(
            f"resources must give each rank a positive amount of something, got {dict(bundle)}"
        )
    return bundle


def spawn_spec_on_ray(
    template: ProcessSpec,
    *,
    nprocs: int,
    resources: Mapping[str, float] | None = None,
    ready_timeout: float | None = 300.0,
    join_timeout: float | None = None,
    strategy: str = "PACK",
    prefix_output: bool = False,
) -> RayWorkerGroup:
    """:func:`spawn_on_ray` from a ready spec template (what ``spawn_with_plugins`` builds)."""
    from spawnkit._flags import check_flag
    from spawnkit.launch._checks import check_count, check_seconds

    check_flag("prefix_output", prefix_output, call="spawn_spec_on_ray")
    check_count("nprocs", nprocs)
    check_seconds("ready_timeout", ready_timeout, none="no startup limit")
    check_seconds("join_timeout", join_timeout, none="no limit")
    if strategy not in _STRATEGIES:
        raise ValueError(
            f"strategy must be one of {', '.join(_STRATEGIES)} (Ray's placement strategies), "
            f"got {strategy!r}; SPREAD puts ranks on different nodes where it can, "
            "STRICT_SPREAD only on different nodes."
        )
    if template.report_conn is not None or template.death_conn is not None:
        raise ValueError(
            "a spec for Ray ranks cannot hold report_conn/death_conn: those are pipes of this "
            "process; Ray actors report through their method results instead."
        )
    bundle = _bundle(resources)  # by its values alone: before Ray is imported or asked
    ray = _ray()
    if not ray.is_initialized():
        raise LauncherUnavailableError(
            "spawnkit.ray needs a connected Ray cluster, and ray.init() has not been called in "
            "this process. spawnkit does not start clusters: call ray.init(address=...) (or "
            "ray.init() for a local one) first."
        )
    run_id = template.run_id or f"ray-{uuid.uuid4().hex[:12]}"
    env, dropped = split_env(template.env, context=f"Ray group {run_id}")
    # A runtime env of its own makes Ray start new worker processes for this group; the run
    # id is also what spawnkit.cleanup(run_id) looks for.
    from spawnkit.bootstrap._parent_death import RUN_ID_VAR

    actor_env = dict(env)
    actor_env[RUN_ID_VAR] = run_id
    template = node_decides_platform(
        template.replace(env=env, run_id=run_id, world_size=nprocs, rank=0, local_rank=0)
    )
    return RayWorkerGroup(
        ray,
        template,
        nprocs=nprocs,
        bundle=bundle,
        actor_env=actor_env,
        dropped_env=dropped,
        ready_timeout=ready_timeout,
        join_timeout=join_timeout,
        strategy=strategy,
        prefix_output=prefix_output,
    )


class RayWorkerGroup(GroupContract):
    """A running group of Ray ranks: the local ``WorkerGroup``'s contract (``GroupContract``)
    and errors; leaving its ``with`` block releases the actors and the placement group."""

    def __init__(
        self,
        ray: Any,
        template: ProcessSpec,
        *,
        nprocs: int,
        bundle: dict[str, float],
        actor_env: dict[str, str],
        dropped_env: list[str],
        ready_timeout: float | None,
        join_timeout: float | None,
        strategy: str,
        prefix_output: bool = False,
    ) -> None:
        """Place and start the ranks; called by :func:`spawn_spec_on_ray`, not by users."""
        from ray.util.placement_group import placement_group

        self._ray = ray
        self.run_id = template.run_id
        self.nprocs = nprocs
        self.dropped_env = list(dropped_env)
        self.ready_timeout = ready_timeout
        self.join_timeout = join_timeout
        self._t0 = time.monotonic()
        # None: no startup limit, as check_seconds says (before: float + None, a TypeError)
        self._deadline = self._t0 + (math.inf if ready_timeout is None else ready_timeout)
        self._actors: list[Any] = []
        self._ranks = RankTable(self.run_id, nprocs)
        self._run_refs: list[tuple[int, Any]] = []
        self._reports: list[BootstrapReport | None] = [None] * nprocs
        self._outcomes: list[dict[str, Any] | None] = [None] * nprocs
        self._closed = False
        self._output = RankOutput(prefix_output)
        self._pg: Any = placement_group([dict(bundle) for _ in range(nprocs)], strategy=strategy)
        try:
            self._place(bundle, strategy)
            start_actors(ray, self._pg, bundle, actor_env, nprocs, into=self._actors)
            self._ranks.stage[:] = [PRE_BOOTSTRAP] * nprocs
            self._locate()
            self._launch(template)
        except BaseException:
            self.terminate()
            raise

    def _remaining(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def _place(self, bundle: dict[str, float], strategy: str) -> None:
        ray = self._ray
        try:
            _ray_get(ray, self._pg.ready(), self._remaining())
        except ray.exceptions.GetTimeoutError:
            waited = time.monotonic() - self._t0
            raise not_placed(ray, self.run_id, self.nprocs, bundle, strategy, waited) from None

    def _locate(self) -> None:
        """Learn each actor's node, so local ranks can be numbered per node."""
        refs = [a.where.remote() for a in self._actors]
        for rank, ref in enumerate(refs):
            try:
                self._ranks.locate(rank, self._get(ref, rank, self._remaining() + _RPC_SLACK_S))
            except self._ray.exceptions.GetTimeoutError:
                raise self._timeout([rank], "starting its Ray worker process") from None

    def _launch(self, template: ProcessSpec) -> None:
        for rank, data in enumerate(_rank_specs(template, self._ranks.where)):
            self._ranks.stage[rank] = PRE_BOOTSTRAP
            self._run_refs.append((rank, self._actors[rank].run.remote(rank, data)))

    def _get(self, ref: Any, rank: int, timeout: float | None) -> Any:
        """``ray.get`` with an actor's death turned into ``ChildExitedError``."""
        ray = self._ray
        try:
            return _ray_get(ray, ref, timeout)
        except ray.exceptions.RayActorError as exc:
            # A rank that failed returns its record from run() and then exits: when the
            # driver asks later, the actor is gone but the record (and traceback) is not.
            record = self._returned_failure(rank)
            if record is not None:
                raise self._fail(self._raised(record)) from None
            raise self._fail(self._died(rank, exc)) from None

    def _returned_failure(self, rank: int) -> failure.Failed | None:
        """The failure record ``rank``'s ``run`` returned before its actor exited, if any."""
        ref = dict(self._run_refs).get(rank)
        try:  # a bounded wait: the record is there already, or the actor died without one
            outcome = self._ray.get(ref, timeout=_RETURNED_WAIT_S) if ref is not None else {}
        except self._ray.exceptions.RayError:  # GetTimeoutError included
            return None
        return outcome.get("failure") if outcome.get("status") == "failed" else None

    def _died(self, rank: int, exc: BaseException) -> ChildExitedError:
        # "Unavailable" is what a call sees first when the node goes away; give Ray's health
        # check a bounded moment to say whether the node itself is dead.
        unreachable = isinstance(exc, getattr(self._ray.exceptions, "ActorUnavailableError", ()))
        node_id = str(self._ranks.where[rank].get("node", ""))
        if wait_node_dead(self._ray, node_id, _NODE_VERDICT_S if unreachable else 0.0):
            return self._ranks.node_lost(rank)
        return self._ranks.died(rank, str(exc))

    def _check_nodes(self, ranks: list[int]) -> None:
        """Raise ``NodeLostError`` (tearing down) if a node hosting one of ``ranks`` is dead."""
        nodes = {str(self._ranks.where[r].get("node", "")): r for r in sorted(ranks, reverse=True)}
        dead = dead_nodes(self._ray, nodes)
        if dead:
            first = min(nodes[n] for n in dead)
            raise self._fail(self._ranks.node_lost(first))

    def _raised(self, record: failure.Failed) -> ChildError:
        """The error for a record a rank returned (it names itself: pid, host, node)."""
        who = failure.Worker.of(record, _LAUNCHER)
        return failure.raised_error(record, who, effect=self._ranks.effect(who.rank))

    def _timeout(self, ranks: list[int], doing: str) -> ChildError:
        """``ranks`` did not finish ``doing`` by the startup deadline: stop the group."""
        return self._fail(self._ranks.late(ranks, doing, time.monotonic() - self._t0))

    def _stop_for(self, err: ChildError) -> None:
        if not self._closed:  # what the ranks wrote before it, ahead of the error
            _add_own_failures(self, err)  # the other ranks' own, before they are stopped
            self._output.poll(self._ray, self._actors, _RPC_SLACK_S)
        self.terminate()

    def _settle(self, rank: int, outcome: dict[str, Any]) -> None:
        """Keep a rank's finished ``run`` outcome; a failed one fails the group."""
        self._output.show(rank, outcome.get("output") or {}, final=True)
        if outcome["status"] == "failed":
            raise self._fail(self._raised(outcome["failure"]))
        self._outcomes[rank] = outcome
        self._ranks.stage[rank] = "finished"

    def wait_ready(self, timeout: float | None = None) -> list[BootstrapReport]:
        timeout = _seconds(timeout, "wait_ready")
        self._raise_first()
        if all(r is not None for r in self._reports):
            return [r for r in self._reports if r is not None]
        if self._closed:
            raise self._ranks.stopped(self._reports.index(None), "became ready")
        budget = self._remaining() if timeout is None else timeout
        deadline = time.monotonic() + budget
        pending = {
            self._actors[r].wait_ready.remote(budget): r
            for r in range(self.nprocs)
            if self._reports[r] is None
        }
        for ref, rank in self._finished(pending, deadline + _RPC_SLACK_S):
            if not self._answer(rank, self._get(ref, rank, 0)):
                break  # its own wait ran out: it is late
            del pending[ref]
        if pending:
            raise self._late(pending)
        return [r for r in self._reports if r is not None]

    def _finished(
        self, pending: dict[Any, int], deadline: float | None
    ) -> Iterator[tuple[Any, int]]:
        """``(ref, rank)`` of each call in ``pending`` as it finishes, until ``deadline`` (the
        caller removes what it took); the ranks' nodes are checked between polls."""
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            slice_s = _NODE_POLL_S if left is None else min(left, _NODE_POLL_S)
            done, _ = self._ray.wait(list(pending), num_returns=1, timeout=slice_s)
            if done:
                yield done[0], pending[done[0]]
                continue
            self._output.poll(self._ray, self._actors, _OUTPUT_POLL_S)
            self._check_nodes(list(pending.values()))
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _answer(self, rank: int, answer: dict[str, Any]) -> bool:
        """Take a rank's ``wait_ready`` answer; True once it is ready; a failure fails the group."""
        if answer.get("status") == "failed":
            raise self._fail(self._raised(answer["failure"]))
        if answer.get("status") == "ready":
            self._reports[rank] = answer["report"]
            self._ranks.stage[rank] = Stage.ENTRY.value
            return True
        self._ranks.stage[rank] = answer.get("stage") or self._ranks.stage[rank]
        return False

    def _late(self, pending: dict[Any, int]) -> ChildError:
        """The timeout error, after collecting each late rank's own answer about its stage."""
        ray = self._ray
        refs = list(pending)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=_RPC_SLACK_S)
        for ref in done:
            try:
                answer = ray.get(ref, timeout=0)
            except Exception:
                continue
            # One that failed just as the deadline passed: that failure is the better answer.
            self._answer(pending[ref], answer)
        late = [r for r in sorted(pending.values()) if self._reports[r] is None]
        return self._timeout(late or sorted(pending.values()), "their bootstrap")

    def join(self, timeout: float | None = None) -> bool:
        """A rank's death raises ``ChildExitedError``, or ``NodeLostError`` with its node."""
        timeout = _seconds(timeout, "join")
        self._raise_first()
        deadline = None if timeout is None else time.monotonic() + timeout
        join_deadline = None if self.join_timeout is None else self._t0 + self.join_timeout
        pending = {ref: rank for rank, ref in self._run_refs if self._outcomes[rank] is None}
        if self._closed:
            return self._join_closed(pending)
        limits = [d for d in (deadline, join_deadline) if d is not None]
        for ref, rank in self._finished(pending, min(limits) if limits else None):
            del pending[ref]
            self._settle(rank, self._get(ref, rank, 0))
        if pending:
            if join_deadline is not None and time.monotonic() >= join_deadline:
                raise self._join_timed_out(sorted(pending.values()))
            return False
        self.terminate()
        return True

    def results(self, timeout: float | None = None) -> list[Any]:
        if not self.join(timeout) and not self._closed:
            running = [r for r in range(self.nprocs) if self._outcomes[r] is None]
            raise self._ranks.results_timeout(running, float(timeout or 0.0))
        for rank, outcome in enumerate(self._outcomes):
            if outcome is None:  # terminate() stopped it before its entry returned
                raise self._ranks.stopped(rank, "returned from its entry function")
        return [o["result"] if o is not None else None for o in self._outcomes]

    def _join_closed(self, pending: dict[Any, int]) -> bool:
        """``join`` after ``terminate()``: keep the outcomes that arrived; the rest were stopped."""
        ray = self._ray
        done = ray.wait(list(pending), num_returns=len(pending), timeout=0)[0] if pending else []
        for ref in done:
            try:
                outcome = ray.get(ref, timeout=0)
            except ray.exceptions.RayError:  # killed by terminate()
                continue
            self._settle(pending[ref], outcome)
        # Stopped work is not done work: True only if every rank's entry returned.
        return all(o is not None for o in self._outcomes)

    def _join_timed_out(self, running: list[int]) -> ChildError:
        """The group's ``join_timeout`` passed with ranks still running: tear down, as locally."""
        waited = time.monotonic() - self._t0
        return self._fail(self._ranks.join_timed_out(running, waited, self.join_timeout))

    @property
    def reports(self) -> list[BootstrapReport | None]:
        return list(self._reports)

    @property
    def pids(self) -> list[int | None]:
        return [w.get("pid") for w in self._ranks.where]

    @property
    def nodes(self) -> list[str]:
        return [str(w.get("node", "")) for w in self._ranks.where]

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles by rank (for inspection; do not call ``run`` on them)."""
        return list(self._actors)

    @property
    def exit_codes(self) -> list[int | None]:
        """Per rank: 0 finished, 1 raised, None while running or when its actor died.

        Ray does not tell the driver how an actor's process ended, so a killed rank is None.
        """
        self._watched = True
        return _exit_codes(self._outcomes, self._failure)

    @property
    def world_size(self) -> int:
        return self.nprocs

    @property
    def stages(self) -> list[str]:
        """Per rank, the last stage the driver knows of (``entry`` once ready)."""
        return list(self._ranks.stage)

    @property
    def start_method(self) -> str:
        return _LAUNCHER

    def _unfinished(self) -> tuple[list[int], list[int]]:
        return _unfinished(self._ray, self._run_refs, self._outcomes), []

    def terminate(self) -> None:
        """Kill every actor and release the placement group; safe to call repeatedly."""
        if not self._closed:
            self._closed = True
            release(self._ray, self._actors, self._pg, self.run_id, self.nprocs)

    def __repr__(self) -> str:
        ready = sum(r is not None for r in self._reports)
        return f"<RayWorkerGroup {self.run_id} nprocs={self.nprocs} ready={ready}>"


def _add_own_failures(group: RayWorkerGroup, err: ChildError) -> None:
    """The other ranks that failed on their own as ``err``'s did (their ``run`` returned a
    failure, or their actor died), by now or within a short wait (a rank failing a moment
    later, as ranks hitting one bug do), added to ``err`` as a local group adds its others';
    a rank whose entry returned meanwhile is kept as finished."""
    ray, ranks = group._ray, group._ranks
    said = ranks.effect(err.rank) if err.rank is not None else ""  # the Effect line err has
    pending = {ref: n for n, ref in group._run_refs if group._outcomes[n] is None}
    pending = {ref: n for ref, n in pending.items() if n != err.rank}
    if not pending:
        return
    done = ray.wait(list(pending), num_returns=len(pending), timeout=_RETURNED_WAIT_S)[0]
    others: dict[int, ChildError] = {}
    for ref in done:
        rank = pending[ref]
        try:
            outcome = ray.get(ref, timeout=0)
        except ray.exceptions.RayActorError as exc:  # it died on its own: nothing killed it yet
            others[rank] = ranks.died(rank, str(exc))
            continue
        except ray.exceptions.RayError:
            continue
        if outcome.get("status") != "failed":
            group._settle(rank, outcome)
            continue
        group._output.show(rank, outcome.get("output") or {}, final=True)
        ranks.stage[rank] = outcome["failure"].stage or ranks.stage[rank]
        others[rank] = group._raised(outcome["failure"])
    if others:
        ends = {n: "stopped" if o is None else "returned" for n, o in enumerate(group._outcomes)}
        ends.update(dict.fromkeys(others, "failed too, below"))
        ranks.add_other_failures(err, dict(sorted(others.items())), said, ends)


def _seconds(timeout: object, call: str) -> float | None:
    """A wait's ``timeout`` checked as the local group checks it: ``wait_ready(timeout=-1)``
    tore the group down as late ranks, ``"5"`` was a bare ``TypeError``."""
    none = "the group's ready_timeout" if call == "wait_ready" else "no limit"
    return check_seconds("timeout", timeout, none=none, zero_ok=True, call=call)


def _ray_get(ray: Any, ref: Any, timeout: float | None) -> Any:
    """``ray.get(ref, timeout=timeout)`` for any finite ``timeout``: Ray takes it in
    milliseconds as a C ``long``, so ``ready_timeout=sys.maxsize`` (accepted as seconds) was a
    bare ``OverflowError`` from placing the group, in place of the run."""
    return in_slices(lambda s: ray.get(ref, timeout=s), timeout, ray.exceptions.GetTimeoutError)


def _rank_specs(template: ProcessSpec, where: list[dict[str, Any]]) -> list[bytes]:
    """Each rank's pickled spec, by rank; local ranks are numbered per node."""
    per_node: dict[str, list[int]] = {}
    for rank, place in enumerate(where):
        per_node.setdefault(place.get("node", ""), []).append(rank)
    specs: dict[int, bytes] = {}
    for ranks in per_node.values():
        for local_rank, rank in enumerate(ranks):
            spec = template.replace(
                rank=rank,
                local_rank=local_rank,
                _control=template._control.replace(local_world_size=len(ranks)),
            )
            specs[rank] = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    return [specs[rank] for rank in range(len(where))]


def _exit_codes(outcomes: list[Any], failed: ChildError | None) -> list[int | None]:
    """``RayWorkerGroup.exit_codes``: 0 finished, 1 raised, None running or dead."""
    codes: list[int | None] = []
    for rank, outcome in enumerate(outcomes):
        if outcome is not None:
            codes.append(0)
        elif failed is not None and failed.rank == rank:
            codes.append(None if isinstance(failed, ChildExitedError) else 1)
        else:
            codes.append(None)
    return codes


def _unfinished(ray: Any, run_refs: list[tuple[int, Any]], outcomes: list[Any]) -> list[int]:
    """The ranks whose ``run`` has not returned, asked of Ray without waiting."""
    pending = {ref: rank for rank, ref in run_refs if outcomes[rank] is None}
    if not pending:
        return []
    done = set(ray.wait(list(pending), num_returns=len(pending), timeout=0)[0])
    return sorted(rank for ref, rank in pending.items() if ref not in done)
