"""``spawn_with_plugins(trace=FILE)``: a real launch's trace, checked against the trace format.

The checks are those Perfetto's importer relies on (the JSON object form of
Chrome's trace-event format): every event has the keys its phase needs,
complete events have non-negative microsecond ``ts``/``dur``, metadata names
every process and thread used, spans on one track nest (no partial
overlap), and every time is on the one clock the launcher reads: within the
launch's window, and each rank's spans within that rank's start..exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _cli_support import run_cli
from _launcher_support import STAGES, Site, fault_env, make_site
from spawnkit import spawn_with_plugins
from spawnkit.errors import ChildError, ChildRaisedError, ConfigError, ForkServerError

_REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "M": {"name", "ph", "pid", "args"},
}
_EPS = 0.002  # microseconds: ts and dur are each rounded to the nanosecond


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def validate(data: Any) -> dict[int, list[dict[str, Any]]]:
    """Perfetto's JSON trace rules; returns each track's complete events, by pid."""
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    assert data.get("displayTimeUnit") in ("ms", "ns")
    names: dict[str, set[int]] = {"process_name": set(), "thread_name": set()}
    used: set[tuple[int, int]] = set()
    tracks: dict[int, list[dict[str, Any]]] = {}
    for ev in data["traceEvents"]:
        assert ev["ph"] in _REQUIRED, ev
        missing = _REQUIRED[ev["ph"]] - set(ev)
        assert not missing, f"{ev} lacks {missing}"
        if ev["ph"] == "M":
            if ev["name"] in names:
                assert isinstance(ev["args"]["name"], str) and ev["args"]["name"]
                names[ev["name"]].add(ev["pid"])
            continue
        assert isinstance(ev["ts"], int | float) and ev["ts"] >= 0
        used.add((ev["pid"], ev["tid"]))
        if ev["ph"] == "X":
            assert ev["dur"] >= 0, ev
            tracks.setdefault(ev["pid"], []).append(ev)
    for pid, tid in used:
        assert pid in names["process_name"] and tid in names["thread_name"], (pid, tid)
    for pid, events in tracks.items():
        _check_nesting(pid, events)
    return tracks


def _check_nesting(pid: int, events: list[dict[str, Any]]) -> None:
    """On one track, each span lies wholly within the span open around it, or after it."""
    stack: list[dict[str, Any]] = []
    for ev in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and ev["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - _EPS:
            stack.pop()
        if stack:
            outer = stack[-1]
            assert ev["ts"] + ev["dur"] <= outer["ts"] + outer["dur"] + _EPS, (
                f"track {pid}: {ev['name']} overlaps {outer['name']} partly"
            )
        stack.append(ev)


def _within(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    end, outer_end = inner["ts"] + inner["dur"], outer["ts"] + outer["dur"]
    return outer["ts"] - _EPS <= inner["ts"] and end <= outer_end + _EPS


def _by_name(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in events}


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_two_rank_trace_is_valid_chrome_trace_event_json(
    site: Site, tmp_path: Path, start_method: str
) -> None:
    path = tmp_path / "start.json"
    before = time.monotonic() * 1e6
    with spawn_with_plugins(
        site.entry(),
        nprocs=2,
        namespace=site.ns,
        ready_timeout=60,
        trace=path,
        start_method=start_method,
    ) as group:
        assert group.join(60)
    after = time.monotonic() * 1e6
    data = json.loads(path.read_text())
    tracks = validate(data)
    launcher = data["otherData"]["launcher_pid"]
    assert data["otherData"]["clock"] == "CLOCK_MONOTONIC"
    meta = (e for e in data["traceEvents"] if e["name"] == "process_name")
    names = {e["pid"]: e["args"]["name"] for e in meta}
    servers = {p for p in tracks if names[p].startswith("warm-start server (pid ")}
    # one track per rank, one for the launcher, and the warm server this launch started
    assert set(tracks) == {launcher, *group.pids, *servers}
    assert len(servers) == (start_method == "forkserver")
    for pid in servers:  # its stages, in order, while the launcher's launch_context ran
        mine = _by_name(tracks[pid])
        shared = ["interpreter start-up, imports", *STAGES[:3]]
        assert [mine[s]["ts"] for s in shared] == sorted(mine[s]["ts"] for s in shared)
        assert all(_within(e, _by_name(tracks[launcher])["launch_context"]) for e in tracks[pid])
    for events in tracks.values():  # one clock: every span inside the launch's wall window
        assert all(before <= e["ts"] and e["ts"] + e["dur"] <= after for e in events)
    parent = _by_name(tracks[launcher])
    for name in ("spawn_with_plugins", "build_spec", "launch_context", "start rank 0"):
        assert name in parent
        assert _within(parent[name], parent["spawn_with_plugins"])
    instants = {e["name"] for e in data["traceEvents"] if e["ph"] == "i"}
    assert {"rank 0 ready", "rank 1 ready", "rank 0 exit", "rank 1 exit"} <= instants
    own = STAGES if start_method == "spawn" else ["materialize_payload", "resolve_entry", "entry"]
    for rank, pid in enumerate(group.pids):
        spans = _by_name(tracks[pid])
        life = spans[f"rank {rank}"]
        # Worker-measured spans lie within the launcher-measured start..exit of the process.
        assert all(_within(e, life) for e in tracks[pid])
        assert set(own) <= set(spans), sorted(spans)
        starts = [spans[s]["ts"] for s in own]
        assert starts == sorted(starts)  # the stages, in their order
        if start_method == "spawn":  # a warm worker's plugins loaded in its server
            assert _within(spans["plugin faultplug"], spans["load_plugins"])
            assert _within(spans[f"import {site.pkg}.target"], spans["apply_hooks"])
        # The start split: the launcher's part inside its "start rank N", the worker's inside
        # its "process start", in order, the last one ending with it.
        # Ties by their end: under load the launcher reads its "spawned" mark after the child's
        # interpreter began, and the part between them is clamped to nothing at that instant.
        parts = [e for e in tracks[pid] if e["cat"] == "start"]
        mine = sorted(parts, key=lambda e: (e["ts"], e["ts"] + e["dur"]))
        assert [e["name"] for e in mine] == _WORKER_PARTS[start_method]
        assert all(_within(e, spans["process start"]) for e in mine)
        whole = spans["process start"]  # it ends where the first stage begins
        assert abs(mine[-1]["ts"] + mine[-1]["dur"] - whole["ts"] - whole["dur"]) < 1.0  # 1 us
        launch = [e for e in tracks[launcher] if e["args"].get("rank") == rank]
        launch = sorted((e for e in launch if e["cat"] == "start"), key=lambda e: e["ts"])
        assert [e["name"] for e in launch] == _LAUNCHER_PARTS[start_method]
        assert all(_within(e, parent[f"start rank {rank}"]) for e in launch)
        ends = [e["ts"] + e["dur"] for e in launch]
        assert all(a <= b["ts"] + _EPS for a, b in zip(ends, launch[1:], strict=False))


_WORKER_PARTS = {
    "spawn": ["interpreter start-up", "imports, spec, __main__", "child_main to first stage"],
    "forkserver": ["server hands over", "spec, __main__", "child_main to first stage"],
}
_LAUNCHER_PARTS = {
    "spawn": ["pickle spec", "spawn interpreter", "send spec"],
    "forkserver": ["pickle spec", "connect to server", "send spec", "read pid"],
}


def test_tracing_never_imports_anything_in_the_worker(site: Site, tmp_path: Path) -> None:
    (site.root / f"{site.tag}_probe.py").write_text(
        "import sys\n\ndef traced():\n"
        "    return sorted(m for m in sys.modules if m.startswith('spawnkit') and 'trace' in m)\n"
    )
    entry = f"{site.tag}_probe:traced"
    with spawn_with_plugins(entry, nprocs=1, namespace=site.ns, ready_timeout=60) as group:
        off = group.results(timeout=60)
    path = tmp_path / "on.json"
    with spawn_with_plugins(entry, nprocs=1, namespace=site.ns, ready_timeout=60, trace=path) as g:
        on = g.results(timeout=60)
    assert off == [[]] and on == [[]]
    assert path.exists()


def test_unwritable_trace_path_is_refused_before_any_rank(site: Site, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="trace=") as info:
        spawn_with_plugins(site.entry(), namespace=site.ns, trace=tmp_path / "nope" / "t.json")
    assert info.value.setting == "trace"


_FULL_DISK = """
import resource, signal, sys
from spawnkit import spawn_with_plugins

if __name__ == "__main__":
    with spawn_with_plugins(sys.argv[2], ready_timeout=60, start_method=sys.argv[3],
                            trace=sys.argv[1]) as group:
        # a disk that fills as the trace is written: writes past 1 KiB fail (EFBIG); the
        # ranks started with no such limit, and the group closes (writes) as results are in
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
        group.results(timeout=60)
    from spawnkit.launch import _trace

    print("NOT WRITTEN:", getattr(_trace, "not_written", lambda g: "?")(group))
"""


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_trace_write_that_fails_leaves_no_half_written_file(
    site: Site, tmp_path: Path, start_method: str
) -> None:
    """The file was truncated, then written until the disk was full: a trace cut short (which
    ``spawnkit trace`` refuses) in place of the older one. Now it is written beside and renamed
    over: the older trace stays whole, no piece is left, and the group says why."""
    import subprocess
    import sys

    (tmp_path / "full_disk.py").write_text(_FULL_DISK)
    (tmp_path / "fd_entry.py").write_text("def work(payload=None):\n    return 1\n")
    path = tmp_path / "traces" / "start.json"
    path.parent.mkdir()
    path.write_text('{"older": "trace"}\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run(
        [sys.executable, "full_disk.py", str(path), "fd_entry:work", start_method],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert path.read_text() == '{"older": "trace"}\n'
    assert os.listdir(path.parent) == ["start.json"]
    assert "NOT WRITTEN: [Errno 27] File too large" in done.stdout
    assert f"the start-up trace could not be written to {path}" in done.stderr


def test_a_trace_written_over_an_older_one_keeps_its_permissions(
    site: Site, tmp_path: Path
) -> None:
    """The control: a trace written beside and renamed over the older one is the new trace,
    with the older file's mode, and nothing else is left in the folder."""
    path = tmp_path / "start.json"
    path.write_text("older\n")
    path.chmod(0o640)
    with spawn_with_plugins(site.entry(), namespace=site.ns, ready_timeout=60, trace=path) as g:
        assert g.join(60)
    validate(json.loads(path.read_text()))
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".start.json")] == []


def test_two_live_groups_given_one_trace_path_are_refused_before_the_second_starts(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine passing its one ``trace=`` setting to two groups: the group that closed last
    replaced the other's trace, unsaid. The second is refused before it starts anything (the
    same file by another spelling too: relative, through a symlink); once the first group's
    trace is written the path is free again."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "same.json"
    (tmp_path / "link.json").symlink_to(path)
    with spawn_with_plugins(site.entry(), namespace=site.ns, ready_timeout=60, trace=path) as g:
        for spelling in (str(path), "same.json", tmp_path / "link.json"):
            with pytest.raises(ConfigError, match="already the trace file of another") as info:
                spawn_with_plugins(site.entry(), nprocs=2, namespace=site.ns, trace=spelling)
            assert info.value.setting == "trace"
            assert str(path) in str(info.value) and "its own file" in str(info.value)
        assert g.join(60)
    assert json.loads(path.read_text())["otherData"]["world_size"] == 1
    with spawn_with_plugins(
        site.entry(), nprocs=2, namespace=site.ns, ready_timeout=60, trace="same.json"
    ) as g:
        assert g.join(60)
    assert json.loads(path.read_text())["otherData"]["world_size"] == 2


def test_two_live_groups_may_both_trace_to_a_path_that_is_no_file(
    site: Site, tmp_path: Path
) -> None:
    """The control: ``trace=os.devnull`` (traces thrown away) replaces nothing, so two live
    groups may both be given it."""
    with (
        spawn_with_plugins(
            site.entry(), namespace=site.ns, ready_timeout=60, trace=os.devnull
        ) as one,
        spawn_with_plugins(
            site.entry(), namespace=site.ns, ready_timeout=60, trace=os.devnull
        ) as two,
    ):
        assert one.join(60) and two.join(60)


def test_a_failed_rank_still_gets_its_stages_as_the_launcher_saw_them(
    site: Site, tmp_path: Path
) -> None:
    path = tmp_path / "failed.json"
    with (
        pytest.raises(ChildError),
        spawn_with_plugins(
            site.entry(),
            nprocs=1,
            namespace=site.ns,
            ready_timeout=60,
            trace=path,
            env=fault_env("load_plugins", "raise"),
        ) as group,
    ):
        group.join(60)
    tracks = validate(json.loads(path.read_text()))
    spans = _by_name(tracks[group.pids[0]])
    assert spans["load_plugins"]["args"] == {"seen_by": "launcher"}
    assert "apply_hooks" not in spans
    # the summary says whose clock those are, not the worker's as for a rank that reported
    code, out, err = run_cli("trace", str(path))
    assert code == 0, err
    rank = out.split("rank 0 (pid", 1)[1]
    assert "as the launcher received the rank's stage messages" in rank


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_rank_that_failed_before_its_report_still_has_its_process_start(
    site: Site, tmp_path: Path, start_method: str
) -> None:
    """Such a rank's track had its life and its stages as the launcher saw them, but not its
    ``process start`` (nor its parts), which the launcher's and its HELLO's marks give."""
    path = tmp_path / "failed_start.json"
    with (
        pytest.raises(ChildError),
        spawn_with_plugins(
            site.entry(),
            nprocs=1,
            namespace=site.ns,
            start_method=start_method,
            ready_timeout=60,
            trace=path,
            env=fault_env("resolve_entry", "raise"),
        ) as group,
    ):
        group.join(60)
    tracks = validate(json.loads(path.read_text()))
    spans = _by_name(tracks[group.pids[0]])
    assert spans["resolve_entry"]["args"] == {"seen_by": "launcher"}  # no report: seen stages
    whole, life = spans["process start"], spans["rank 0"]
    assert abs(whole["ts"] - life["ts"]) < 1.0 and _within(whole, life)
    stages = [e for e in tracks[group.pids[0]] if e["cat"] == "stage"]
    assert whole["ts"] + whole["dur"] <= min(e["ts"] for e in stages) + _EPS
    parts = sorted((e for e in tracks[group.pids[0]] if e["cat"] == "start"), key=lambda e: e["ts"])
    assert [e["name"] for e in parts] == _WORKER_PARTS[start_method]
    assert all(_within(e, whole) for e in parts)


def test_a_launch_that_fails_before_its_group_still_writes_its_trace(
    site: Site, tmp_path: Path
) -> None:
    """A preload that raises fails the launch in ``launch_context``, before any rank: the
    trace (asked for to see where a launch's time goes) is written with the launcher's spans."""
    (site.root / f"{site.tag}_badpre.py").write_text("raise RuntimeError('no such device')\n")
    path = tmp_path / "prefail.json"
    with pytest.raises(ForkServerError, match="no such device"):
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            start_method="forkserver",
            preload=(f"{site.tag}_badpre",),
            ready_timeout=60,
            trace=path,
        )
    data = json.loads(path.read_text())
    tracks = validate(data)
    launcher = _by_name(tracks[data["otherData"]["launcher_pid"]])
    assert {"spawn_with_plugins", "build_spec", "launch_context"} <= set(launcher)
    assert _within(launcher["launch_context"], launcher["spawn_with_plugins"])
    assert data["otherData"]["world_size"] == 0


def test_a_relative_trace_path_is_the_folder_current_at_the_call(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is written when the group closes: a launcher that changed folder meanwhile
    (an engine's chdir to its run folder) still finds it where it asked for it."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    with spawn_with_plugins(
        site.entry(), namespace=site.ns, ready_timeout=60, trace="start.json"
    ) as group:
        os.chdir(tmp_path / "elsewhere")
        assert group.join(60)
    assert (tmp_path / "here" / "start.json").is_file()
    assert not (tmp_path / "elsewhere" / "start.json").exists()


_EXPORTER: list[Any] = []


@pytest.fixture
def otel_spans() -> Iterator[Any]:
    """The real SDK's in-memory exporter on this process's tracer provider (set once, and one
    exporter for the process: a provider keeps each processor added to it), emptied first."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if not _EXPORTER:
        if not isinstance(trace.get_tracer_provider(), TracerProvider):
            trace.set_tracer_provider(TracerProvider())
        _EXPORTER.append(InMemorySpanExporter())
        provider = trace.get_tracer_provider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER[0]))  # type: ignore[attr-defined]
    _EXPORTER[0].clear()
    yield _EXPORTER[0]


_STARTED: list[Any] = []


@pytest.fixture
def otel_started(otel_spans: Any) -> Iterator[list[Any]]:
    """Every span started on this process's provider, ended or not (the exporter sees only
    ended ones): a span started and never ended is in this list and not among the finished."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor

    class _Started(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            _STARTED[1].append(span)

    if not _STARTED:
        _STARTED.extend([_Started(), []])
        provider: Any = trace.get_tracer_provider()
        provider.add_span_processor(_STARTED[0])
    _STARTED[1].clear()
    yield _STARTED[1]


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"preload": ["nosuchmod_xyz"], "start_method": "forkserver"}, "preload"),
        ({"preload": [3], "start_method": "forkserver"}, "preload"),
        ({"entry_args": "rank"}, "entry_args"),
    ],
    ids=["unknown-preload", "preload-not-a-name", "entry-args-a-str"],
)
def test_a_call_refused_for_its_arguments_opens_no_trace(
    site: Site, tmp_path: Path, otel_started: list[Any], kwargs: dict[str, Any], setting: str
) -> None:
    """Refused by their values alone, as ``nprocs=0`` is: before the trace opens. They were
    checked after it, so the launch's OpenTelemetry root span was started and never ended
    (never exported) and no file was written, against the rule that a launch failing before
    any rank writes its trace: now nothing is half-open."""
    path = tmp_path / "refused.json"
    with pytest.raises(ConfigError) as info:
        spawn_with_plugins(site.entry(), namespace=site.ns, trace=path, **kwargs)
    assert info.value.setting == setting
    assert [s.name for s in otel_started] == []
    assert not path.exists()


def test_a_launch_whose_namespace_cannot_be_found_writes_its_trace(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    """Finding a namespace by name may load it from its entry point (work, which the trace
    shows): a launch failing there writes its trace, and ends its root span, as a launch
    failing in ``build_spec`` does."""
    from spawnkit.errors import NamespaceError

    path = tmp_path / "no_ns.json"
    with pytest.raises(NamespaceError, match="no_such_ns"):
        spawn_with_plugins(site.entry(), namespace="no_such_ns", trace=path)
    data = json.loads(path.read_text())
    tracks = validate(data)
    assert "spawn_with_plugins" in _by_name(tracks[data["otherData"]["launcher_pid"]])
    assert data["otherData"]["world_size"] == 0
    assert [s.name for s in otel_spans.get_finished_spans()] == ["spawn_with_plugins"]


def test_spans_also_go_to_opentelemetry_with_the_context_in_each_rank(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    (site.root / f"{site.tag}_ctx.py").write_text(
        "import os\n\ndef traceparent():\n    return os.environ.get('TRACEPARENT')\n"
    )
    path = tmp_path / "otel.json"
    with spawn_with_plugins(
        f"{site.tag}_ctx:traceparent", nprocs=2, namespace=site.ns, ready_timeout=60, trace=path
    ) as group:
        seen = group.results(timeout=60)
    spans = {s.name: s for s in otel_spans.get_finished_spans()}
    root = spans["spawn_with_plugins"]
    trace_id = f"{root.context.trace_id:032x}"
    # Each rank got the launch's W3C traceparent: version, trace id, the root span, flags.
    flags = f"{int(root.context.trace_flags):02x}"
    assert seen == [f"00-{trace_id}-{root.context.span_id:016x}-{flags}"] * 2
    chrome = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"}
    assert chrome <= set(spans)  # the same spans (names) in both
    assert {"rank 0", "rank 1", "load_plugins", "build_spec"} <= set(spans)
    assert all(s.context.trace_id == root.context.trace_id for s in spans.values())
    assert spans["rank 0"].parent.span_id == root.context.span_id
    stage = spans["load_plugins"]
    assert stage.parent.span_id in {
        spans["rank 0"].context.span_id,
        spans["rank 1"].context.span_id,
    }
    assert root.start_time <= stage.start_time <= stage.end_time <= root.end_time
    assert {s.status.status_code.name for s in spans.values()} == {"UNSET"}  # nothing failed
    # the launcher's "start rank N" is the launcher's span: the rank's pid is an attribute
    started = spans["start rank 0"].attributes
    assert started["spawnkit.pid"] == os.getpid()
    assert started["spawnkit.started_pid"] == group.pids[0]


def test_traced_warm_launches_with_opentelemetry_reuse_their_server(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    """Each traced launch has a trace context of its own, which its workers get: the warm
    server is not keyed on it (a new server each launch, the old ones kept until exit)."""
    (site.root / f"{site.tag}_ctx2.py").write_text(
        "import os\n\ndef where():\n    return os.getppid(), os.environ.get('TRACEPARENT')\n"
    )
    seen = []
    for n in range(2):
        with spawn_with_plugins(
            f"{site.tag}_ctx2:where",
            namespace=site.ns,
            start_method="forkserver",
            ready_timeout=60,
            trace=tmp_path / f"warm{n}.json",
        ) as group:
            seen.append(group.results(timeout=60)[0])
    roots = [s for s in otel_spans.get_finished_spans() if s.name == "spawn_with_plugins"]
    assert len(roots) == 2
    assert seen[0][0] == seen[1][0], "the second traced launch started a new warm server"
    for (_, traceparent), root in zip(seen, roots, strict=True):  # each launch's own context
        assert traceparent.split("-")[1:3] == [
            f"{root.context.trace_id:032x}",
            f"{root.context.span_id:016x}",
        ]


def test_a_warm_server_keeps_no_traced_launchs_context_for_later_launches(
    site: Site, tmp_path: Path, otel_spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server a traced launch started applied that launch's ``TRACEPARENT``/``TRACESTATE``
    to its own environment: a later untraced launch's workers forked from it continued the
    first launch's (ended) trace, and a later traced launch's got its ``TRACESTATE``. Each
    worker now has its own launch's context or none, the server still shared."""
    monkeypatch.delenv("TRACEPARENT", raising=False)
    monkeypatch.delenv("TRACESTATE", raising=False)
    (site.root / f"{site.tag}_ctx5.py").write_text(
        "import os\n\ndef where():\n    return (os.getppid(), os.environ.get('TRACEPARENT'),"
        " os.environ.get('TRACESTATE'))\n"
    )
    launches: list[dict[str, Any]] = [
        {"trace": tmp_path / "first.json", "env": {"TRACEPARENT": _CALLER, "TRACESTATE": "v=1"}},
        {},  # untraced
        {"trace": tmp_path / "third.json"},  # traced, no trace state
    ]
    seen = []
    for kwargs in launches:
        with spawn_with_plugins(
            f"{site.tag}_ctx5:where",
            namespace=site.ns,
            start_method="forkserver",
            ready_timeout=60,
            **kwargs,
        ) as group:
            seen.append(group.results(timeout=60)[0])
    assert len({server for server, _, _ in seen}) == 1, "each launch started its own server"
    assert seen[0][1].split("-")[1] == _CALLER.split("-")[1] and seen[0][2] == "v=1"
    assert seen[1][1:] == (None, None), "an untraced launch's worker got another's context"
    roots = [s for s in otel_spans.get_finished_spans() if s.name == "spawn_with_plugins"]
    assert seen[2][1].split("-")[1] == f"{roots[-1].context.trace_id:032x}"
    assert seen[2][2] is None, "a traced launch's worker got another launch's trace state"


_DISABLED_SDK_LAUNCHER = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spawnkit import spawn_with_plugins
from spawnkit.namespace import Namespace

if __name__ == "__main__":
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tag = sys.argv[1]
    ns = Namespace(tag, env_prefix=tag.upper())
    with spawn_with_plugins(
        f"{tag}_ctx3:traceparent", nprocs=1, namespace=ns, ready_timeout=60, trace=sys.argv[2]
    ) as group:
        seen = group.results(timeout=60)
    print(json.dumps({"seen": seen, "spans": len(exporter.get_finished_spans())}))
"""


def test_a_disabled_opentelemetry_sdk_leaves_the_launch_traced_without_a_context(
    site: Site, tmp_path: Path
) -> None:
    """``OTEL_SDK_DISABLED=true`` (usual in CI) with a provider set: the SDK's tracer is a
    no-op whose root span has no valid context. The launch runs and writes its JSON trace, and
    no rank gets a ``TRACEPARENT`` (it failed with ``KeyError: 'traceparent'``, nothing run)."""
    pytest.importorskip("opentelemetry.sdk")
    (site.root / f"{site.tag}_ctx3.py").write_text(
        "import os\n\ndef traceparent():\n    return os.environ.get('TRACEPARENT')\n"
    )
    (tmp_path / "launcher.py").write_text(_DISABLED_SDK_LAUNCHER)
    path = tmp_path / "disabled.json"
    env = {
        **os.environ,
        "OTEL_SDK_DISABLED": "true",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.pop("TRACEPARENT", None)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "launcher.py"), site.tag, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "KeyError" not in done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"seen": [None], "spans": 0}
    tracks = validate(json.loads(path.read_text()))
    assert any(e["name"] == "load_plugins" for events in tracks.values() for e in events)


_CALLER = "00-0000000000000000000000000000abcd-00000000000000ef-01"


@pytest.mark.parametrize("carrier", ["env", "current span"])
def test_the_callers_trace_context_is_the_root_spans_parent_and_the_ranks_get_its_state(
    site: Site, tmp_path: Path, otel_spans: Any, carrier: str
) -> None:
    """OpenTelemetry's environment carrier: a ``TRACEPARENT``/``TRACESTATE`` in ``env=`` is the
    caller's context, the root span's parent (it was replaced, the ranks out of the caller's
    trace); the ranks get ``TRACESTATE`` with ``TRACEPARENT`` (it was always dropped). The
    control: without one in ``env=``, the current span is the parent, as before."""
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    (site.root / f"{site.tag}_ctx4.py").write_text(
        "import os\n\ndef both():\n"
        "    return os.environ.get('TRACEPARENT'), os.environ.get('TRACESTATE')\n"
    )
    env = {"TRACEPARENT": _CALLER, "TRACESTATE": "vendor=abc"} if carrier == "env" else {}
    state = TraceState([("vendor", "abc")])
    current = NonRecordingSpan(SpanContext(0x1234, 0x5678, True, TraceFlags(1), state))
    token = context.attach(trace.set_span_in_context(current))
    try:
        with spawn_with_plugins(
            f"{site.tag}_ctx4:both",
            nprocs=2,
            namespace=site.ns,
            ready_timeout=60,
            trace=tmp_path / "caller.json",
            env=env,
        ) as group:
            seen = group.results(timeout=60)
    finally:
        context.detach(token)
    root = next(s for s in otel_spans.get_finished_spans() if s.name == "spawn_with_plugins")
    trace_id, span_id = (0xABCD, 0xEF) if carrier == "env" else (0x1234, 0x5678)
    assert (root.context.trace_id, root.parent.span_id) == (trace_id, span_id)
    assert root.context.trace_state.get("vendor") == "abc"
    mine = f"00-{trace_id:032x}-{root.context.span_id:016x}-01"
    assert seen == [(mine, "vendor=abc")] * 2


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_the_ranks_get_no_trace_state_of_the_launchers_own_beside_the_launchs_context(
    site: Site, tmp_path: Path, otel_spans: Any, monkeypatch: pytest.MonkeyPatch, start_method: str
) -> None:
    """A launcher whose own environment has a ``TRACESTATE`` (its parent's carrier, a CI job's)
    and a root span without one: the ranks got the launch's ``TRACEPARENT`` beside the
    launcher's ``TRACESTATE``, another trace's state read as this one's. Now an empty one."""
    monkeypatch.setenv("TRACEPARENT", _CALLER)  # not the root's parent: env= is (README)
    monkeypatch.setenv("TRACESTATE", "ci=stale")
    (site.root / f"{site.tag}_ctx6.py").write_text(
        "import os\n\ndef both():\n"
        "    return os.environ.get('TRACEPARENT'), os.environ.get('TRACESTATE')\n"
    )
    with spawn_with_plugins(
        f"{site.tag}_ctx6:both",
        namespace=site.ns,
        start_method=start_method,
        ready_timeout=60,
        trace=tmp_path / "state.json",
    ) as group:
        ((traceparent, tracestate),) = group.results(timeout=60)
    root = next(s for s in otel_spans.get_finished_spans() if s.name == "spawn_with_plugins")
    assert traceparent.split("-")[1] == f"{root.context.trace_id:032x}"
    assert not root.context.trace_state
    assert tracestate == ""  # W3C: an empty trace state is none


def test_a_malformed_traceparent_in_env_is_refused_before_any_rank(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    """The caller's context that cannot be read would leave the launch out of the caller's
    trace, unsaid: refused, naming the variable and the form."""
    with pytest.raises(ConfigError, match=r"TRACEPARENT.*not a W3C traceparent") as info:
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            trace=tmp_path / "bad.json",
            env={"TRACEPARENT": "00-abcd-ef-01"},
        )
    assert info.value.setting == "env"
    assert not otel_spans.get_finished_spans()


def _status(span: Any) -> tuple[str, str | None]:
    return span.status.status_code.name, span.status.description


def test_a_launch_that_raised_and_its_failed_rank_have_an_error_status_in_opentelemetry(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    """Every span was UNSET, a launch that raised ``ChildRaisedError`` as a good one: the
    rank that failed is ERROR with the error, one that ended with another exit code is ERROR
    with it, the root is ERROR with the exception recorded."""
    (site.root / f"{site.tag}_fail1.py").write_text(
        "import os, time\n\ndef run():\n"
        "    if os.environ['RANK'] == '1':\n        raise RuntimeError('boom in rank 1')\n"
        "    time.sleep(30)\n"
    )
    with (
        pytest.raises(ChildRaisedError, match="boom in rank 1"),
        spawn_with_plugins(
            f"{site.tag}_fail1:run",
            nprocs=2,
            namespace=site.ns,
            ready_timeout=60,
            trace=tmp_path / "fail.json",
        ) as group,
    ):
        group.join(60)
    spans = {s.name: s for s in otel_spans.get_finished_spans()}
    root = spans["spawn_with_plugins"]
    code, described = _status(root)
    assert code == "ERROR" and described is not None
    assert described.startswith("ChildRaisedError: rank 1 (pid")
    [event] = [e for e in root.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("ChildRaisedError")
    code, described = _status(spans["rank 1"])
    assert code == "ERROR" and described is not None and "boom in rank 1" in described
    stopped = group.exit_codes[0]  # rank 0 stopped by the teardown (SIGTERM: -15)
    assert _status(spans["rank 0"]) == (
        ("UNSET", None) if stopped == 0 else ("ERROR", "ended by SIGTERM (exit code -15)")
    )
    others = {n for n, s in spans.items() if s.status.status_code.name != "UNSET"}
    assert others <= {"spawn_with_plugins", "rank 0", "rank 1"}


def test_a_stopped_rank_is_an_error_in_opentelemetry_the_launch_that_stopped_it_not(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    (site.root / f"{site.tag}_sleep.py").write_text(
        "import time\n\ndef run():\n    time.sleep(30)\n"
    )
    with spawn_with_plugins(
        f"{site.tag}_sleep:run", namespace=site.ns, ready_timeout=60, trace=tmp_path / "s.json"
    ) as group:
        group.wait_ready(60)
        group.terminate()
    assert group.exit_codes == [-15]
    spans = {s.name: s for s in otel_spans.get_finished_spans()}
    assert _status(spans["rank 0"]) == ("ERROR", "ended by SIGTERM (exit code -15)")
    assert _status(spans["spawn_with_plugins"]) == ("UNSET", None)


def test_a_launch_that_failed_before_its_group_has_an_error_root_span(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    (site.root / f"{site.tag}_badpre2.py").write_text("raise RuntimeError('no such device')\n")
    with pytest.raises(ForkServerError, match="no such device"):
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            start_method="forkserver",
            preload=(f"{site.tag}_badpre2",),
            ready_timeout=60,
            trace=tmp_path / "prefail2.json",
        )
    [root] = [s for s in otel_spans.get_finished_spans() if s.name == "spawn_with_plugins"]
    code, described = _status(root)
    assert code == "ERROR" and described is not None
    assert described.startswith("ForkServerError: ")
    [event] = [e for e in root.events if e.name == "exception"]
    assert "no such device" in event.attributes["exception.message"]


def test_a_launch_that_failed_starting_its_ranks_has_an_error_root_span(
    site: Site, tmp_path: Path, otel_spans: Any
) -> None:
    """After the group exists (``rank_extra`` is asked as the ranks start): the group's
    teardown ended the root span with the launch's error status UNSET, as a good run's."""
    with pytest.raises(ConfigError, match=r"rank_extra\(0\) returned 5") as info:
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            rank_extra=lambda rank: 5,  # type: ignore[arg-type, return-value]
            trace=tmp_path / "start.json",
        )
    [root] = [s for s in otel_spans.get_finished_spans() if s.name == "spawn_with_plugins"]
    assert _status(root) == ("ERROR", f"ConfigError: {str(info.value).splitlines()[0]}")
    [event] = [e for e in root.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("ConfigError")


_INTERRUPTED_LAUNCHER = """
import atexit, os, signal, sys, time

def report():  # registered first: runs after spawnkit's own exit handler, the last teardown
    [root] = [s for s in exporter.get_finished_spans() if s.name == "spawn_with_plugins"]
    print("root", root.status.status_code.name, root.status.description, flush=True)

atexit.register(report)
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spawnkit import spawn_with_plugins
from spawnkit.namespace import Namespace

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's launcher has
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tag, path, how = sys.argv[1:4]
    ns = Namespace(tag, env_prefix=tag.upper())
    sig = signal.SIGINT if how in ("ctrl-c", "in-block") else signal.SIGTERM
    try:
        if how == "sigterm-no-with":  # the group is torn down at exit
            group = spawn_with_plugins(f"{tag}_nap:run", namespace=ns, ready_timeout=60, trace=path)
            group.wait_ready(60)
            os.kill(os.getpid(), sig)
            group.join(30)
        with spawn_with_plugins(
            f"{tag}_nap:run", namespace=ns, ready_timeout=60, grace_period=5, trace=path
        ) as group:
            group.wait_ready(60)
            os.kill(os.getpid(), sig)
            if how == "in-block":  # raised by the block's own code, not by a wait
                time.sleep(30)
            group.join(30)
    except BaseException as exc:
        print("raised", type(exc).__name__, flush=True)
"""


@pytest.mark.parametrize("how", ["ctrl-c", "in-block", "sigterm", "sigterm-no-with"])
def test_an_interrupted_launch_has_an_error_root_span(site: Site, tmp_path: Path, how: str) -> None:
    """Ctrl-C (in a wait, or in the block's own code) or SIGTERM to the launcher (in a `with`
    block, or not: the group torn down at exit): the group was torn down and the root span
    ended UNSET, an interrupted launch as a good run."""
    pytest.importorskip("opentelemetry.sdk")
    (site.root / f"{site.tag}_nap.py").write_text("import time\n\ndef run():\n    time.sleep(60)\n")
    (tmp_path / "launcher.py").write_text(_INTERRUPTED_LAUNCHER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("TRACEPARENT", None)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "launcher.py"), site.tag, str(tmp_path / "i.json"), how],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    sigterm = how.startswith("sigterm")
    raised = "Terminated" if sigterm else "KeyboardInterrupt"
    described = "Terminated: exit code 143" if sigterm else "KeyboardInterrupt"
    assert done.stdout.splitlines()[-2:] == [f"raised {raised}", f"root ERROR {described}"]


@pytest.mark.parametrize(
    "value", [b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 7], ids=["bytes", "int"]
)
def test_a_traceparent_that_is_no_text_is_refused_and_frees_the_trace_path(
    site: Site, tmp_path: Path, otel_started: list[Any], value: object
) -> None:
    """The text form that is no traceparent was refused; bytes or a number were dropped and
    replaced by the launch's own context, the launch leaving the caller's trace unsaid.  And
    a refused context held the trace path: the next launch given it was refused as if a live
    group still wrote it."""
    path = tmp_path / "tp.json"
    with pytest.raises(ConfigError, match=r"TRACEPARENT.*not a W3C traceparent") as info:
        spawn_with_plugins(
            site.entry(),
            namespace=site.ns,
            trace=path,
            env={"TRACEPARENT": value},  # type: ignore[dict-item]
        )
    assert info.value.setting == "env"
    assert f"({type(value).__name__} given)" in str(info.value)
    assert [s.name for s in otel_started] == []  # refused before the root span started
    for bad in ("00-abcd-ef-01", value):  # the path is free after either refusal
        with pytest.raises(ConfigError, match="not a W3C traceparent"):
            spawn_with_plugins(
                site.entry(),
                namespace=site.ns,
                trace=path,
                env={"TRACEPARENT": bad},  # type: ignore[dict-item]
            )
    with spawn_with_plugins(site.entry(), namespace=site.ns, ready_timeout=60, trace=path) as group:
        group.wait_ready(60)
    assert json.loads(path.read_text())["otherData"]["world_size"] == 1
