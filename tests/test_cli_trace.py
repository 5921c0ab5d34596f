"""``spawnkit launch --trace FILE`` and ``spawnkit trace FILE [--plot]``, end to end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from _cli_support import run_cli


@pytest.fixture
def entry_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"trace_entry_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "import os, signal, time\n\ndef work(payload=None):\n    return 1\n\n"
        "def kill_odd(rank, payload=None):\n"  # after the even ranks returned and exited 0
        "    if rank % 2:\n        time.sleep(2)\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return rank\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    return name


def test_launch_trace_then_summary_and_plot(tmp_path: Path, entry_module: str) -> None:
    trace = tmp_path / "start{0}.json"  # braces: the closing line is format()ted
    code, out, err = run_cli(
        "launch", f"{entry_module}:work", "--nprocs", "2", "--timeout", "120", "--trace", str(trace)
    )
    assert code == 0, err
    assert f"start-up trace in {trace} (spawnkit trace {trace}" in out
    pids = {e["pid"] for e in json.loads(trace.read_text())["traceEvents"]}
    assert len(pids) == 3  # the launcher and two ranks
    svg = tmp_path / "start.svg"
    code, out, err = run_cli("trace", str(trace), "--plot", str(svg))
    assert code == 0, err
    assert "2 rank(s)" in out
    for rank in (0, 1):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"rank {rank} (pid "))
        assert "load_plugins" in line and "entry" in line
    assert "rank 1 ready at" in out
    # each start, split: the launcher's part of rank 1's, and where rank 0's process start went
    assert "    start rank 1 (" in out and "pickle spec" in out and "spawn interpreter" in out
    split = next(ln for ln in out.splitlines() if ln.startswith("    process start ("))
    assert "interpreter start-up" in split and split.endswith(tuple("0123456789"))
    assert "child_main to first stage" in split
    drawn = svg.read_text()  # text stays text in the SVG: the rows and the legend are there
    assert "rank 1 (pid" in drawn and "load_plugins" in drawn and "launcher (pid" in drawn


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("as_json", [None, "-"])
def test_a_trace_that_could_not_be_written_is_said_and_fails_the_command(
    entry_module: str, as_json: str | None
) -> None:
    """``--trace /dev/full``: every write fails (no space left). The closing line said
    "start-up trace in /dev/full" and the command exited 0; as for a ``--json FILE`` that
    could not be written, the output asked for is missing: it says so and exits 1."""
    json_args = ("--json", as_json) if as_json else ()
    code, out, err = run_cli(
        "launch", f"{entry_module}:work", "--timeout", "120", "--trace", "/dev/full", *json_args
    )
    assert code == 1, (out, err)
    assert "start-up trace in /dev/full" not in out
    said = err if as_json else out
    assert "the start-up trace was NOT written to /dev/full" in said
    assert "No space left on device" in said
    if as_json:  # the run itself succeeded: the document says so
        assert json.loads(out[out.index("{") :])["ok"] is True
    else:
        assert "1 rank(s) finished in" in out and "rank 0 returned: 1" in out


def test_trace_refusals_are_one_usage_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = run_cli("trace", str(bad))
    assert code == 2 and "is not a spawnkit start-up trace" in err and "--trace FILE" in err
    code, _, err = run_cli("trace", str(bad), "--plot", str(tmp_path / "t.pdf"))
    assert code == 2 and "must end in .svg or .png" in err
    code, _, err = run_cli("launch", "os:getpid", "--launcher", "ray", "--trace", str(bad))
    assert code == 2 and "--trace draws ranks this process starts" in err
    assert "(got --launcher ray)" in err  # refused before asking whether Ray is installed


def test_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec: not installed
    code, _, err = run_cli("trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "t.svg"))
    assert code == 2 and "needs matplotlib" in err and 'pip install "spawnkit[plot]"' in err


def _one_usage_line(code: int, out: str, err: str, *needles: str) -> None:
    """Refused as bad input: exit 2, one line with its fix, nothing printed before it."""
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and "Fix:" in err, err
    for needle in needles:
        assert needle in err, err


def test_launch_refuses_one_file_for_trace_and_json(
    tmp_path: Path, entry_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: the JSON outcome, written after the trace, replaced it, the closing line still
    # pointed at the trace, and `spawnkit trace same.json` then refused the file
    monkeypatch.chdir(tmp_path)
    entry = f"{entry_module}:work"
    code, out, err = run_cli("launch", entry, "--trace", "same.json", "--json", "./same.json")
    _one_usage_line(code, out, err, "--trace 'same.json' and --json './same.json'")
    assert not (tmp_path / "same.json").exists()  # nothing ran
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "sub", tmp_path / "link")
    code, out, err = run_cli("launch", entry, "--trace", "sub/t.json", "--json", "link/t.json")
    _one_usage_line(code, out, err, "name the same file")
    # the control: two files, each holding what it was asked for
    code, out, err = run_cli(
        "launch", entry, "--timeout", "120", "--trace", "t.json", "--json", "outcome.json"
    )
    assert code == 0, err
    assert json.loads((tmp_path / "outcome.json").read_text())["ok"] is True
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())


@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_launch_refuses_a_trace_path_it_cannot_write_naming_the_option(
    tmp_path: Path, entry_module: str, where: str
) -> None:
    # before: rc 1, "spawnkit: FAILED: ConfigError: trace=...", an argument the user never passed
    target = tmp_path if where == "folder" else tmp_path / "no" / "t.json"
    code, out, err = run_cli("launch", f"{entry_module}:work", "--trace", str(target))
    why = "it is a folder" if where == "folder" else "is no writable folder"
    _one_usage_line(code, out, err, f"--trace {str(target)!r}: cannot write", why)
    assert "trace=" not in err


@pytest.mark.parametrize("name", ["start.svg", "start.PNG", "start.pdf"])
def test_launch_refuses_a_trace_named_as_a_picture(
    tmp_path: Path, entry_module: str, name: str
) -> None:
    # before: JSON was written under the picture's name, and `spawnkit trace start.svg --plot
    # start.svg` then drew the timeline over the trace
    target = tmp_path / name
    code, out, err = run_cli("launch", f"{entry_module}:work", "--trace", str(target))
    _one_usage_line(code, out, err, "is Chrome trace-event JSON, not a picture")
    assert f"--trace {tmp_path / 'start.json'}" in err
    assert not target.exists()


def test_plot_over_its_own_trace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a trace under a picture's name, as spawn_with_plugins(trace=) still writes one
    monkeypatch.chdir(tmp_path)
    events = [{"ph": "X", "pid": 1, "ts": 0, "dur": 5, "name": "entry"}]
    written = json.dumps({"traceEvents": events})
    Path("start.svg").write_text(written)
    code, out, err = run_cli("trace", "start.svg", "--plot", "./start.svg")
    _one_usage_line(code, out, err, "--plot './start.svg' is the trace file 'start.svg'")
    assert Path("start.svg").read_text() == written


def test_plot_to_a_folder_or_a_full_disk_is_said_not_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_module: str
) -> None:
    """Before: ``internal error: IsADirectoryError ... report it`` (exit 1) for a folder named
    like a picture, and the same for a picture the disk could not take."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("launch", f"{entry_module}:work", "--trace", "start.json")
    assert code == 0, err
    Path("d.svg").mkdir()
    code, out, err = run_cli("trace", "start.json", "--plot", "d.svg")
    _one_usage_line(code, out, err, "--plot 'd.svg' is a folder")
    Path("full.svg").symlink_to("/dev/full")  # every write: ENOSPC
    code, out, err = run_cli("trace", "start.json", "--plot", "full.svg")
    assert code == 1 and "internal error" not in err, err
    assert "the timeline was NOT written to full.svg" in err and "No space left" in err, err


def test_summary_shows_the_exit_code_of_a_rank_that_did_not_exit_0(
    tmp_path: Path, entry_module: str
) -> None:
    # before: "rank 1 exit at 631.8 ms", the file's code -9 left out
    trace = tmp_path / "start.json"
    args = ["--nprocs", "2", "--entry-args", "rank", "payload", "--timeout", "120"]
    code, _, err = run_cli("launch", f"{entry_module}:kill_odd", *args, "--trace", str(trace))
    assert code == 128 + 9, err
    code, out, err = run_cli("trace", str(trace))
    assert code == 0, err
    exits = {ln.split(" exit")[0].strip(): ln for ln in out.splitlines() if " exit" in ln}
    assert exits["rank 1"].startswith("    rank 1 exit with code -9 (SIGKILL) at "), out
    assert exits["rank 0"].startswith("    rank 0 exit at "), out  # exit 0: said as before


_FAILED_BEFORE_REPORT = "it failed before its report"


def test_summary_says_only_of_a_rank_that_it_failed_before_its_report(
    tmp_path: Path, entry_module: str
) -> None:
    """A forkserver launch's trace has the warm server's track, its stages as the launcher
    read them: the summary said under it that it "failed before its report", of a server that
    started and served every rank. The control: a rank whose entry module raised as it was
    imported (before its report) is still said to have failed so."""
    trace = tmp_path / "warm.json"
    args = ["--nprocs", "2", "--start-method", "forkserver", "--timeout", "120"]
    code, _, err = run_cli("launch", f"{entry_module}:work", *args, "--trace", str(trace))
    assert code == 0, err
    code, out, err = run_cli("trace", str(trace))
    assert code == 0, err
    assert out.count("warm-start server (pid ") == 1, out
    assert _FAILED_BEFORE_REPORT not in out, out
    broken = f"{entry_module}_broken"
    (tmp_path / f"{broken}.py").write_text("raise RuntimeError('no')\n\ndef work():\n    pass\n")
    failed = tmp_path / "failed.json"
    code, _, err = run_cli("launch", f"{broken}:work", "--timeout", "120", "--trace", str(failed))
    assert code == 1, err
    code, out, err = run_cli("trace", str(failed))
    assert code == 0, err
    rank0 = out.split("rank 0 (pid ", 1)[1]
    assert _FAILED_BEFORE_REPORT in rank0, out
