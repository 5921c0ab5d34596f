"""Report building lives in ``bootstrap/report.py``, apart from the stages calling it (#22 item 5).

Built here in-process from a namespace, without a worker: what a report says
about hooks (every state, and the holders a ``partial`` hook still misses),
the platform decision, and a warm-start server's record.
"""

from __future__ import annotations

import sys
import types
import uuid
from collections.abc import Iterator

import pytest

from spawnkit.bootstrap import report as reports
from spawnkit.hooks.types import HookType
from spawnkit.namespace import Namespace


@pytest.fixture
def ns() -> Iterator[Namespace]:
    tag = uuid.uuid4().hex[:8]
    namespace = Namespace(f"rep{tag}", f"REP{tag.upper()}")
    with namespace.hooks.isolated():
        yield namespace


@pytest.fixture
def engine() -> Iterator[str]:
    name = f"rep_engine_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name)
    exec("def work(x):\n    return x\nTABLE = (work,)\n", module.__dict__)
    sys.modules[name] = module
    yield name
    sys.modules.pop(name, None)


def _build(ns: Namespace, **changes: object) -> reports.BootstrapReport:
    who = reports.Who(rank=1, entry="json:dumps", world_size=2, local_rank=1, pinned_platform=None)
    fields: dict[str, object] = {
        "pid": 123,
        "host": "h",
        "stage_seconds": {"apply_hooks": 0.002},
        "stage_starts": {"apply_hooks": 10.0},
        "target_imports": [("json", 10.0, 10.001)],
        "guard": {},
        "stage_detail": {"apply_hooks": {"import_targets": 0.001, "patch": 0.001}},
        "inherited": None,
    }
    fields.update(changes)
    return reports.build(who, ns, **fields)  # type: ignore[arg-type]


def test_report_names_hooks_by_state_and_the_holders_a_partial_hook_misses(
    ns: Namespace, engine: str
) -> None:
    ns.hooks.register(f"{engine}.work", lambda result, x: result + 1, HookType.AFTER)
    ns.hooks.register(f"{engine}.gone", lambda: None, HookType.AFTER, optional=True)
    ns.hooks.apply_hooks()
    report = _build(ns)
    assert (report.rank, report.world_size, report.pid, report.namespace) == (1, 2, 123, ns.name)
    (work,) = report.hooks[f"{engine}.work"]
    assert work["state"] == "partial"  # TABLE still holds the original
    assert work["unrebound"] == [f"{engine}.TABLE[0] (tuple item)"]
    (gone,) = report.hooks[f"{engine}.gone"]
    assert gone["state"] == "skipped" and gone["reason"]
    assert report.platform["name"] and "auto-detected" in report.platform["how"]
    text = report.format()
    assert "PARTIAL:" in text and "import_targets 1.00 ms" in text


def test_a_forked_worker_repeats_its_servers_parts_with_its_own_hooks(ns: Namespace) -> None:
    shared = reports.shared_parts(ns, None)
    shared["plugins"] = [{"name": "p", "value": "m:f", "dist": "d", "version": "1"}]
    record = {
        "shared": shared,
        "server_pid": 7,
        "server_started": 0.0,
        "stages": {"load_plugins": 0.5},
        "stage_detail": {"apply_hooks": {"patch": 0.25}},
        "identity": ("not", "reported"),
    }
    report = _build(ns, inherited=record, stage_detail={})
    # The server's objects themselves (the worker is a fork: they are its own copy), so that
    # its READY can send them as the server pickled them (``to_send``, below).
    assert report.plugins is shared["plugins"]
    assert report.inherited == {"server_pid": 7, "server_started": 0.0, "stages": record["stages"]}
    assert report.stage_detail == {"apply_hooks": {"patch": 0.25}}
    assert "inherited from warm-start server pid 7" in report.format()


def test_a_warm_workers_ready_sends_the_servers_pickled_parts_and_nothing_stale(
    ns: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    import dill

    from spawnkit.protocol import messages as proto

    monkeypatch.setattr(reports, "_shared_pickled", None)
    shared = reports.shared_parts(ns, None)
    shared["plugins"] = [{"name": "p", "value": "m:f", "dist": "d", "version": "1"}]
    reports.keep_pickled(shared)
    version = ns.hooks._settled_version()
    record = {"shared": shared, "hooks_version": version, "server_pid": 7, "stages": {}}
    report = _build(ns, inherited=record, stage_detail={})
    sent = reports.to_send(report)
    assert sent is not report  # the server's bytes stand in for the shared parts
    for loads, dumps in ((pickle.loads, pickle.dumps), (dill.loads, dill.dumps)):
        (got,) = loads(dumps(proto.Ready(sent)))
        assert isinstance(got, reports.BootstrapReport) and got == report
    # The bytes are the server's: a stand-in made now would send them even for a part changed
    # in place since, so only the READY (made right after the report) takes this path; the
    # report itself, pickled later, sends what it holds then.
    report.plugins[0]["version"] = "2"
    assert pickle.loads(pickle.dumps(report)).plugins[0]["version"] == "2"
    # A part that is no longer the server's object (a worker that rebuilt its hooks report)
    # sends the report as it is.
    report.hooks = {"json.dumps": []}
    assert reports.to_send(report) is report
