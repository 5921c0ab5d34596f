"""Every rank's output reaches the launcher's real stdout/stderr in whole lines, never two
ranks inside one line; ``prefix_output=True`` names the rank on each line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

LINES = 200
RANKS = 4

_WORKER = """
import os, sys, time

def chatter(payload=None):
    from spawnkit.bootstrap import current_spec
    rank = current_spec().rank
    for i in range(LINES):
        # One line in three writes, each flushed: shared descriptors interleave inside it.
        sys.stdout.write(f"rank={rank} line={i:03d} ")
        sys.stdout.flush()
        os.write(1, b"x" * 40)
        sys.stdout.write(f" end={rank}:{i:03d}\\n")
        sys.stdout.flush()
        if i % 50 == 0:
            sys.stderr.write(f"err rank={rank} i={i:03d} ")
            sys.stderr.flush()
            sys.stderr.write("done\\n")
    sys.stdout.write(f"tail rank={rank} without newline")  # a partial last line
    return rank
""".replace("LINES", str(LINES))

_LAUNCHER = """
import sys
from spawnkit.launch import spawn_with_plugins
from spawnkit.namespace import Namespace

if __name__ == "__main__":
    ns = Namespace(sys.argv[1], env_prefix=sys.argv[1].upper())
    extra = {"prefix_output": True} if sys.argv[2] == "prefix" else {}
    with spawn_with_plugins("relayworker:chatter", nprocs=RANKS, namespace=ns,
                            ready_timeout=180, join_timeout=180, **extra) as group:
        results = group.results()
    print("LAUNCHER DONE", results, flush=True)
""".replace("RANKS", str(RANKS))

_LINE = re.compile(r"rank=(\d) line=(\d{3}) x{40} end=(\d):(\d{3})")


def _launch(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "relayworker.py").write_text(_WORKER)
    (tmp_path / "launcher.py").write_text(_LAUNCHER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    tag = f"skrelay{os.getpid()}{mode[:2]}"
    return subprocess.run(
        [sys.executable, str(tmp_path / "launcher.py"), tag, mode],
        capture_output=True, text=True, timeout=300, env=env,
    )


@pytest.mark.parametrize("mode", ["plain", "prefix"])
def test_four_ranks_printing_concurrently_arrive_line_by_line(tmp_path: Path, mode: str) -> None:
    done = _launch(tmp_path, mode)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == f"LAUNCHER DONE {list(range(RANKS))}"  # after every rank's output
    seen: dict[int, list[int]] = {r: [] for r in range(RANKS)}
    tails = set()
    for line in lines[:-1]:
        prefix = ""
        if mode == "prefix":
            m = re.match(r"\[rank(\d)\]: ", line)
            assert m, f"line without its rank prefix: {line!r}"
            prefix, line = m.group(1), line[m.end():]
        if line.startswith("tail rank="):
            tails.add(int(line.removeprefix("tail rank=").split()[0]))
            assert line.endswith(" without newline")
            continue
        m = _LINE.fullmatch(line)
        assert m, f"a line was broken or mixed with another rank's: {line!r}"
        rank, i = int(m.group(1)), int(m.group(2))
        assert (int(m.group(3)), int(m.group(4))) == (rank, i)
        assert not prefix or int(prefix) == rank
        seen[rank].append(i)
    assert tails == set(range(RANKS))  # the partial last lines arrived at exit
    for rank in range(RANKS):
        assert seen[rank] == list(range(LINES)), f"rank {rank} lost or reordered lines"
    errs = [e for e in done.stderr.splitlines() if "err rank=" in e]
    assert len(errs) == RANKS * 4
    for line in errs:
        body = re.sub(r"^\[rank\d\]: ", "", line) if mode == "prefix" else line
        assert re.fullmatch(r"err rank=\d i=\d{3} done", body), line


def test_cli_prefix_output(tmp_path: Path) -> None:
    (tmp_path / "relayworker.py").write_text(_WORKER)
    spawnkit = str(Path(sys.executable).with_name("spawnkit"))
    done = subprocess.run(
        [spawnkit, "launch", "relayworker:chatter", "--nprocs", "2", "--prefix-output",
         "--app-dir", str(tmp_path), "--timeout", "180"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if "line=" in line]
    assert len(lines) == 2 * LINES
    for line in lines:
        m = re.fullmatch(r"\[rank(\d)\]: " + _LINE.pattern, line)
        assert m and m.group(1) == m.group(2), line



def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_ranks_output_is_relayed_from_its_start_and_the_relay_leaves_nothing_open(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import time

    from spawnkit.launch._output import OutputRelay

    before = _fds()
    relay = OutputRelay(prefix=True)
    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    relay.add(0, out_r, err_r)
    os.write(out_w, b"written while later ranks still start\n")
    # relayed now, not once the launch loop ends: a rank that filled its pipe would stall
    seen, deadline = "", time.monotonic() + 10
    while "later ranks" not in seen and time.monotonic() < deadline:
        time.sleep(0.01)
        seen += capfd.readouterr().out
    assert seen == "[rank0]: written while later ranks still start\n"
    os.write(err_w, b"an error line")
    os.close(out_w)
    os.close(err_w)
    assert relay.finish(timeout=10)
    assert capfd.readouterr().err == "[rank0]: an error line\n"
    assert relay.finish(timeout=1)  # again: nothing left to wait for
    assert _fds() == before  # the ranks' pipes, the wake-up pipe and the selector: all closed


_BAR_WORKER = """
import os, sys, time

def bar(go):
    sys.stderr.write("\\r step 1/2")  # as tqdm redraws its line: "\\r", then the state
    sys.stderr.flush()
    sys.stderr.write("\\r step 2/2")
    sys.stderr.flush()
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.02)
    sys.stderr.write("\\n")  # the bar is done
    return os.path.exists(go)
"""

_BAR_LAUNCHER = """
import sys
from spawnkit.launch import spawn_with_plugins
from spawnkit.namespace import Namespace

if __name__ == "__main__":
    ns = Namespace(sys.argv[1], env_prefix=sys.argv[1].upper())
    with spawn_with_plugins("barworker:bar", sys.argv[2], namespace=ns, ready_timeout=120,
                            join_timeout=120, prefix_output=sys.argv[3] == "prefix") as group:
        print("LAUNCHER DONE", group.results(), flush=True)
"""


@pytest.mark.parametrize("mode", ["plain", "prefix"])
def test_a_progress_bar_shows_while_the_rank_runs_not_only_when_it_ends(
    tmp_path: Path, mode: str
) -> None:
    """A line redrawn with ``\\r`` (tqdm) was held until its ``\\n``: nothing showed meanwhile."""
    import select
    import time

    (tmp_path / "barworker.py").write_text(_BAR_WORKER)
    (tmp_path / "launcher.py").write_text(_BAR_LAUNCHER)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    tag = f"skbar{os.getpid()}{mode[:2]}"
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "launcher.py"), tag, str(go), mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    seen, deadline = b"", time.monotonic() + 60
    try:
        # The rank waits for ``go`` with its bar unfinished: its first state must show now.
        while b"step 1/2" not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 0.5)[0]:
                chunk = os.read(proc.stderr.fileno(), 65536)
                if not chunk:
                    break
                seen += chunk
        shown_while_running = b"step 1/2" in seen
        go.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    seen += err
    assert shown_while_running, seen
    assert proc.returncode == 0 and b"LAUNCHER DONE [True]" in out, (out, seen)
    prefix = b"[rank0]: " if mode == "prefix" else b""
    # each state a redraw of the line, the last ended when the bar was done
    assert prefix + b" step 1/2\r" in seen and seen.endswith(prefix + b" step 2/2\n"), seen


def test_a_line_over_the_bound_is_cut_and_said_once(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from spawnkit.launch import _output

    monkeypatch.setattr(_output, "MAX_LINE", 8)
    stream = _output.LineStream(0, "stdout", b"[rank1]: ")
    out = stream.lines(b"0123456789abcdefXYZ") + stream.lines(b"0123456789\n")
    # held up to the bound while its newline is awaited; the rest came with its newline
    assert out == b"[rank1]: 01234567\n[rank1]: 89abcdef\n[rank1]: XYZ0123456789\n"
    err = capfd.readouterr().err
    assert err.count("spawnkit: a line of [rank1]: stdout is over") == 1, err


_BIG_WORKER = """
import json, sys

def report(payload=None):
    print(json.dumps({"latencies_s": [i / 7 for i in range(6000)]}))  # one line, ~110 KB
    sys.stdout.write("".join(f"step {i:05d} " + "x" * 60 + "\\n" for i in range(3000)))
    print("FINAL: eval accuracy 0.913", flush=True)
    return "done"
"""

_BIG_LAUNCHER = """
import sys
from spawnkit import spawn_with_plugins

if __name__ == "__main__":
    with spawn_with_plugins("bigworker:report", ready_timeout=120, join_timeout=120) as group:
        print("results", group.results(), file=sys.stderr, flush=True)
"""

_SLOW_READER = """
import sys, time
out = open(sys.argv[1], "wb")
while True:  # about 60 KB/s: slower than the rank writes, as a `| tee` to a slow disk
    chunk = sys.stdin.buffer.read(4096)
    if not chunk:
        break
    out.write(chunk)
    time.sleep(4096 / 60000)
out.close()
"""


def test_a_long_json_line_and_the_last_lines_reach_a_slow_stdout_whole(tmp_path: Path) -> None:
    """A JSON record of 110 KB arrived as two invalid lines (cut at 64 KiB, nothing said);
    behind a stdout slower than the rank, the launcher waited a flat 2 s for the relay, then
    exited: its last lines (``FINAL``) never arrived, rc 0, nothing said."""
    import json

    (tmp_path / "bigworker.py").write_text(_BIG_WORKER)
    (tmp_path / "launcher.py").write_text(_BIG_LAUNCHER)
    (tmp_path / "reader.py").write_text(_SLOW_READER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    got = tmp_path / "got.txt"
    launcher = subprocess.Popen(
        [sys.executable, str(tmp_path / "launcher.py")], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert launcher.stdout is not None
    reader = subprocess.Popen([sys.executable, str(tmp_path / "reader.py"), str(got)],
                              stdin=launcher.stdout)  # fmt: skip
    launcher.stdout.close()
    try:
        _, err = launcher.communicate(timeout=120)
        reader.wait(timeout=120)
    finally:
        for proc in (launcher, reader):
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    assert launcher.returncode == 0 and b"results ['done']" in err, err
    lines = got.read_text().splitlines()
    assert len(json.loads(lines[0])["latencies_s"]) == 6000
    assert len(lines) == 3002 and lines[-1] == "FINAL: eval accuracy 0.913"
    assert b"may be cut" not in err and b"is over" not in err


_MASKS = """
import json, os, threading
from spawnkit.launch import spawn_with_plugins


def status(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        return dict(line.rstrip("\\n").split(":\\t", 1) for line in f if ":\\t" in line)


if __name__ == "__main__":
    with spawn_with_plugins("time:sleep", 5, nprocs=1) as group:
        group.wait_ready(timeout=60)  # the rank runs: its pipes are being relayed
        main = threading.main_thread().native_id
        others = [int(t) for t in os.listdir("/proc/self/task") if int(t) != main]
        print(json.dumps({"main": int(status(main)["SigBlk"], 16),
                          "others": [int(status(t)["SigBlk"], 16) for t in others]}))
        group.terminate()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task")
def test_the_relay_thread_leaves_sigterm_and_ctrl_c_to_the_main_thread(tmp_path: Path) -> None:
    """A signal sent to the launcher goes to any thread that does not block it, and Python
    runs its handler only in the main thread: one delivered to the relay thread waited until
    the main thread's join() or results() wait ended by itself."""
    import json

    script = tmp_path / "masks.py"
    script.write_text(_MASKS, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    wanted = (1 << (2 - 1)) | (1 << (15 - 1))  # SIGINT, SIGTERM
    assert out["main"] & wanted == 0
    assert out["others"], "no relay thread ran"
    assert all(mask & wanted == wanted for mask in out["others"]), out
