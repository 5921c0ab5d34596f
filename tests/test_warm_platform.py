"""A warm worker's ``current_platform`` is the one its server built and initialised.

Every ``Once`` starts over in a forked child, the platform's too: a warm worker built a new
instance of its platform on first use, without what ``init_backend()`` (run once, in the
server) set on it (``self.ready``, a device count, a runtime handle), where a spawned
worker's instance has it; and an ``initialize_current_platform()`` in the entry ran
``init_backend()`` a second time.  Real launcher, a real platform plugin distribution,
spawned and warm workers.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import uuid
from pathlib import Path

from spawnkit.testing import write_distribution

_CHIP = """
import os
from spawnkit.platforms import Platform, PlatformEnum

INITS = []

class Chip(Platform):
    _enum = PlatformEnum.OOT
    device_name = "chip"
    device_type = "cpu"

    def init_backend(self):
        self.ready = os.getpid()
        INITS.append(os.getpid())

def activate():
    return "{tag}_chip.Chip"
"""

_LAUNCH = """
import sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def main():
    import os
    import spawnkit.platforms as platforms
    import {tag}_chip as chip
    platform = platforms.initialize_current_platform()  # the engine's own call: no second init
    return (os.getpid(), os.getppid(), getattr(platform, "ready", None), list(chip.INITS),
            platform is platforms.current_platform)

def forked(conn):
    conn.send(main())
    conn.close()

if __name__ == "__main__":
    out = {{}}
    for method in ("spawn", "forkserver"):
        with spawnkit.spawn_with_plugins(main, namespace=NS, start_method=method,
                                         ready_timeout=60) as group:
            out[method] = group.results(timeout=60)[0]
    spawnkit.bootstrap_here(NS)  # this process too: a fork child inherits its bootstrap
    ctx = spawnkit.get_context("fork", namespace=NS)
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=forked, args=(w,))
    p.start()
    w.close()
    out["fork"] = r.recv() if r.poll(60) else None
    p.join(60)
    print(out)
"""


def test_a_warm_worker_has_the_platform_its_server_initialised(tmp_path: Path) -> None:
    tag = f"wplat{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    write_distribution(
        site,
        f"{tag}-chip",
        "1.0",
        entry_points={f"{tag}.platforms": {"chip": f"{tag}_chip:activate"}},
        modules={f"{tag}_chip": _CHIP.format(tag=tag)},
    )
    script = tmp_path / "launch.py"
    script.write_text(_LAUNCH.format(site=str(site), tag=tag, prefix=tag.upper()))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    out = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    pid, _, ready, inits, same = out["spawn"]
    assert (ready, inits, same) == (pid, [pid], True)  # its own, initialised once
    pid, server, ready, inits, same = out["forkserver"]
    assert (ready, inits, same) == (server, [server], True)  # the server's, once, not again
    pid, parent, ready, inits, same = out["fork"]
    assert (ready, inits, same) == (parent, [parent], True)  # the bootstrapped parent's


_PLAIN_FORK = """
import sys
sys.path.insert(0, {site!r})
import multiprocessing as mp
import os
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def facts():
    import spawnkit.platforms as platforms
    import {tag}_chip as chip
    platform = platforms.initialize_current_platform()
    return (os.getpid(), os.getppid(), type(platform).__name__, getattr(platform, "ready", None),
            list(chip.INITS), " -> ".join(platforms.explain_platform().path))

def forked(conn):
    conn.send(facts())
    conn.close()

def fork_one(ctx):
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=forked, args=(w,))
    p.start()
    w.close()
    got = r.recv() if r.poll(60) else None
    p.join(60)
    return got

def main():
    facts()  # the worker's own platform, initialised
    return fork_one(mp.get_context("fork"))  # a DataLoader's or a Pool's worker

if __name__ == "__main__":
    out = {{}}
    with spawnkit.spawn_with_plugins(main, namespace=NS, start_method="spawn",
                                     ready_timeout=60) as group:
        out["plain"] = group.results(timeout=60)[0]
    os.environ[{var!r}] = "base"
    out["launcher"] = type(NS.platforms.current()).__name__  # this process's own: base
    os.environ[{var!r}] = "chip"  # a fork context decides afresh, as a launch does
    out["context"] = fork_one(spawnkit.get_context("fork", namespace=NS))
    print(out)
"""


def test_a_plain_fork_child_of_a_worker_keeps_its_platform(tmp_path: Path) -> None:
    """A worker's ``mp.get_context("fork")`` child (a DataLoader or Pool worker): the fork's
    reset made it build a new instance of the platform, without what ``init_backend()`` set,
    and run ``init_backend()`` a second time, though fork children inherit."""
    tag = f"wplat{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    write_distribution(
        site,
        f"{tag}-chip",
        "1.0",
        entry_points={f"{tag}.platforms": {"chip": f"{tag}_chip:activate"}},
        modules={f"{tag}_chip": _CHIP.format(tag=tag)},
    )
    script = tmp_path / "launch.py"
    var = f"{tag.upper()}_PLATFORM"
    script.write_text(_PLAIN_FORK.format(site=str(site), tag=tag, prefix=tag.upper(), var=var))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    out = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert out["plain"] is not None, done.stderr
    _, worker, cls, ready, inits, path = out["plain"]
    assert (cls, ready, inits) == ("Chip", worker, [worker])  # the worker's, initialised once
    assert "chip" in path, path
    # control: a fork context's child pinned to another platform than its launcher's own
    assert out["launcher"] == "Platform"
    pid, _, cls, ready, inits, _ = out["context"]
    assert (cls, ready, inits) == ("Chip", pid, [pid]), out["context"]
