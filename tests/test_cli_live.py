"""The live per-rank stage display of ``spawnkit launch`` / ``demo``: on a real pseudo-terminal,
piped, and silent with ``--json -``."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SPAWNKIT = str(Path(sys.executable).with_name("spawnkit"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

ENTRY = """
def work(payload=None):
    return 7
"""

STUCK = """
import time
time.sleep(120)  # imported in stage resolve_entry: the rank never gets ready

def work(payload=None):
    return 7
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "live_entry.py").write_text(ENTRY)
    (tmp_path / "live_stuck.py").write_text(STUCK)
    return tmp_path


def _env(app: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(app), *sys.path]))
    env.update(COLUMNS="120", LINES="40", TERM="xterm-256color")
    for var in ("NO_COLOR", "CI", "TERM_PROGRAM"):
        env.pop(var, None)
    return env


def run_on_pty(argv: list[str], app: Path, timeout: float = 90.0) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal; everything it drew, in order."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv,
        cwd=app,
        env=_env(app),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def run_piped(argv: list[str], app: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=app,
        env=_env(app),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        start_new_session=True,
    )


def _rows(screen: str, rank: int) -> list[str]:
    """Every drawn row of ``rank`` in the workers table (the one with times), escapes removed."""
    text = ANSI.sub("", screen)
    return [
        line
        for line in text.splitlines()
        if re.match(rf"^│ {rank}\s+│", line) and " s │" in line
    ]


def test_tty_draws_one_live_row_per_rank(app: Path) -> None:
    code, screen = run_on_pty(
        [SPAWNKIT, "launch", "live_entry:work", "--nprocs", "2", "--app-dir", str(app)], app
    )
    assert code == 0, screen
    assert "\x1b[1A" in screen  # redrawn in place, not appended
    for rank in (0, 1):
        rows = _rows(screen, rank)
        assert len(rows) >= 2, screen  # several frames of the same row
        assert re.search(r"│ entry\s+│\s+│\s+[\d.]+ s │ ✔ done\s+│", rows[-1]), rows[-1]
    assert "rank 0: " not in ANSI.sub("", screen).replace("rank 0 returned", "")
    assert "rank 0 returned: 7" in screen


def test_tty_shows_the_stuck_stage_before_the_timeout_error(app: Path) -> None:
    code, screen = run_on_pty(
        [SPAWNKIT, "launch", "live_stuck:work", "--timeout", "3", "--app-dir", str(app)], app
    )
    assert code == 1, screen
    rows = _rows(screen, 0)
    live = [r for r in rows if "resolve_entry" in r and "…" in r]
    assert live, screen  # while it hung, the row said where, with time in that stage ticking
    assert re.search(r"│ resolve_entry\s+│\s+│\s+[\d.]+ s │ ✘ failed\s+│", rows[-1]), rows[-1]
    text = ANSI.sub("", screen)
    assert text.rindex("✘ failed") < text.index("BootstrapTimeoutError")
    assert "stuck in stage 'resolve_entry'" in text


def test_piped_output_is_one_plain_line_per_stage(app: Path) -> None:
    proc = run_piped(
        [SPAWNKIT, "launch", "live_entry:work", "--nprocs", "2", "--app-dir", str(app)], app
    )
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    assert not ANSI.search(out) and "✔" not in out
    for rank in (0, 1):
        stages = re.findall(rf"^rank {rank}: (\w+) \(at [\d.]+ s\)$", out, re.M)
        assert stages == [
            "process_start",
            "arm_parent_death",
            "initialize_platform",
            "load_plugins",
            "apply_hooks",
            "materialize_payload",
            "resolve_entry",
            "entry",
        ]
        assert re.search(rf"^rank {rank}: done after [\d.]+ s$", out, re.M)


def test_piped_stuck_rank_line_comes_before_the_error(app: Path) -> None:
    proc = run_piped(
        [SPAWNKIT, "launch", "live_stuck:work", "--timeout", "3", "--app-dir", str(app)], app
    )
    assert proc.returncode == 1
    out = proc.stdout
    entered = out.index("rank 0: resolve_entry (at ")
    failed = out.index("rank 0: FAILED in stage 'resolve_entry' after ")
    error = out.index("spawnkit: FAILED: BootstrapTimeoutError")
    assert entered < failed < error


def test_json_to_stdout_has_nothing_extra(app: Path) -> None:
    proc = subprocess.run(
        [SPAWNKIT, "launch", "live_entry:work", "--nprocs", "2", "--json", "--app-dir", str(app)],
        cwd=app,
        env=_env(app),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the whole of stdout is the JSON document
    assert data["ok"] is True and data["results"] == ["7", "7"]


def test_json_on_a_tty_draws_no_table(app: Path) -> None:
    code, screen = run_on_pty(
        [SPAWNKIT, "launch", "live_entry:work", "--json", "--app-dir", str(app)], app
    )
    assert code == 0, screen
    assert "workers" not in screen and "✔" not in screen
    assert json.loads(ANSI.sub("", screen).replace("\r\n", "\n"))["ok"] is True


@pytest.mark.needs_torch
def test_demo_shows_each_scheduler_rank(app: Path) -> None:
    proc = run_piped([SPAWNKIT, "demo", "--nprocs", "2", "--requests", "2"], app)
    assert proc.returncode == 0, proc.stdout
    for rank in (0, 1):
        assert re.search(rf"^rank {rank}: load_plugins \(at [\d.]+ s\)$", proc.stdout, re.M)
        assert re.search(rf"^rank {rank}: done after [\d.]+ s$", proc.stdout, re.M)


def test_tty_without_rich_prints_plain_lines(app: Path) -> None:
    # A trimmed install where rich does not import: the terminal gets the piped form.
    shadow = app / "norich"
    (shadow / "rich").mkdir(parents=True)
    (shadow / "rich" / "__init__.py").write_text("raise ImportError('rich removed')\n")
    code, screen = run_on_pty(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(shadow)!r}); "
            "from spawnkit.cli import main; sys.exit(main())",
            "launch",
            "live_entry:work",
            "--app-dir",
            str(app),
        ],
        app,
    )
    assert code == 0, screen
    text = screen.replace("\r\n", "\n")
    assert re.search(r"^rank 0: load_plugins \(at [\d.]+ s\)$", text, re.M), text
    assert re.search(r"^rank 0: done after [\d.]+ s$", text, re.M)
    assert "✔" not in text
