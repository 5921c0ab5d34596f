"""The parent-death guardian is never the worker's child, and never left as a zombie.

User code in a worker that waits for *any* child must not find spawnkit's
guardian among them, and under a PID 1 that does not reap (a container's
shell, ``sleep`` as init) the guardian of a worker that exited must not stay
behind as a zombie: the launcher, its parent, reaps it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from spawnkit.launch import spawn_with_plugins
from spawnkit.namespace import Namespace

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="guardians: Linux")

_WORKER = """
import os

def waits_for_any_child(payload=None):
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return "no children"
    return f"a child is there (waitpid -> {pid}, {status})"
"""

_LAUNCHER = """
import json, os, sys
from spawnkit.launch import spawn_with_plugins
from spawnkit.namespace import Namespace

def zombies():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            if state == "Z" and int(ppid) == os.getpid():
                found.append(stat[: stat.rindex(")") + 1])
    return found

if __name__ == "__main__":
    ns = Namespace(sys.argv[1], env_prefix=sys.argv[1].upper())
    with spawn_with_plugins("gworker:waits_for_any_child", nprocs=2, namespace=ns,
                            ready_timeout=120, join_timeout=120) as group:
        results = group.results()
    from multiprocessing import resource_tracker
    # The stdlib's resource tracker (the launcher's child) exits after the launcher does:
    # an init that does not reap keeps it as a zombie too, but it is not spawnkit's.
    tracker = resource_tracker._resource_tracker._pid
    print(json.dumps({"results": results, "zombies_in_launcher": zombies(),
                      "tracker": tracker}), flush=True)
"""

_NON_REAPING_INIT = """
import ctypes, json, os, subprocess, sys, time
# PID 1 of a new PID namespace, or a subreaper where unshare is unavailable: orphans come
# here, and this process reaps only the launcher it started (like a shell or `sleep` as init).
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
proc = subprocess.run([sys.executable, *sys.argv[1:]], capture_output=True, text=True,
                      timeout=240)
time.sleep(1.0)  # a guardian left behind has exited by now
found = []
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if stat[stat.rindex(")") + 2:].split()[0] == "Z" and ppid == os.getpid():
            found.append(stat[: stat.rindex(")") + 1])
print(json.dumps({"code": proc.returncode, "out": proc.stdout, "err": proc.stderr[-3000:],
                  "pid": os.getpid(), "zombies_under_init": found}), flush=True)
"""


def _unshare_works() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        probe = subprocess.run(
            [exe, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def test_worker_waiting_for_any_child_does_not_find_the_guardian(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gworker.py").write_text(_WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    ns = Namespace(f"skg{uuid.uuid4().hex[:8]}", env_prefix=f"SKG{uuid.uuid4().hex[:8].upper()}")
    with spawn_with_plugins(
        "gworker:waits_for_any_child", nprocs=1, namespace=ns, ready_timeout=120,
        join_timeout=120,
    ) as group:
        assert group.results() == ["no children"]


@pytest.mark.parametrize("isolation", ["pid-namespace", "subreaper"])
def test_no_guardian_zombie_under_an_init_that_does_not_reap(
    tmp_path: Path, isolation: str
) -> None:
    (tmp_path / "gworker.py").write_text(_WORKER)
    (tmp_path / "launcher.py").write_text(_LAUNCHER)
    (tmp_path / "init.py").write_text(_NON_REAPING_INIT)
    cmd = [sys.executable, str(tmp_path / "init.py"), str(tmp_path / "launcher.py"),
           f"skz{uuid.uuid4().hex[:8]}"]
    if isolation == "pid-namespace":
        if not _unshare_works():
            pytest.skip("unshare --pid --fork --mount-proc is not available here")
        cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *cmd]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["code"] == 0, outcome["err"]
    if isolation == "pid-namespace":
        assert outcome["pid"] == 1
    launcher = json.loads(outcome["out"].strip().splitlines()[-1])
    assert launcher["results"] == ["no children", "no children"]
    assert launcher["zombies_in_launcher"] == []
    tracker = f"{launcher['tracker']} ("
    left = [z for z in outcome["zombies_under_init"] if not z.startswith(tracker)]
    assert left == [], textwrap.shorten(outcome["err"], 2000)
