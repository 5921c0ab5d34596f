"""Ctrl-C with real signals: ``spawnkit launch`` and a script calling spawn_with_plugins.

Each test starts the launcher in its own session (so ``killpg`` is what a
terminal's Ctrl-C does: every process of the foreground group gets SIGINT),
waits until the workers say where they are, signals, and checks the exit
status, the output and that no worker is left.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import IO

import psutil
import pytest

SPAWNKIT = str(Path(sys.executable).with_name("spawnkit"))

ENTRY = """
import os, signal, time

def slow(payload=None):
    os.write(1, f"worker {os.getpid()} in entry\\n".encode())  # one write: lines stay whole
    time.sleep(120)

def stubborn(payload=None):
    # Survives SIGTERM and Ctrl-C: only SIGKILL ends it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.write(1, f"worker {os.getpid()} in entry\\n".encode())  # one write: lines stay whole
    time.sleep(120)
"""

SCRIPT = """
import sys
from spawnkit import spawn_with_plugins

if __name__ == "__main__":
    group = spawn_with_plugins(
        "{module}:{function}", nprocs=2, grace_period={grace}, ready_timeout=60
    )
    try:
        group.join(120)
    except KeyboardInterrupt:
        print("caught KeyboardInterrupt", group.stages, group.exit_codes, flush=True)
        sys.exit(130)
    print("not interrupted", flush=True)
"""

SCRIPT_TERMINATE = """
import sys, time
from spawnkit import spawn_with_plugins

if __name__ == "__main__":
    group = spawn_with_plugins("{module}:stubborn", nprocs=2, grace_period=60, ready_timeout=60)
    group.wait_ready(60)
    time.sleep(0.5)  # the entries print, then ignore SIGTERM
    print("terminating", flush=True)
    try:
        group.terminate()
    except KeyboardInterrupt:
        print("terminate raised KeyboardInterrupt", group.exit_codes, flush=True)
        sys.exit(130)
    print("terminate returned", flush=True)
"""


class Launched:
    """A launcher process in its own session, its output read by threads (bounded waits)."""

    def __init__(self, argv: list[str], cwd: Path, env_extra: dict[str, str] | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), *sys.path]))
        env.update(env_extra or {})
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for line in stream:
            into.append(line)
            self.lines.put(line)

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60.0) -> list[str]:
        found: list[str] = []
        deadline = time.monotonic() + timeout
        while len(found) < count:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {pattern!r} within {timeout} s; output: {''.join(self.out + self.err)}"
                ) from None
            if re.search(pattern, line):
                found.append(line)
        return found

    def finish(self, timeout: float = 30.0) -> tuple[int, str, str]:
        code = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(5)
        return code, "".join(self.out), "".join(self.err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def worker_pids(lines: list[str]) -> list[int]:
    return [int(line.split()[1]) for line in lines]


def assert_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and _not_zombie(p)]
        time.sleep(0.05)
    assert not alive, f"workers still alive: {alive}"


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


SLOW_START = """
import os, sys, time
# Only in a spawned worker (its command line is ``python -c <spawnkit's prologue>``): hold it
# in interpreter start-up, where a Ctrl-C used to end it with a KeyboardInterrupt traceback.
if "-c" in sys.orig_argv and any("spawnkit" in a for a in sys.orig_argv):
    os.write(1, f"starting {os.getpid()}\\n".encode())
    time.sleep(float(os.environ.get("INTR_SLOW_START", "0")))
"""


@pytest.fixture
def app(tmp_path: Path) -> tuple[Path, str]:
    module = f"intr_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(ENTRY)
    (tmp_path / "sitecustomize.py").write_text(SLOW_START)
    return tmp_path, module


def launch(app: tuple[Path, str], function: str, slow_start: float = 0.0) -> Launched:
    folder, module = app
    return Launched(
        [SPAWNKIT, "launch", f"{module}:{function}", "--nprocs", "2", "--app-dir", str(folder)],
        folder,
        {"INTR_SLOW_START": str(slow_start)},
    )


def test_launch_ctrl_c_in_entry_is_one_line_and_130(app: tuple[Path, str]) -> None:
    run = launch(app, "slow")
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    assert err.splitlines() == [
        "spawnkit launch: interrupted; 2 workers stopped (rank 0 in entry, rank 1 in entry)"
    ]
    assert "Traceback" not in out + err
    assert_gone(pids)


def test_launch_ctrl_c_while_workers_start_prints_no_traceback(app: tuple[Path, str]) -> None:
    run = launch(app, "slow", slow_start=30.0)
    try:
        # Both workers' interpreters are starting (in sitecustomize): before, each printed a
        # KeyboardInterrupt traceback from there.
        run.wait_for(r"^starting \d+", count=2)
        os.killpg(run.proc.pid, signal.SIGINT)
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    assert len(err.splitlines()) == 1, err
    (line,) = err.splitlines()
    assert re.fullmatch(
        r"spawnkit launch: interrupted; 2 workers stopped \(rank 0 in \w+, rank 1 in \w+\)", line
    ), line
    assert line.endswith("(rank 0 in process_start, rank 1 in process_start)"), line
    deadline = time.monotonic() + 5.0
    while True:  # every process of the session (workers, their resource tracker) ends
        left = [p for p in psutil.process_iter() if _in_group(p, run.proc.pid)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, [p.cmdline() for p in left]


def _in_group(proc: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE
    except (OSError, psutil.Error):
        return False


def test_launch_second_ctrl_c_kills_stubborn_workers(app: tuple[Path, str]) -> None:
    run = launch(app, "stubborn")
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.5)  # teardown is now waiting out the SIGTERM grace period
        run.proc.send_signal(signal.SIGINT)
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    assert err.splitlines() == [
        "spawnkit launch: interrupted; 2 workers stopped (rank 0 in entry, rank 1 in entry)"
    ]
    assert "Traceback" not in out + err
    assert_gone(pids)


def _script(app: tuple[Path, str], function: str, grace: float) -> Launched:
    folder, module = app
    path = folder / f"launch_{function}.py"
    path.write_text(textwrap.dedent(SCRIPT).format(module=module, function=function, grace=grace))
    return Launched([sys.executable, str(path)], folder)


def test_script_ctrl_c_is_reraised_after_teardown(app: tuple[Path, str]) -> None:
    run = _script(app, "slow", grace=3.0)
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        run.proc.send_signal(signal.SIGINT)  # the launching process only
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 130, err
    # join() stopped the group before re-raising: exit codes are known, nothing runs.
    assert "caught KeyboardInterrupt ['entry', 'entry'] [-15, -15]" in out, out
    assert "Traceback" not in err
    assert_gone(pids)


def test_script_second_ctrl_c_escalates_to_sigkill(app: tuple[Path, str]) -> None:
    # Workers ignore SIGTERM and the grace period is a minute: only the escalation ends them.
    run = _script(app, "stubborn", grace=60.0)
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        run.proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert run.proc.poll() is None and all(_not_zombie(p) for p in pids)
        run.proc.send_signal(signal.SIGINT)
        code, out, err = run.finish(timeout=20)
    finally:
        run.kill()
    assert code == 130, err
    assert "caught KeyboardInterrupt ['entry', 'entry'] [-9, -9]" in out, out
    assert "Traceback" not in err
    assert_gone(pids)


def test_ctrl_c_during_a_plain_terminate_kills_then_raises(app: tuple[Path, str]) -> None:
    folder, module = app
    path = folder / "terminate_stubborn.py"
    path.write_text(textwrap.dedent(SCRIPT_TERMINATE).format(module=module))
    run = Launched([sys.executable, str(path)], folder)
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        run.wait_for(r"^terminating")
        time.sleep(1.0)  # terminate() is waiting out the minute of grace after SIGTERM
        run.proc.send_signal(signal.SIGINT)
        code, out, err = run.finish(timeout=20)
    finally:
        run.kill()
    # The Ctrl-C is not swallowed: SIGKILL at once, then KeyboardInterrupt from terminate().
    assert code == 130, out + err
    assert "terminate raised KeyboardInterrupt [-9, -9]" in out, out
    assert_gone(pids)


@pytest.mark.timeout(20)  # without the fix the next read waits on a garbled length: a hang
def test_a_ctrl_c_while_a_report_message_is_half_read_loses_no_message() -> None:
    """The race behind "rank 1 in materialize_payload" of a rank already in its entry.

    A real pipe, a message larger than the pipe's buffer, and a real SIGINT to the main
    thread while it is blocked half-way through that message: the interrupt is raised once
    the message is whole, and that message and the next are still read, in order.
    """
    import struct
    from multiprocessing import Pipe
    from multiprocessing.reduction import ForkingPickler

    from spawnkit.launch._rank import Rank
    from spawnkit.launch.group import _messages
    from spawnkit.protocol import messages as proto

    reader, writer = Pipe(duplex=False)
    big = bytes(ForkingPickler.dumps(proto.StageStarted("x" * 300_000)))
    frame = struct.pack("!i", len(big)) + big
    os.write(writer.fileno(), frame[:30_000])  # the header and a little: readable, not whole
    rank = Rank(rank=1, proc=None, report=reader, death=None, fault=None, pid=0, started=0.0)
    main = threading.main_thread().ident
    assert main is not None

    def rest() -> None:
        time.sleep(0.3)  # the reader is blocked inside the message by now
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.3)
        os.write(writer.fileno(), frame[30_000:])
        writer.send(proto.StageStarted("after"))

    thread = threading.Thread(target=rest, daemon=True)
    thread.start()
    taken: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        for msg in _messages(rank):
            taken.append(msg.stage)
    thread.join(10)
    time.sleep(0.1)
    taken += [msg.stage for msg in _messages(rank)]
    assert [len(s) for s in taken] == [300_000, 5] and taken[1] == "after"
    assert rank.report_open
    reader.close()
    writer.close()


WINDOW_SCRIPT = """
import os, signal, subprocess, sys, threading, time
sys.path.insert(0, {folder!r})
from spawnkit import spawn_with_plugins
from spawnkit.launch import launcher

start_rank = launcher._start_rank

def start_and_interrupt(lctx, template, rank, *args, **kwargs):
    started = start_rank(lctx, template, rank, *args, **kwargs)
    if rank == {rank}:  # still inside the window where SIGINT is held back from the ranks
        # From another process, as a terminal's Ctrl-C: the kernel then hands it to any
        # thread not blocking it (one this process sends itself stays with this thread).
        kill = f"import os, signal; os.kill({{os.getpid()}}, signal.SIGINT)"
        subprocess.run([sys.executable, "-c", kill], check=True, timeout=30)
        time.sleep(0.3)  # delivered (or dropped) while the window lasts
    return started

launcher._start_rank = start_and_interrupt
if __name__ == "__main__":
    if {thread!r}:  # a thread of the application's own, SIGINT not blocked (a live display's)
        threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
    try:
        group = spawn_with_plugins("{module}:slow", nprocs=2, ready_timeout=60)
        group.join(10)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    print("the Ctrl-C was lost", flush=True)
"""


@pytest.mark.parametrize(("rank", "thread"), [(0, False), (1, False), (1, True)])
def test_a_ctrl_c_while_ranks_start_is_never_lost(
    app: tuple[Path, str], rank: int, thread: bool
) -> None:
    """Three ways a Ctrl-C pressed while a rank started vanished, the group running on: SIGINT
    was ignored meanwhile, and starting multiprocessing's resource tracker (first rank)
    unblocked it; the output relay thread (later ranks), or any thread of the application,
    took the signal and the kernel dropped it."""
    folder, module = app
    script = folder / "window.py"
    text = WINDOW_SCRIPT.format(folder=str(folder), module=module, rank=rank, thread=thread)
    script.write_text(text)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=folder,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), *sys.path])),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert (proc.returncode, out.splitlines()[-1:]) == (130, ["interrupted"]), out + err
    started = [int(line.split()[1]) for line in out.splitlines() if line.startswith("starting")]
    assert started
    assert_gone(started)  # the group was torn down


GRACEFUL = """
import atexit, os, signal, sys, time

def checkpointing(payload=None):  # what a training rank does on SIGTERM
    out = os.environ["INTR_OUT"]

    def note(what):
        with open(os.path.join(out, f"{os.getpid()}-{what}"), "w"):
            pass

    def on_term(signum, frame):
        note("handler")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    atexit.register(note, "atexit")
    try:  # said inside: a SIGTERM sent once it is read lands in the try (a loaded machine
        os.write(1, f"worker {os.getpid()} in entry\\n".encode())  # ran it between the two)
        time.sleep(120)
    finally:
        note("finally")
"""

SCRIPT_OWN_TERM = """
import os, signal, sys
from spawnkit import spawn_with_plugins

if __name__ == "__main__":
    if os.environ.get("INTR_OWN_HANDLER"):
        signal.signal(signal.SIGTERM, lambda s, f: print("launcher's own handler", flush=True))
    group = spawn_with_plugins("{module}:checkpointing", nprocs=2, grace_period=10)
    group.join(120 if not os.environ.get("INTR_OWN_HANDLER") else 3)
    group.terminate()
    print("launcher ended its own way", flush=True)
"""


@pytest.mark.parametrize("how", ["launch", "script"])
def test_sigterm_to_the_launcher_lets_each_rank_end_its_own_way(
    app: tuple[Path, str], tmp_path: Path, how: str
) -> None:
    """``docker stop`` / ``kubectl delete pod`` / SLURM send SIGTERM: the launcher died at once
    and each worker, its launcher gone, ended with ``os._exit``: no rank ran its SIGTERM
    handler (a checkpoint), its ``finally`` or its exit callbacks, and nothing was said.
    Now it is the teardown a Ctrl-C gives (TERM, grace, KILL), and the launcher exits 143."""
    folder, module = app
    (folder / f"{module}.py").write_text(ENTRY + GRACEFUL)
    out = tmp_path / "notes"
    out.mkdir()
    if how == "launch":
        argv = [SPAWNKIT, "launch", f"{module}:checkpointing", "--nprocs", "2",
                "--app-dir", str(folder)]  # fmt: skip
    else:
        (folder / "run.py").write_text(SCRIPT_OWN_TERM.format(module=module))
        argv = [sys.executable, str(folder / "run.py")]
    run = Launched(argv, folder, {"INTR_OUT": str(out)})
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        os.kill(run.proc.pid, signal.SIGTERM)  # the launcher only, as a supervisor sends it
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 143, err
    assert "spawnkit: SIGTERM: stopping the worker group" in err
    notes = sorted(p.name.split("-", 1)[1] for p in out.iterdir())
    assert notes == ["atexit", "atexit", "finally", "finally", "handler", "handler"], notes
    assert_gone(pids)


SCRIPT_FINALIZER = """
import os, time
from spawnkit import spawn_with_plugins


class Slow:
    def __del__(self):  # what a finalizer does while SIGTERM arrives: Python code
        os.write(1, b"launcher in a finalizer\\n")  # one write: the relayed lines stay whole
        time.sleep(60)


if __name__ == "__main__":
    group = spawn_with_plugins("{module}:checkpointing", nprocs=2, grace_period=10)
    group.wait_ready(60)
    Slow()  # dropped at once: its __del__ runs here, on the main thread
    group.join(120)
    print("launcher ended its own way", flush=True)
"""


def test_a_sigterm_that_lands_in_a_finalizer_still_stops_the_group(
    app: tuple[Path, str], tmp_path: Path
) -> None:
    """Python runs a signal's handler wherever the main thread is, a ``__del__`` included
    (``spawnkit launch`` drops each started rank's pipe ends: multiprocessing's
    ``Connection.__del__``), and swallows what a finalizer raises: the ``Terminated`` never
    reached the teardown, the launcher waited on in ``join()``, and a later SIGTERM was
    ignored as already handled (CI 3.13: the launcher outlived its SIGTERM by 30 s)."""
    folder, module = app
    (folder / f"{module}.py").write_text(ENTRY + GRACEFUL)
    (folder / "run.py").write_text(SCRIPT_FINALIZER.format(module=module))
    out = tmp_path / "notes"
    out.mkdir()
    run = Launched([sys.executable, str(folder / "run.py")], folder, {"INTR_OUT": str(out)})
    try:
        lines = run.wait_for(r"^(worker \d+ in entry|launcher in a finalizer)", count=3)
        os.kill(run.proc.pid, signal.SIGTERM)  # while the launcher runs Slow.__del__
        code, stdout, err = run.finish()
    finally:
        run.kill()
    assert code == 143, err
    assert "launcher ended its own way" not in stdout
    assert err.count("spawnkit: SIGTERM: stopping the worker group") == 1, err
    notes = sorted(p.name.split("-", 1)[1] for p in out.iterdir())
    assert notes == ["atexit", "atexit", "finally", "finally", "handler", "handler"], notes
    assert_gone(worker_pids([line for line in lines if line.startswith("worker")]))


SCRIPT_TWO_GROUPS = """
from spawnkit import spawn_with_plugins

if __name__ == "__main__":
    try:
        with spawn_with_plugins("{module}:slow", nprocs=1, grace_period=10) as group:
            group.join(120)
    except SystemExit as exc:  # a supervisor loop, or IPython, carries on after it
        print(f"first group stopped ({{exc.code}}); starting another", flush=True)
    with spawn_with_plugins("{module}:slow", nprocs=1, grace_period=10) as group:
        group.join(120)
    print("the second group ran on", flush=True)
"""


def test_a_launcher_that_caught_a_sigterm_still_hears_the_next_groups(
    app: tuple[Path, str],
) -> None:
    """The first SIGTERM marked itself handled for good: a launcher that caught the
    ``Terminated`` once its group was torn down (a supervisor loop, a notebook cell) and
    started another group had every later SIGTERM ignored, the new group running on."""
    folder, module = app
    (folder / "run.py").write_text(SCRIPT_TWO_GROUPS.format(module=module))
    run = Launched([sys.executable, str(folder / "run.py")], folder)
    try:
        first = worker_pids(run.wait_for(r"^worker \d+ in entry"))
        os.kill(run.proc.pid, signal.SIGTERM)
        run.wait_for(r"^first group stopped \(143\); starting another")
        second = worker_pids(run.wait_for(r"^worker \d+ in entry"))
        os.kill(run.proc.pid, signal.SIGTERM)
        code, stdout, err = run.finish()
    finally:
        run.kill()
    assert code == 143, err
    assert "the second group ran on" not in stdout
    assert_gone(first + second)


def test_a_launchers_own_sigterm_handler_is_left_alone(
    app: tuple[Path, str], tmp_path: Path
) -> None:
    folder, module = app
    (folder / f"{module}.py").write_text(ENTRY + GRACEFUL)
    (folder / "run.py").write_text(SCRIPT_OWN_TERM.format(module=module))
    out = tmp_path / "notes"
    out.mkdir()
    run = Launched([sys.executable, str(folder / "run.py")], folder,
                   {"INTR_OUT": str(out), "INTR_OWN_HANDLER": "1"})  # fmt: skip
    try:
        pids = worker_pids(run.wait_for(r"^worker \d+ in entry", count=2))
        os.kill(run.proc.pid, signal.SIGTERM)
        code, stdout, err = run.finish()
    finally:
        run.kill()
    assert code == 0, err
    assert "launcher's own handler" in stdout and "launcher ended its own way" in stdout
    assert "spawnkit: SIGTERM" not in err
    assert_gone(pids)
