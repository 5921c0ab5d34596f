"""A worker's report messages are pickled by one kept ``ForkingPickler``, not one per message.

``ForkingPickler.dumps`` builds a pickler per call, copying the reducer tables each time (6 us
a message against 3 kept, eight messages before a warm worker's entry).  Kept only while the
tables are unchanged: a reducer registered later (the entry's imports: torch's tensors)
still pickles what it reduces, as ``dumps`` would have.  Counted as calls of the pickler's
constructor, not timed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import Pipe, reduction
from types import FrameType
from typing import Any

from spawnkit.protocol import messages as proto
from spawnkit.protocol.child import _Reporter


class _Carried:
    def __init__(self, value: int) -> None:
        self.value = value


def _rebuilt(value: int) -> str:
    return f"reduced {value}"


def _reduce(obj: _Carried) -> tuple[Any, ...]:
    return (_rebuilt, (obj.value,))


@contextmanager
def _counting_picklers() -> Iterator[list[int]]:
    """How many ``ForkingPickler``s were built meanwhile (``__init__`` calls, this thread)."""
    code, seen = reduction.ForkingPickler.__init__.__code__, [0]

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code is code:
            seen[0] += 1

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(old)


def _read(reader: Any, count: int) -> list[Any]:
    got = []
    for _ in range(count):
        assert reader.poll(10), f"{len(got)} of {count} messages arrived within 10 s: {got}"
        got.append(reader.recv())
    return got


def test_one_pickler_serves_every_message_until_a_reducer_is_registered() -> None:
    reader, writer = Pipe(duplex=False)
    reporter = _Reporter(writer)
    try:
        with _counting_picklers() as built:
            for stage in ("arm_parent_death", "materialize_payload", "resolve_entry"):
                reporter.stage_started(stage)
                reporter.stage_finished(stage, 0.25)
        assert built[0] == 1, f"{built[0]} picklers built for six messages"
        got = _read(reader, 5)  # the last FINISHED is held for the next message
        assert got[:2] == [
            proto.StageStarted("arm_parent_death"),
            proto.StageFinished("arm_parent_death", 0.25),
        ]
        reduction.ForkingPickler.register(_Carried, _reduce)
        try:
            with _counting_picklers() as built:
                reporter.send(proto.Result(_Carried(7)))  # type: ignore[arg-type]
                reporter.send(proto.Result(_Carried(8)))  # type: ignore[arg-type]
        finally:
            reduction.ForkingPickler._extra_reducers.pop(_Carried, None)
        assert built[0] == 1, "a registered reducer did not rebuild the kept pickler once"
        assert _read(reader, 3) == [
            proto.StageFinished("resolve_entry", 0.25),
            proto.Result("reduced 7"),  # type: ignore[arg-type]
            proto.Result("reduced 8"),  # type: ignore[arg-type]
        ]
    finally:
        reporter.close()
        reader.close()


def test_each_message_pickles_as_forking_pickler_dumps_it() -> None:
    """Memo cleared between messages: a string repeated across two messages is in both."""
    reader, writer = Pipe(duplex=False)
    reporter = _Reporter(writer)
    sent = [proto.StageStarted("apply_hooks"), proto.StageStarted("apply_hooks")]
    try:
        for msg in sent:
            reporter.send(msg)
        for msg in sent:
            assert reader.poll(10), "a sent message did not arrive within 10 s"
            assert reader.recv_bytes() == bytes(reduction.ForkingPickler.dumps(msg))
    finally:
        reporter.close()
        reader.close()
