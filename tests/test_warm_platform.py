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
