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
    (tmp_path / f"{name}.py").write_text("import os\n\ndef work(payload=None):\n    return 1\n")
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
