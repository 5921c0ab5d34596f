"""The errors of a group that ran out of time, for the local and the Ray group alike.

``BootstrapTimeoutError`` while the named rank is in a bootstrap stage, ``EntryTimeoutError``
while it runs its entry.  Messages name the limit (and how to raise it), the rank, its stage and,
where the worker could be asked, its stack.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import BootstrapTimeoutError, ChildError, EntryTimeoutError
from spawnkit.launch._rank import Rank
from spawnkit.protocol.failure import PRE_BOOTSTRAP, Worker

__all__ = ["first_late", "join_timeout_error", "ready_timeout_error", "results_timeout_error"]


def ready_timeout_error(
    stuck: Sequence[Rank],
    now: float,
    *,
    world: int,
    run_id: str,
    waited: float,
    ready_timeout: float | None,
    call_timeout: float | None,
    stacks: dict[int, str],
) -> BootstrapTimeoutError:
    """Startup did not finish: ``call_timeout`` (``wait_ready(timeout=)``) or the group's
    ``ready_timeout`` expired with ``stuck`` not ready; the first of them is named."""
    first = stuck[0]
    in_stage = now - (first.stage_since or first.started)
    others = ", ".join(
        f"rank {r.rank} in {r.stage!r} for {now - (r.stage_since or r.started):.1f} s"
        for r in stuck[1:]
    )
    if call_timeout is not None:
        limit = f"wait_ready(timeout={call_timeout:g}) expired"
        knob = "a larger timeout= to wait_ready() (None waits up to the group's ready_timeout)"
    else:
        limit = (
            f"the group's startup deadline passed after {waited:.1f} s "
            f"(ready_timeout={ready_timeout:g})"
        )
        knob = "a larger ready_timeout= to spawn_with_plugins()"
    text = (
        f"{first.label} is stuck in stage {first.stage!r}: it has been in that stage for "
        f"{in_stage:.1f} s and {limit}.\n"
        f"{len(stuck)} of {world} rank(s) not ready"
        + (f"; also {others}" if others else "")
        + f".\nFix: if that stage is legitimately slow, pass {knob}; "
        "otherwise the stack below shows where it hangs.\n"
        f"Effect: worker group {run_id} is being torn down.\n"
    )
    if stacks.get(first.rank):
        text += f"Stack of {first.label} at the deadline:\n{stacks[first.rank].rstrip()}"
    else:
        text += (
            f"No stack dump: rank {first.rank} had not started its bootstrap yet (it was "
            "still starting the interpreter, re-importing __main__ or unpickling its spec)."
            if first.stage == PRE_BOOTSTRAP
            else "No stack dump could be obtained from the worker."
        )
    return BootstrapTimeoutError(
        text,
        stage=first.stage,
        waited_s=in_stage,
        stacks=stacks,
        not_ready={r.rank: r.stage for r in stuck},
        **first.worker.fields(),
    )


def join_timeout_error(
    who: Worker,
    stage: str,
    *,
    running: int,
    world: int,
    group: str,
    join_timeout: float | None,
    waited: float,
    stacks: dict[int, str] | None = None,
    returned: bool = False,
) -> ChildError:
    """The group's ``join_timeout`` passed with ``running`` ranks unfinished; ``who`` is named.

    ``returned``: its entry returned and its result arrived, so what holds it is its exit.
    """
    stack = (stacks or {}).get(who.rank, "")
    in_entry = stage == Stage.ENTRY.value
    where = "its entry function" if in_entry else f"bootstrap stage {stage!r}"
    fix = "pass a larger join_timeout= (or None for no limit) if the work is legitimately long"
    if in_entry and returned:
        where = (
            "exiting: its entry function returned and its result arrived, but the process "
            "did not end; an exit handler (atexit), a non-daemon thread or a finalizer runs"
        )
        shown = "what the stack below shows" if stack else "it"
        fix = f"make {shown} end, or pass a larger join_timeout="
    text = (
        f"{who.label} was still running ({where}) when {group}'s "
        f"join_timeout={join_timeout} s passed; {running} of {world} rank(s) had not "
        f"finished.\nFix: {fix}"
        + ("; otherwise the stack below shows where it hangs" if stack and not returned else "")
        + f".\nEffect: {group} is being torn down."
    )
    if stack:
        text += f"\nStack of {who.label} at the deadline:\n{stack.rstrip()}"
    elif in_entry:
        text += "\nNo stack dump could be obtained from the worker."
    if in_entry:
        return EntryTimeoutError(
            text,
            setting="join_timeout",
            timeout_s=join_timeout,
            stage=stage,
            waited_s=waited,
            stacks=stacks,
            **who.fields(),
        )
    return BootstrapTimeoutError(text, stage=stage, waited_s=waited, stacks=stacks, **who.fields())


def first_late(ranks: Sequence[tuple[Worker, str]]) -> tuple[Worker, str]:
    """The rank a run's deadline names: the first still in a bootstrap stage, else the first."""
    return next((r for r in ranks if r[1] != Stage.ENTRY.value), ranks[0])


def results_timeout_error(
    running: Sequence[tuple[Worker, str]],
    *,
    group: str,
    waited: float,
    stacks: dict[int, str] | None = None,
    returned: Collection[int] = (),
) -> ChildError:
    """``results(timeout=)`` passed with ``running`` unfinished; the group runs on.
    ``returned``: the ranks whose entry returned (its result arrived) and that are exiting."""
    who, stage = first_late(running)
    names = ", ".join(
        f"{w.label} exiting (its entry returned; an exit handler or a non-daemon thread holds it)"
        if w.rank in returned
        else f"{w.label} in {s!r}"
        for w, s in running
    )
    stack = (stacks or {}).get(who.rank, "")
    text = (
        f"results(timeout={waited:g}) expired after {waited:.1f} s with {len(running)} rank(s) "
        f"of {group} unfinished: {names}. The group keeps running.\nFix: call results() again "
        "with a larger timeout= (None: no limit), or terminate() the group."
    )
    if stack:
        text += f"\nStack of {who.label} at the deadline:\n{stack.rstrip()}"
    if stage == Stage.ENTRY.value:
        return EntryTimeoutError(
            text,
            setting="results(timeout=)",
            timeout_s=waited,
            stage=stage,
            waited_s=waited,
            stacks=stacks,
            **who.fields(),
        )
    return BootstrapTimeoutError(text, stage=stage, waited_s=waited, stacks=stacks, **who.fields())
