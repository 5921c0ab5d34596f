"""The paths left open in the first round, each now loud: no stage, a report that does not
pickle, a target module another thread never finishes importing."""

from __future__ import annotations

import logging
import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spawnkit.bootstrap.report import BootstrapReport
from spawnkit.errors import ChildRaisedError
from spawnkit.protocol import failure
from spawnkit.protocol import messages as proto
from spawnkit.protocol.child import _Reporter


def _record(stage: str) -> failure.Failed:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        return failure.record(stage, exc, rank=3)


def test_a_record_without_a_stage_is_not_blamed_on_the_entry() -> None:
    who = failure.Worker(3, 42, "h", launcher="torchrun")
    err = failure.raised_error(_record(""), who, effect="")
    assert isinstance(err, ChildRaisedError)
    head = str(err).splitlines()[0]
    assert "entry function" not in head
    assert "unknown stage" in head and "RuntimeError: boom" in head
    entry = str(failure.raised_error(_record("entry"), who, effect="")).splitlines()[0]
    assert "its entry function raised" in entry
    launcher_step = str(failure.raised_error(_record("read_spec"), who, effect=""))
    assert "'read_spec' (not a bootstrap stage" in launcher_step.splitlines()[0]


def test_an_unpicklable_report_arrives_with_the_reason_not_as_none() -> None:
    report = BootstrapReport(rank=1, pid=7, host="h", namespace="ns")
    report.plugins = [{"name": "p", "dist": "d", "version": "1"}]
    report.platform = {"name": "dev", "handle": lambda: None}  # an object a plugin left there
    parent, child = multiprocessing.Pipe(duplex=False)
    reporter = _Reporter(child)
    reporter.ready(report)
    reporter.close()  # READY is held for the entry's STARTED; the end of a report writes it
    assert parent.poll(10)
    msg = parent.recv()
    assert isinstance(msg, proto.Ready)
    got = msg.report
    assert isinstance(got, BootstrapReport)
    assert got.plugins == report.plugins  # what pickles still arrives
    assert got.platform == {}
    assert set(got.unsent) == {"platform"}
    assert "pickle" in got.unsent["platform"].lower()
    assert "NOT SENT: field 'platform'" in got.format()


def test_the_launcher_warns_about_a_report_that_arrived_incomplete(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from spawnkit.launch._rank import Rank

    report = BootstrapReport(rank=0, pid=1, host="h", namespace="ns", unsent={"hooks": "E: x"})
    rank = Rank(0, None, None, None, None, pid=1, started=0.0)
    with caplog.at_level(logging.WARNING, logger="spawnkit.bootstrap"):
        rank.take(proto.Ready(report), 0.0)
    assert rank.report_obj is report
    text = caplog.text
    assert "rank 0" in text and "without field(s) hooks" in text and "report.unsent" in text


_DEADLOCK = """
import sys, threading, time
sys.path.insert(0, {root!r})
import spawnkit.hooks._resolve as resolve
from spawnkit.errors import HookApplyError, ImportWaitError
from spawnkit.hooks import HookType
from spawnkit.namespace import Namespace

resolve.IMPORT_WAIT_S = 2.0
ns = Namespace("skdeadlock", env_prefix="SKDEADLOCK")
import deadmod_sync
deadmod_sync.registry = ns.hooks
ns.hooks.register("deadmod.target", lambda orig, *a, **k: orig(*a, **k), HookType.AROUND)
importer = threading.Thread(target=lambda: __import__("deadmod"), name="plugin-importer",
                            daemon=True)
importer.start()
deadmod_sync.started.wait(30)
try:
    ns.hooks.apply_hooks(strict=True)
except HookApplyError as exc:
    cause = exc
    print("RAISED", type(exc).__name__, str(exc).replace(chr(10), " "))
importer.join(30)
print("IMPORTER DONE", not importer.is_alive())
"""

_DEADMOD = """
import time
import deadmod_sync

deadmod_sync.started.set()
lock = deadmod_sync.registry._lock
while lock.acquire(blocking=False):  # until the applying thread holds the registry
    lock.release()
    time.sleep(0.01)
# Registering at import time while another thread applies: waits for that thread's lock.
deadmod_sync.registry.register("deadmod.other", lambda *a, **k: None, deadmod_sync.BEFORE)

def target():
    return 1

def other():
    return 2
"""


def test_waiting_for_a_half_imported_target_module_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "deadmod.py").write_text(_DEADMOD)
    (tmp_path / "deadmod_sync.py").write_text(
        "import threading\nfrom spawnkit.hooks import HookType\n"
        "started = threading.Event()\nregistry = None\nBEFORE = HookType.BEFORE\n"
    )
    script = tmp_path / "deadlock.py"
    script.write_text(_DEADLOCK.format(root=str(tmp_path)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "RAISED HookApplyError" in out, textwrap.shorten(out + done.stderr, 3000)
    assert "ImportWaitError" in out
    assert "'deadmod'" in out and "'plugin-importer'" in out
    assert "IMPORTER DONE True" in out  # the other thread finished once the lock was free
