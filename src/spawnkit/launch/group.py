"""``GroupContract``, what every worker group promises, and ``WorkerGroup``, the local one.

The contract is the base of this module's ``WorkerGroup`` and of
:class:`~spawnkit.scaleout.ray.RayWorkerGroup`: the two used to share their
interface by convention only, and it drifted (``_fail`` raised in one and
returned in the other), so the meanings are written once, here.

The group is also the one holder of its ranks' failures: a rank's FAILED or
EXITED record goes from the pipe (read here, not in ``_rank.py``) into the
group's table of failures in the order they came, and from there to
``failure.child_error``, so a failure crosses one launcher file.

What the local group adds to the contract, against the failures of other launchers
(``spawn_with_plugins`` in ``launcher.py`` starts the ranks into it):
* **The root cause reaches the caller.**  Each rank reports stage progress,
  then READY, or FAILED with stage, traceback and exception, over its own
  pipe; a rank that dies without reporting is described by its exit code or
  signal, the stage it was in and, for fatal signals, the faulthandler dump
  it wrote to a second pipe.  The first failure is raised as a typed,
  picklable :class:`~spawnkit.errors.ChildError` whose message starts with
  that cause and contains the child's traceback; it never points at logs.
* **Every wait is bounded.**  The parent waits on all report pipes and all
  process sentinels at once; startup has a real deadline (``ready_timeout``)
  that names the rank, the stage it is stuck in, for how long, and where (a
  stack dump requested from the stuck worker); teardown is
  grace -> SIGTERM -> SIGKILL with a bounded reap, and pids that survive are
  reported instead of waited on.
* **Nothing is left behind.**  Teardown snapshots each worker's process tree
  before signalling anything; workers die by themselves when the launcher
  dies, and end their own children first (death pipe, plus a guardian process
  per worker on Linux, see ``_parent_death``); every process carries the run id,
  so :func:`spawnkit.cleanup` can sweep orphans; groups still running when the
  interpreter exits are torn down by an ``atexit`` handler.
* **Decided once, in the parent.**  The platform and the allowed plugins are
  resolved here and frozen into every rank's spec; the payload is captured
  once; an entry that is not importable by reference travels by value.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import logging
import signal
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from spawnkit._waits import wait as _wait
from spawnkit.errors import ChildError, GroupExitWarning
from spawnkit.launch import _interrupt, _sigterm
from spawnkit.launch._checks import DEFAULT_GRACE_PERIOD, DEFAULT_READY_TIMEOUT, check_seconds
from spawnkit.launch._group_errors import GroupErrors, stacks_of
from spawnkit.launch._output import OutputRelay
from spawnkit.launch._progress import ProgressCallback, ProgressRelay
from spawnkit.launch._rank import Rank, reap_ranks
from spawnkit.protocol import failure
from spawnkit.protocol import messages as proto
from spawnkit.protocol.popen import LaunchContext, early_failure

__all__ = ["DEFAULT_GRACE_PERIOD", "DEFAULT_READY_TIMEOUT", "GroupContract", "WorkerGroup"]

_log = logging.getLogger("spawnkit.bootstrap")

_KILL_REAP_TIMEOUT = 5.0


_G = TypeVar("_G", bound="GroupContract")


class GroupContract(abc.ABC):
    """A started group of ranks; one meaning for each part, whatever runs the ranks.

    The meanings (first failure kept and re-raised, waits, context manager) are in README
    "Launch workers"; callers write ``raise self._fail(err)`` so every raise stays visible.
    """

    run_id: str
    _failure: ChildError | None = None
    _closed = False
    _watched = False  # the caller followed the ranks: a wait (each starts at _raise_first)
    _stopped_by: BaseException | None = None  # see ``_stopped``

    @property
    def failure(self) -> ChildError | None:
        """The group's first failure, ``None`` while none happened."""
        return self._failure

    def _fail(self, err: ChildError) -> ChildError:
        """Keep ``err`` unless a failure came first, tear down, and return the one to raise."""
        if self._failure is None:
            self._failure = err
            self._stop_for(err)
        else:
            self.terminate()
        return self._failure

    def _raise_first(self) -> None:
        """Every wait starts here: a failed group raises its first failure again."""
        self._watched = True
        if self._failure is not None:
            raise self._failure

    @abc.abstractmethod
    def _stop_for(self, err: ChildError) -> None:
        """Tear the group down because of ``err`` (adding what the teardown learned to it)."""

    @abc.abstractmethod
    def wait_ready(self, timeout: float | None = None) -> list[Any]:
        """Every rank's ``BootstrapReport`` by rank, once all passed their bootstrap."""

    @abc.abstractmethod
    def join(self, timeout: float | None = None) -> bool:
        """True once every rank's entry returned; False while ranks run at ``timeout``, and
        False at once for a group :meth:`terminate` stopped first."""

    @abc.abstractmethod
    def results(self, timeout: float | None = None) -> list[Any]:
        """The entries' return values by rank (``ChildExitedError`` for a rank stopped, or
        ended without returning: ``os._exit(0)``; ``sys.exit(0)`` in an entry gives None)."""

    @abc.abstractmethod
    def terminate(self) -> None:
        """Stop every rank and release what the group holds; safe to call again."""

    def close(self) -> None:
        """The same as :meth:`terminate`."""
        self.terminate()

    @property
    @abc.abstractmethod
    def world_size(self) -> int: ...

    @property
    def ranks(self) -> list[int]:
        return list(range(self.world_size))

    def __enter__(self: _G) -> _G:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, KeyboardInterrupt | _sigterm.Terminated):
            self._stopped(exc)
        self._leaving(exc_type)
        if exc_type is None and not self._watched and not self._closed:  # nobody followed them
            _warn_unwatched(self.run_id, *self._unfinished())
        self.terminate()

    def _leaving(self, exc_type: type[BaseException] | None) -> None:
        """How the ``with`` block ended, noted before the teardown (the base has no use for it)."""
        return None

    def _stopped(self, exc: BaseException) -> None:
        """What ended the launch from outside its ranks, the first: Ctrl-C, SIGTERM's
        ``Terminated``, a rank that could not be started.  Where no rank failed, it is the
        launch's error for its trace (the OpenTelemetry root span ERROR, as a rank's failure)."""
        if self._stopped_by is None:
            self._stopped_by = exc

    def _unfinished(self) -> tuple[list[int], list[int]]:
        """The ranks still running now (entries not returned) and those that failed, read
        without waiting."""
        return [], []


def _warn_unwatched(run_id: str, running: list[int], failed: list[int]) -> None:
    """`with spawn_with_plugins(...) as g: pass`: the ranks still running end unfinished, and
    a failure nothing waited for would be dropped unseen."""
    if not (running or failed):
        return
    import warnings

    parts = [f"rank(s) {', '.join(map(str, running))} were still running"] if running else []
    if failed:
        parts.append(f"rank(s) {', '.join(map(str, failed))} had failed, unseen")
    warnings.warn(
        GroupExitWarning(
            f"the `with` block of worker group {run_id} ended while {' and '.join(parts)}, "
            "and nothing in it waited for them: the teardown stops them unfinished. Call "
            "group.join() or group.results() in the block to wait for the entries (and raise "
            "a rank's failure), or group.terminate() to end them on purpose."
        ),
        stacklevel=3,  # the `with` statement: __exit__, then this
    )


_live_groups: weakref.WeakSet[WorkerGroup] = weakref.WeakSet()


def _teardown_live_groups() -> None:
    """At interpreter exit, end groups still running (multiprocessing would join them forever);
    a SIGTERM's ``Terminated`` that is ending this process is why (out of a wait, no `with`)."""
    for group in list(_live_groups):
        if _sigterm.raised is not None:
            group._stopped(_sigterm.raised)
        with contextlib.suppress(Exception):
            group.terminate()


atexit.register(_teardown_live_groups)


def _not_live(group: WorkerGroup) -> None:
    """``group`` is over; the last live one gives SIGTERM back (``launch._sigterm``)."""
    _live_groups.discard(group)
    if not _live_groups:
        _sigterm.unwatch()


class WorkerGroup(GroupContract):
    """A running group of bootstrapped workers (the contract's meanings: ``GroupContract``)."""

    def __init__(
        self,
        *,
        run_id: str,
        context: LaunchContext,
        ready_timeout: float | None,
        join_timeout: float | None,
        grace_period: float,
        progress: ProgressCallback | None = None,
        output: OutputRelay | None = None,
        trace: Any = None,
    ) -> None:
        self.run_id = run_id
        self._output = output
        self._relay = ProgressRelay(progress, run_id)
        self._interrupting = False
        self._ctx = context
        self._ready_timeout = ready_timeout
        self._join_timeout = join_timeout
        self._grace = max(0.0, grace_period)
        self._ranks: list[Rank] = []
        # The group's one table of failures, by rank in the order they came: the record a
        # rank sent (FAILED, EXITED), or None for a rank that ended unsuccessfully without one.
        self._failed: dict[int, proto.Failed | proto.Exited | None] = {}
        self._early: dict[int, proto.Failed] = {}  # what a rank sent before its spec arrived
        self._after_stop: set[int] = set()  # their record came once stopped: the stop's doing
        self._stages_at: dict[int, list[tuple[int, str]]] = {}  # where all were, by failed rank
        self._closed = False
        self._launched = time.monotonic()
        self._errors = GroupErrors(run_id, context, self._launched, ready_timeout, join_timeout)
        self._call_timeout: float | None = None  # wait_ready(timeout=) while it runs
        self.unreaped_pids: list[int] = []
        self._trace = trace  # spawn_with_plugins(trace=): written once the group closed

    # ---------------------------------------------------------- properties
    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self._ranks]

    @property
    def world_size(self) -> int:
        return len(self._ranks)

    @property
    def exit_codes(self) -> list[int | None]:
        """Per rank: the exit code, ``-N`` for signal N, ``None`` while running."""
        self._watched = True
        for r in self._ranks:
            if not self._closed and r.exitcode is None and r.proc.exitcode is not None:
                self._on_exit(r)
        return [r.exitcode for r in self._ranks]

    @property
    def stages(self) -> list[str]:
        """Per rank, the stage it last reported starting (``entry`` once ready)."""
        return [r.stage for r in self._ranks]

    @property
    def timeline(self) -> list[list[tuple[str, str, float]]]:
        """Per rank: (message, stage, seconds since its start call) as the launcher saw them."""
        return [list(r.events) for r in self._ranks]

    @property
    def start_method(self) -> str:
        return self._ctx.start_method

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._failure else "running"
        return f"<WorkerGroup run_id={self.run_id} ranks={self.world_size} {state}>"

    # ---------------------------------------------------------------- API
    def wait_ready(self, timeout: float | None = None) -> list[Any]:
        """``timeout`` overrides the remaining ``ready_timeout``; either expiring tears the
        group down with a ``BootstrapTimeoutError`` naming the limit."""
        timeout = check_seconds(
            "timeout", timeout, none="the group's ready_timeout", zero_ok=True, call="wait_ready"
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        self._call_timeout = timeout
        try:
            self._pump(lambda: all(r.ready for r in self._ranks), deadline, ready_deadline=deadline)
        finally:
            self._call_timeout = None
        return [r.report_obj for r in self._ranks]

    def join(self, timeout: float | None = None) -> bool:
        timeout = check_seconds("timeout", timeout, none="no limit", zero_ok=True, call="join")
        deadline = None if timeout is None else time.monotonic() + timeout
        done = self._pump(lambda: all(r.exitcode is not None for r in self._ranks), deadline)
        if not done:
            return False
        self._close(initial_grace=0.0)
        return not any(r.cut_short or (r.terminated and r.result is None) for r in self._ranks)

    def results(self, timeout: float | None = None) -> list[Any]:
        if not self.join(timeout) and not self._closed:
            late = [r for r in self._ranks if r.exitcode is None]
            raise self._errors.results_late(late, timeout if timeout is not None else 0.0)
        return [r.value(self._ctx.loads, self._errors.name) for r in self._ranks]

    def terminate(self) -> None:
        """Stop every worker now: SIGTERM, ``grace_period``, SIGKILL, bounded reap."""
        self._close(initial_grace=0.0)

    def _leaving(self, exc_type: type[BaseException] | None) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._interrupting = True  # Ctrl-C in the block: the teardown says so
            _read_sent(self)  # first: the stage each rank had reached, as the line names it

    def _unfinished(self) -> tuple[list[int], list[int]]:
        return _still_running(self)

    def _adopt(self, rank: Rank) -> None:
        """A rank ``spawn_with_plugins`` just started: supervised, and reported, from now on."""
        self._ranks.append(rank)
        self._relay.emit(rank.rank, proto.PRE_BOOTSTRAP, 0.0)

    # ------------------------------------------------------- event pumping
    def _pump(
        self,
        until: Callable[[], bool],
        deadline: float | None,
        *,
        ready_deadline: float | None = None,
    ) -> bool:
        """Process reports and exits until ``until()``; False at ``deadline``; raises failures."""
        self._raise_first()
        if ready_deadline is None and self._ready_timeout is not None:
            ready_deadline = self._launched + self._ready_timeout
        join_deadline = None if self._join_timeout is None else self._launched + self._join_timeout
        try:
            if not self._closed:  # what already came, read before any deadline: timeout=0 polls
                _seen_now(self)
            while True:
                if self._relay.error is not None:
                    err = self._relay.raised()
                    self._close(initial_grace=0.0)
                    raise err
                # A failure recorded outside this loop (``exit_codes`` polls exits) comes
                # before ``until()``: "every rank exited" must not turn it into success.
                if self._failed and not self._closed:
                    raise self._fail(self._rank_failed(next(iter(self._failed))))
                if until():
                    return True
                if self._closed:
                    return until()
                now = time.monotonic()
                not_ready = [r for r in self._ranks if not r.ready and r.exitcode is None]
                if not_ready and ready_deadline is not None and now >= ready_deadline:
                    world, call = self.world_size, self._call_timeout
                    raise self._fail(self._errors.not_ready(not_ready, now, world, call))
                running = [r for r in self._ranks if r.exitcode is None]
                if running and join_deadline is not None and now >= join_deadline:
                    raise self._fail(self._errors.join_expired(running, now, self.world_size))
                if deadline is not None and now >= deadline:
                    return False
                limits = [d for d in (deadline, join_deadline) if d is not None]
                if not_ready and ready_deadline is not None:
                    limits.append(ready_deadline)
                self._wait_once(None if not limits else max(0.0, min(limits) - now))
                if self._failed:
                    raise self._fail(self._rank_failed(next(iter(self._failed))))
        except KeyboardInterrupt as exc:  # (SIGTERM's Terminated: the `with` block's or at exit)
            self._stopped(exc)
            self._interrupting = True
            # What the ranks reported before the Ctrl-C (already in their pipes) first: the
            # summary names the stage each was in, not the last one this loop had read.
            for r in self._ranks:
                self._drain(r)
            for r in self._ranks:
                r.stop()
            self._close(initial_grace=0.0)
            raise

    def _wait_once(self, timeout: float | None) -> None:
        reported, exited = _ready(self._ranks, timeout)
        # Reports first: a FAILED message is the root cause of the exit that follows it.
        for r in reported:
            self._drain(r)
        for r in exited:
            self._on_exit(r)

    def _drain(self, r: Rank) -> None:
        for msg in _messages(r):
            self._on_message(r, msg)

    def _on_message(self, r: Rank, msg: Any) -> None:
        now = time.monotonic()
        if isinstance(msg, proto.Failed | proto.Exited):  # the group's, never the rank's
            r.events.append((type(msg).__name__, msg.stage, now - r.started))
            if self._failed.get(r.rank) is None:  # the root cause: failures count as they arrive
                self._failed[r.rank], r.stage = msg, msg.stage
                if r.terminated:
                    self._after_stop.add(r.rank)
            return
        stage = r.take(msg, now)
        if stage:
            self._relay.emit(r.rank, stage, now - r.started)

    def _on_exit(self, r: Rank) -> None:
        self._drain(r)
        if not r.reap(1.0):  # the sentinel fires a moment before the process can be reaped
            return
        early = early_failure(r.proc)
        if early is not None:
            self._early[r.rank] = early
        _tell_end(self, r)
        if not r.terminated and r.rank not in self._failed and r.unsuccessful:
            self._failed[r.rank] = None

    # --------------------------------------------------------------- errors
    def _dump_stacks(self, ranks: Sequence[Rank]) -> dict[int, str]:
        """Each worker's stacks, a bounded wait (``spawnkit.testing`` uses it)."""
        return stacks_of(ranks)

    def _rank_failed(self, rank: int) -> ChildError:
        """Rank ``rank``'s failure as the error to raise, with what it affects (where the
        others are: what they sent first, read)."""
        if not self._closed:
            _read_sent(self)
        r = next(o for o in self._ranks if o.rank == rank)
        stages = self._stages_at[rank] = [(o.rank, o.stage) for o in self._ranks]
        effect = self._errors.effect(rank, stages)
        record, early = self._failed.get(rank), self._early.get(rank)
        loads, preload = self._ctx.loads, self._errors.preload
        return failure.child_error(r, record, early, effect=effect, loads=loads, preload=preload)

    def _stop_for(self, err: ChildError) -> None:
        self._close(initial_grace=self._grace)
        _add_teardown(self, err)

    # ------------------------------------------------------------ teardown
    def _close(self, *, initial_grace: float) -> None:
        if self._closed:
            return
        try:
            self._stop_workers(initial_grace)
        finally:
            self._closed = True
            _failed_unseen(self)
            _not_live(self)
            self._ctx.release()  # it starts no more workers: its server may be let go
            for r in self._ranks:
                _tell_end(self, r)
            self._relay.warn_unsaid()
            for r in self._ranks:
                r.close()
            if self._output is not None:  # their last lines, before the group reports done
                self._output.finish()
            from spawnkit.launch._cleanup import forget_run

            forget_run(self.run_id)
            if self._trace is not None:
                error = self._failure or self._relay.error or self._stopped_by
                self._trace.finish(self._ranks, self._ctx.server, error)

    def _stop_workers(self, initial_grace: float) -> None:
        """Teardown; a Ctrl-C during it sends SIGKILL at once, and is raised after unless the
        teardown was itself for a Ctrl-C (that one is still on its way up)."""
        try:
            with _interrupt.second_interrupt_escalates():
                try:
                    self._stop_gently(initial_grace, signal.SIGTERM)
                    return
                except _interrupt.EscalateTeardown:
                    self._stop_gently(0.0, signal.SIGKILL)
        except _interrupt.EscalateTeardown:
            pass  # pressed just as the teardown ended: nothing is left to kill
        if not self._interrupting:
            self._interrupting = True
            raise KeyboardInterrupt

    def _stop_gently(self, initial_grace: float, first: int) -> None:
        """``initial_grace`` for the workers to end by themselves, then the package's one
        TERM -> grace -> KILL -> bounded reap over their trees (``_cleanup.kill_trees``)."""
        end = time.monotonic() + initial_grace
        _seen_now(self)  # what came first (a result, a failure, an exit): read before a stop
        while any(r.exitcode is None for r in self._ranks) and time.monotonic() < end:
            self._wait_once(max(0.0, end - time.monotonic()))
        from spawnkit.launch._cleanup import stop_group

        live = [r for r in self._ranks if r.exitcode is None]
        for r in live:
            r.stop()
        self.unreaped_pids = stop_group(
            [r.pid for r in live],
            self.run_id,
            grace=self._grace,
            kill_wait=_KILL_REAP_TIMEOUT,
            first=first,
            reap=lambda pids, timeout: reap_ranks(live, timeout, self._drain),
        )

    def __del__(self) -> None:
        if _collected is not None:  # None: the interpreter's shutdown cleared this module
            _collected(self)


def _collected(group: WorkerGroup) -> None:
    """A group garbage-collected while its ranks run: said (``WorkerGroup.__del__``)."""
    ranks = getattr(group, "_ranks", ())  # none: __init__ refused an argument before them
    if _log is None:  # the interpreter's shutdown cleared this module: its exit handler said it
        return
    relay = getattr(group, "_relay", None)
    if relay is not None:  # never closed: a callback error no wait raised is said here or never
        relay.warn_unsaid()
    if not getattr(group, "_closed", True) and any(r.exitcode is None for r in ranks):
        _log.warning(
            "worker group %s was garbage-collected while running; use it as a context "
            "manager or call terminate()",
            group.run_id,
        )


def _add_teardown(group: WorkerGroup, err: ChildError) -> None:
    """What the teardown for ``err`` learned, added to it: the other ranks' own failures, and
    the pids it could not reap."""
    from spawnkit.launch._cleanup import unreaped_warning  # psutil: imported by the teardown

    _add_other_failures(group, err)
    pids = err.unreaped_pids = list(group.unreaped_pids)
    if pids:
        err.args = (f"{err.args[0]}\n{unreaped_warning(pids)}",)


def _add_other_failures(group: WorkerGroup, err: ChildError) -> None:
    """The ranks that failed on their own, as ``err``'s rank did, before the teardown stopped
    them (within its grace period; torchelastic's table lists every failed rank): each one's
    error in ``err.other_failures``, its first line in the message after the Effect line,
    which now tells the ranks that failed from those stopped."""
    own = [n for n in group._failed if n not in group._after_stop and n != err.rank]
    if not own:
        return
    others = err.other_failures = {n: group._rank_failed(n) for n in own}
    block = failure.also_failed(others)
    text, rank = str(err.args[0]) if err.args else "", err.rank or 0
    stages = group._stages_at.get(rank, [])
    said = group._errors.effect(rank, stages)
    if not stages or said not in text:  # a timeout's error: no ranks' stages in its Effect
        err.args = (f"{text}\n{block}",)
        return
    ends = {r.rank: _end_word(r, r.rank in others) for r in group._ranks}
    now = group._errors.effect(rank, stages, ends)
    err.args = (text.replace(said, f"{now}\n{block}", 1),)


def _end_word(r: Rank, failed: bool) -> str:
    """How a rank other than the failed one ended, for the Effect line."""
    if failed:
        return "failed too, below"
    if r.terminated:
        return "stopped"
    return "returned" if r.result is not None and r.exitcode == 0 else "ended"


def _failed_unseen(group: WorkerGroup) -> None:
    """A rank that failed on its own before a teardown no failure caused stopped it (the
    engine saw its pipe close and called ``terminate()`` in a ``finally``): it is the group's
    failure, raised by every later wait, and logged, since nothing may wait again.  Under a
    Ctrl-C what the ranks sent is the interrupt's doing; a record that came once a rank was
    stopped is the stop's."""
    if group._failure is not None or group._interrupting:
        return
    own = [rank for rank in group._failed if rank not in group._after_stop]
    if not own:
        return
    err = group._failure = group._rank_failed(own[0])
    _add_teardown(group, err)
    _log.warning(
        "worker group %s was stopped (terminate(), or its `with` block left) after rank %s "
        "had failed, and no wait had raised it: group.failure holds it, and join() and "
        "results() raise it. Call results() or join() before terminate() to have it raised "
        "where you wait. The failure:\n%s",
        group.run_id,
        err.rank,
        err,
    )


def _tell_end(group: WorkerGroup, r: Rank) -> None:
    """The progress callback's last word on a rank: done, failed or stopped."""
    if not r.end_told:
        r.end_told = True
        named = group._failure is not None and group._failure.rank == r.rank
        end = r.end_state(named, group._failed.get(r.rank) is not None, group._interrupting)
        group._relay.emit(r.rank, end, time.monotonic() - r.started)


def _seen_now(group: WorkerGroup) -> None:
    """What already came, without blocking: every message in the pipes, and every exit, asked
    of the OS too (a worker's sentinel closes only once the guardian forked from it exits)."""
    group._wait_once(0.0)
    for r in group._ranks:
        if r.exitcode is None and r.proc.exitcode is not None:
            group._on_exit(r)


def _read_sent(group: WorkerGroup) -> None:
    """What the ranks already sent, read into the group: a READY still in a pipe when Ctrl-C
    came left a rank in its entry reported "in resolve_entry"."""
    for r in group._ranks:
        group._drain(r)


def _still_running(group: WorkerGroup) -> tuple[list[int], list[int]]:
    """The ranks whose entry has not returned, and those that failed, asked without waiting:
    a result or a failure already in a rank's pipe (sent as the block ended, while its
    process still exits) says which."""
    running, failed = [], set(group._failed)
    for r in group._ranks:
        group._drain(r)
        if r.result is not None and not r.result_error:
            continue  # its entry returned, and its result travelled
        if r.rank in group._failed or r.proc.exitcode is not None:
            failed.add(r.rank)  # a failure it sent, or an end without a result
        else:
            running.append(r.rank)
    return running, sorted(failed)


def _messages(r: Rank) -> Iterator[Any]:
    """Every message already in ``r``'s report pipe; never blocks on an empty pipe.

    Read here, not by the ``Rank``: a FAILED record goes from the pipe straight into the
    group's table of failures.
    """
    while r.unread:
        with _interrupt.held():  # handled whole (see below)
            yield r.unread.pop(0)
    while r.report_open:
        try:
            with _interrupt.held():  # a message is read whole, even under Ctrl-C,
                if not r.report.poll(0):
                    return
                r.unread.append(r.report.recv())  # and kept for the next call
        except (EOFError, OSError):
            r.report_open = False
            return
        except Exception as exc:  # a message that does not unpickle here
            _log.warning("%s sent an unreadable report message: %s", r.label, exc)
            continue
        # and handled whole: a Ctrl-C inside the progress callback it calls left the stage
        # unsaid there while the relay had noted it, and the line named the stage before
        with _interrupt.held():
            yield r.unread.pop(0)


def _ready(ranks: Sequence[Rank], timeout: float | None) -> tuple[list[Rank], list[Rank]]:
    """The ranks with a report to read and those whose process ended, waiting up to ``timeout``
    on every report pipe and sentinel together."""
    by_obj: dict[Any, tuple[str, Rank]] = {}
    for r in ranks:
        if r.report_open:
            by_obj[r.report] = ("report", r)
        if r.exitcode is None:
            by_obj[r.proc.sentinel] = ("exit", r)
    if not by_obj:
        if timeout:
            time.sleep(min(timeout, 0.05))
        return [], []
    ready = [by_obj[obj] for obj in _wait(list(by_obj), timeout)]
    return [r for kind, r in ready if kind == "report"], [r for kind, r in ready if kind == "exit"]
