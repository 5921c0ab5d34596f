"""The demo engine: its arguments, model and scheduler, and real spawned runs with its plugins."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from _cli_support import run_cli
from spawnkit.demo.server_args import ServerArgs


def test_server_args_validate() -> None:
    with pytest.raises(ValueError, match="dp_size must be a positive int"):
        ServerArgs(dp_size=0)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        ServerArgs(hidden_size=130, num_heads=4)
    with pytest.raises(ValueError, match="dtype must be one of"):
        ServerArgs(dtype="int8")


def test_requests_are_shared_round_robin() -> None:
    args = ServerArgs(num_requests=7, dp_size=3)
    shards = [args.requests_for_rank(r) for r in range(3)]
    assert shards == [[0, 3, 6], [1, 4], [2, 5]]
    with pytest.raises(ValueError, match="outside dp_size"):
        args.requests_for_rank(3)


def test_server_args_pickle_by_reference() -> None:
    data = pickle.dumps(ServerArgs(seed=7))
    assert b"spawnkit.demo.server_args" in data
    assert pickle.loads(data) == ServerArgs(seed=7)


def test_importing_the_package_imports_neither_torch_nor_the_scheduler() -> None:
    code = (
        "import sys, spawnkit.demo as d; from spawnkit.demo import Engine, ServerArgs; "
        "assert 'torch' not in sys.modules, 'torch'; "
        "assert 'spawnkit.demo.scheduler' not in sys.modules; "
        "assert 'spawnkit.demo.engine' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def demo_platform():
    """The demo namespace's platform resolved in this process, and forgotten afterwards."""
    from spawnkit.demo.namespace import demo_namespace

    platforms = demo_namespace().platforms
    platforms.reset_for_tests()
    yield platforms
    platforms.reset_for_tests()


@pytest.mark.needs_torch
def test_scheduler_batches_and_model_is_deterministic(demo_platform) -> None:
    import torch

    from spawnkit.demo.model import build_model, request_input
    from spawnkit.demo.scheduler import Scheduler

    args = ServerArgs(num_requests=10, max_batch_size=4, dp_size=2, num_layers=1)
    scheduler = Scheduler(args, gpu_id=1, dp_rank=1)
    sizes = []
    while (batch := scheduler.get_next_batch_to_run()) is not None:
        sizes.append(len(batch.request_ids))
    assert sizes == [4, 1]  # rank 1 serves requests 1, 3, 5, 7, 9

    result = Scheduler(args, gpu_id=0, dp_rank=0).event_loop()
    assert sorted(result.checksums) == [0, 2, 4, 6, 8]
    assert result.tokens == 5 * args.seq_len and result.batches == 2
    # The same request gives the same number in a freshly built model (fixed seed).
    model = build_model(args)
    with torch.no_grad():
        expected = float(model(request_input(args, 4)[None])[0, -1].sum())
    assert result.checksums[4] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    norms = [m for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert len(norms) == 3 and all(n.dispatch_choice is not None for n in norms)


# ----------------------------------------------------------- real spawned runs
SMALL = ServerArgs(num_requests=6, max_batch_size=2, num_layers=1, hidden_size=64)


@pytest.mark.needs_torch
def test_two_schedulers_run_with_the_demo_plugins(demo_platform) -> None:
    """spawnkit's own pyproject registers the demo plugins; both hooks run in every rank."""
    import torch

    from spawnkit.demo.engine import Engine
    from spawnkit.demo.model import build_model, request_input

    run = Engine(SMALL, timeout=120).run()
    assert [r["rank"] for r in run.results] == [0, 1]
    for r in run.results:
        hooks = [e["hook"] for e in r["hook_events"]]
        assert hooks.count("spawnkit.demo.init_banner") == 1
        # one timed call per batch plus the final call that finds the queue empty
        assert hooks.count("spawnkit.demo.batch_timer") == r["batches"] + 1
        banner = next(e for e in r["hook_events"] if e["hook"] == "spawnkit.demo.init_banner")
        assert banner["gpu_id"] == r["rank"] == r["gpu_id"]
        assert r["scheduler_class"] == "spawnkit.demo.scheduler.Scheduler"
        # the seed's pipe: ready, then the same result the launcher returned
        statuses = [m["status"] for m in run.pipe_messages[r["rank"]]]
        assert statuses == ["ready", "done"]
        assert run.pipe_messages[r["rank"]][1]["result"] == r
    assert sorted(int(k) for r in run.results for k in r["checksums"]) == list(range(6))
    # every worker computed exactly what the fixed-seed model gives in this process
    model = build_model(SMALL)
    with torch.no_grad():
        for r in run.results:
            for rid, value in r["checksums"].items():
                expected = float(model(request_input(SMALL, int(rid))[None])[0, -1].sum())
                assert value == pytest.approx(expected, rel=1e-4, abs=1e-4)
    for report in run.reports:
        assert set(report.hooks) == {
            "spawnkit.demo.scheduler.Scheduler.__init__",
            "spawnkit.demo.scheduler.Scheduler.get_next_batch_to_run",
        }
        assert {p["name"] for p in report.plugins} >= {"batch_timer", "init_banner"}
        assert report.namespace == "spawnkit.demo"
        assert {h["state"] for hs in report.hooks.values() for h in hs} == {"applied"}
        assert "hooks: 2 target(s) (2 applied)" in report.format()


@pytest.fixture
def broken_demo_plugin(tmp_path, monkeypatch):
    """A real installed distribution whose demo plugin raises in register()."""
    from spawnkit import _metadata
    from spawnkit.testing import write_distribution

    module = f"broken_demo_{tmp_path.name.replace('-', '_')}"
    write_distribution(
        tmp_path,
        "broken-demo-plugin",
        "9.9",
        entry_points={"spawnkit.demo.plugins": {"broken": f"{module}:register"}},
        modules={module: "def register():\n    raise RuntimeError('exploded while registering')\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _metadata.clear_cache()
    yield module
    monkeypatch.undo()
    _metadata.clear_cache()


@pytest.mark.needs_torch
def test_a_failing_plugin_fails_the_demo_with_its_name(broken_demo_plugin, demo_platform) -> None:
    from spawnkit.demo.engine import Engine
    from spawnkit.errors import ChildError

    with pytest.raises(ChildError) as info:
        Engine(SMALL, timeout=120).run()
    text = str(info.value)
    assert "exploded while registering" in text
    assert "broken" in text and "broken-demo-plugin" in text
    assert info.value.stage == "load_plugins"


@pytest.mark.needs_torch
def test_cli_demo_reports_failure_with_exit_status(broken_demo_plugin, demo_platform) -> None:
    import io

    from spawnkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["demo", "--requests", "4"], stdout=out, stderr=err)
    assert code == 1
    first = err.getvalue().splitlines()[0]
    assert first.startswith("spawnkit: FAILED: ChildRaisedError: rank ")
    assert "load_plugins" in first and "exploded while registering" in err.getvalue()


@pytest.mark.needs_torch
@pytest.mark.parametrize("target", ["file", "-"])
def test_cli_demo_json_of_a_failed_run_says_it_failed(
    broken_demo_plugin, demo_platform, tmp_path, target
) -> None:
    """``demo --json FILE`` of a run that failed wrote nothing: FILE from an earlier run that
    passed stayed as it was (``"ok": true``), and ``--json -`` printed no document; ``launch``
    writes ``{"ok": false, ...}``, and so does ``demo`` now."""
    import io
    import json

    from spawnkit.cli import main

    path = tmp_path / "demo.json"
    path.write_text('{"ok": true, "results": []}\n')  # an earlier run's
    out, err = io.StringIO(), io.StringIO()
    where = str(path) if target == "file" else "-"
    code = main(["demo", "--requests", "4", "--json", where], stdout=out, stderr=err)
    assert code == 1
    data = json.loads(path.read_text() if target == "file" else out.getvalue())
    assert data["ok"] is False and data["exit_status"] == 1
    assert data["error"] == "ChildRaisedError" and data["stage"] == "load_plugins"
    assert data["rank"] in (0, 1) and "exploded while registering" in data["message"]
    assert "spawnkit: FAILED: ChildRaisedError" in err.getvalue()


@pytest.mark.needs_torch
def test_cli_demo_json(tmp_path, demo_platform) -> None:
    import io
    import json

    from spawnkit.cli import main

    target = tmp_path / "demo.json"
    out, err = io.StringIO(), io.StringIO()
    code = main(["demo", "--requests", "4", "--json", str(target)], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    data = json.loads(target.read_text())
    assert data["ok"] is True  # as launch's: `jq .ok` tells a passed run from a failed one
    assert [r["rank"] for r in data["results"]] == [0, 1]
    assert all(r["hook_events"] for r in data["results"])
    text = out.getvalue()
    assert "what the hooks did" in text and "spawnkit.demo.init_banner" in text
    assert "stage timings (ms)" in text


@pytest.mark.needs_torch
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_cli_demo_says_when_its_trace_was_not_written(tmp_path, demo_platform) -> None:
    """``--trace /dev/full``: the demo ended with "start-up trace in /dev/full" and exit 0."""
    import io

    from spawnkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = ["demo", "--nprocs", "1", "--requests", "2", "--trace", "/dev/full"]
    code = main(argv, stdout=out, stderr=err)
    assert code == 1, err.getvalue()
    text = out.getvalue()
    assert "what the hooks did" in text  # the run itself went through
    assert "the start-up trace was NOT written to /dev/full" in text
    assert "No space left on device" in text and "start-up trace in" not in text


class _Devices:
    """A platform as the scheduler reads it: a torch device type and how many devices it has."""

    def __init__(self, device_type: str, count: int | None) -> None:
        self.device_type = device_type
        self._count = count

    def get_device_count(self) -> int:
        if self._count is None:
            raise NotImplementedError("get_device_count")
        return self._count


@pytest.mark.needs_torch
def test_each_scheduler_computes_on_its_own_gpu_id_and_says_when_it_shares_one() -> None:
    # Seen on a one-GPU H200: both schedulers ran on the bare "cuda" device (device 0) while
    # rank 1 said gpu_id=1; on an eight-GPU machine rank 1 would have sat on GPU 0 silently.
    # "meta" stands for an accelerator here: torch indexes it without allocating anything.
    import torch

    from spawnkit.demo.scheduler import _torch_device

    two = _Devices("meta", 2)
    assert _torch_device(two, 1) == (torch.device("meta", 1), "")
    device, note = _torch_device(two, 3)
    assert str(device) == "meta:1"
    assert note == "gpu_id 3 has no meta device of its own (2 visible): it shares meta:1"
    assert _torch_device(_Devices("meta", None), 5)[0].index is None  # cannot count: current
    assert _torch_device(_Devices("cpu", 1), 1) == (torch.device("cpu"), "")


def _one_usage_line(code: int, out: str, err: str, *needles: str) -> None:
    """Refused as bad input: exit 2, one line with its fix, before the demo's heading."""
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and "Fix:" in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.needs_torch
def test_cli_demo_refuses_one_file_for_trace_and_json(tmp_path) -> None:
    same = str(tmp_path / "same.json")
    code, out, err = run_cli("demo", "--trace", same, "--json", same)
    _one_usage_line(code, out, err, "--trace", "--json", "name the same file")
    assert not (tmp_path / "same.json").exists()


@pytest.mark.needs_torch
def test_cli_demo_refuses_a_trace_folder_before_its_heading(tmp_path) -> None:
    # before: the heading and "(worker output follows ...)", then rc 1 with "ConfigError: trace="
    code, out, err = run_cli("demo", "--trace", str(tmp_path))
    _one_usage_line(code, out, err, f"--trace {str(tmp_path)!r}", "it is a folder")
    assert "trace=" not in err


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_cli_demo_timeout_must_be_positive_seconds(value: str) -> None:
    # before: 0 and -1 were an "internal error: ValueError ... report it" (exit 1), nan a
    # "ConfigError: ready_timeout=nan", an argument the command-line user does not have
    code, out, err = run_cli("demo", "--timeout", value)
    assert code == 2 and out == "", err
    assert err.startswith(f"spawnkit demo: error: argument --timeout: {value} must be more than 0")
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err
