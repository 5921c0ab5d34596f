"""The parent <-> worker protocol on its own, driven through spawnkit.protocol's parent API.

These pin the message order ``spawnkit.protocol``'s docstring draws (and the
launcher relies on): HELLO, a STAGE_STARTED/STAGE_FINISHED pair per stage in
``STAGES`` order, READY after ``resolve_entry``, the entry's pair, RESULT last.
A worker forked from a pre-bootstrapped warm server sends no pair for the
stages the server ran once.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _launcher_support import Site, make_site
from spawnkit.bootstrap.stages import SHARED_STAGES, STAGE_ORDER, Stage
from spawnkit.launch.specs import build_spec
from spawnkit.protocol import messages as proto
from spawnkit.protocol.popen import early_error_text, get_launch_context
from spawnkit.spec._control import LaunchControl


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _one_worker(site: Site, start_method: str) -> tuple[int | None, list[Any], str]:
    """Start one rank by hand; its exit code, every message it sent, its early-error text."""
    template = build_spec(site.entry(), site.box(7), namespace=site.ns)
    lctx = get_launch_context("multiprocessing", start_method, (), template, 60)
    report_r, report_w = lctx.pipe()
    death_r, death_w = lctx.pipe()
    fault_r, fault_w = lctx.pipe()
    spec = template.replace(
        rank=0,
        report_conn=report_w,
        death_conn=death_r,
        _control=LaunchControl(fault_conn=fault_w, parent_pid=os.getpid()),
    )
    proc = lctx.process(spec, "spawnkit-protocol-test")
    messages: list[Any] = []
    try:
        lctx.start(proc)
        for conn in (report_w, death_r, fault_w):
            conn.close()
        deadline = time.monotonic() + 60
        while report_r.poll(max(0.0, deadline - time.monotonic())):
            try:
                messages.append(report_r.recv())
            except EOFError:
                break
        proc.join(10)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        for conn in (report_r, death_w, fault_r):
            conn.close()
    return proc.exitcode, messages, early_error_text(proc)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_messages_arrive_in_the_documented_order(site: Site, start_method: str) -> None:
    code, messages, early = _one_worker(site, start_method)
    assert code == 0 and early == ""
    run = [s for s in STAGE_ORDER if start_method == "spawn" or s not in SHARED_STAGES]
    expected: list[tuple[str, str]] = [("Hello", "")]
    for stage in run:
        if stage is Stage.ENTRY:
            expected.append(("Ready", ""))
        expected += [("StageStarted", stage.value), ("StageFinished", stage.value)]
    expected.append(("Result", ""))
    got = [(type(m).__name__, str(getattr(m, "stage", ""))) for m in messages]
    assert got == expected
    hello, result = messages[0], messages[-1]
    assert isinstance(hello, proto.Hello) and hello.pid > 0
    assert isinstance(result, proto.Result) and result.error == ""
    value = pickle.loads(result.data or b"")
    assert value["value"] == 7 and value["hooked"] == "orig+hooked"


@pytest.mark.parametrize("package", ["multiprocessing", "multiprocess"])
def test_a_held_message_goes_with_the_next_one_and_none_is_lost(package: str) -> None:
    """A FINISHED (and a warm HELLO, and READY) waits for the message that follows it: one
    write instead of two; the launcher still reads every message, framed as its own."""
    import importlib

    from spawnkit.protocol.child import _Reporter

    reader, writer = importlib.import_module(package).Pipe(duplex=False)
    reporter = _Reporter(writer)
    try:
        reporter.send(proto.Hello(1, "h"), hold=True)
        reporter.stage_started("arm_parent_death")
        assert [reader.recv() for _ in range(2)] == [
            proto.Hello(1, "h"),
            proto.StageStarted("arm_parent_death"),
        ]
        reporter.stage_finished("arm_parent_death", 0.5)
        assert not reader.poll(0.05), "a FINISHED was written before the message after it"
        reporter.ready({"a report": 1})
        assert not reader.poll(0.05)
        reporter.stage_started("entry")
        assert [reader.recv() for _ in range(3)] == [
            proto.StageFinished("arm_parent_death", 0.5),
            proto.Ready({"a report": 1}),
            proto.StageStarted("entry"),
        ]
        reporter.stage_finished("entry", 0.25)
        reporter.close()  # the end of the report: what is held is written first
        assert reader.recv() == proto.StageFinished("entry", 0.25)
        with pytest.raises(EOFError):
            reader.recv()
    finally:
        reporter.close()
        reader.close()
