"""The errors of a group that ran out of time, for the local and the Ray group alike.

A deadline that passes is a failure of the group's caller's choosing, not of
a worker's code, so its message says which limit expired (and how to raise
it), which rank it names and where that rank was, and, where the worker could
be asked, the stack it was stuck in.
"""

from __future__ import annotations

from collections.abc import Sequence

from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import BootstrapTimeoutError
from spawnkit.launch._rank import Rank
from spawnkit.protocol.failure import PRE_BOOTSTRAP, Worker

__all__ = ["join_timeout_error", "ready_timeout_error", "results_timeout_error"]


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
) -> BootstrapTimeoutError:
    """The group's ``join_timeout`` passed with ``running`` ranks unfinished; ``who`` is named."""
    stack = (stacks or {}).get(who.rank, "")
    text = (
        f"{who.label} was still running (stage {stage!r}) when {group}'s "
        f"join_timeout={join_timeout} s passed; {running} of {world} rank(s) had not "
        "finished.\nFix: pass a larger join_timeout= (or None for no limit) if the work is "
        "legitimately long"
        + ("; otherwise the stack below shows where it hangs" if stack else "")
        + f".\nEffect: {group} is being torn down."
    )
    if stack:
        text += f"\nStack of {who.label} at the deadline:\n{stack.rstrip()}"
    return BootstrapTimeoutError(text, stage=stage, waited_s=waited, stacks=stacks, **who.fields())


def results_timeout_error(
    running: Sequence[Worker], *, group: str, waited: float
) -> BootstrapTimeoutError:
    """``results(timeout=)`` passed with ``running`` still in their entry; the group runs on."""
    names = ", ".join(w.label for w in running)
    return BootstrapTimeoutError(
        f"results() timed out after {waited:.1f} s: {names} of {group} still running their "
        "entry function. The group keeps running; call results() again with a longer "
        "timeout, or terminate() it.",
        stage=Stage.ENTRY.value,
        waited_s=waited,
        **running[0].fields(),
    )
