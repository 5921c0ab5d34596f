"""Shared pieces of the launcher tests: launch modes, a fault-injecting distribution, checks.

Every test gets its own namespace (unique entry-point groups and variables)
and its own site directory of real distributions in ``tmp_path``; spawned
and forkserver children inherit ``sys.path``, so they find the same plugins.
Faults are chosen per launch through ``env=`` (applied in the child only), so
the parent never runs them: ``SKT_FAULT_STAGE`` names the stage,
``SKT_FAULT_KIND`` what goes wrong, ``SKT_FAULT_RANK`` which rank.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from spawnkit import _metadata
from spawnkit.launch._cleanup import _tagged
from spawnkit.namespace import Namespace
from spawnkit.protocol import warm as _warm_server
from spawnkit.testing import write_distribution

MODES = [
    pytest.param(("spawn", "multiprocessing"), id="spawn-mp"),
    pytest.param(("forkserver", "multiprocessing"), id="forkserver-mp"),
    pytest.param(("spawn", "multiprocess"), id="spawn-dill"),
    pytest.param(("forkserver", "multiprocess"), id="forkserver-dill"),
]

STAGES = [
    "initialize_platform",
    "load_plugins",
    "apply_hooks",
    "materialize_payload",
    "resolve_entry",
    "entry",
]
KINDS = ["raise", "exit", "oexit", "sigkill", "segv", "hang"]

_FAULT = """
import os, signal, sys, time

def fault(stage):
    if os.environ.get("SKT_FAULT_STAGE") != stage:
        return
    from spawnkit.bootstrap import current_spec
    spec = current_spec()
    if spec is not None and str(spec.rank) != os.environ.get("SKT_FAULT_RANK", "0"):
        return
    kind = os.environ["SKT_FAULT_KIND"]
    if kind == "raise":
        raise RuntimeError(f"injected fault in {stage}")
    if kind == "exit":
        sys.exit(3)
    if kind == "oexit":
        os._exit(9)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "segv":
        import ctypes
        ctypes.string_at(0)
    if kind == "hang":
        time.sleep(600)
"""

_PLATFORM = """
from spawnkit.platforms.interface import Platform, PlatformEnum
from {pkg} import fault

class FaultPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "faultdev"
    device_type = "faultdev"

    def init_backend(self):
        fault("initialize_platform")

def activate():
    return "{pkg}.platform.FaultPlatform"
"""

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace
from {pkg} import fault

def around(original, *args, **kwargs):
    return original(*args, **kwargs) + "+hooked"

def register():
    fault("load_plugins")
    get_namespace({ns!r}).hooks.register("{pkg}.target.func", around, HookType.AROUND)
"""

_TARGET = """
from {pkg} import fault
fault("apply_hooks")

def func():
    return "orig"
"""

_PAYLOAD = """
from {pkg} import fault

def rebuild(value):
    fault("materialize_payload")
    return Box(value)

class Box:
    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return (rebuild, (self.value,))
"""

_ENTRY = """
import os, sys, time
from {pkg} import fault
fault("resolve_entry")

def run(box=None):
    fault("entry")
    from {pkg}.target import func
    from spawnkit.bootstrap import current_spec
    spec = current_spec()
    return {{"rank": spec.rank, "world": spec.world_size, "value": getattr(box, "value", None),
            "hooked": func(), "pid": os.getpid(), "ppid": os.getppid()}}

def sleep_forever(box=None):
    time.sleep(600)

def quick(box=None):
    return os.getpid()

def scaled(payload):
    return payload["scale"](14), payload["log"].name

def exits_on_sigterm(box=None):  # as vLLM's engine core: SIGTERM -> SystemExit, exit code 0
    import signal

    def stop(signum, frame):
        raise SystemExit()

    signal.signal(signal.SIGTERM, stop)
    time.sleep(600)

def hang_at_exit(box=None):
    import atexit
    atexit.register(time.sleep, 600)  # an exit handler that does not end
    return os.getpid()

def unpicklable(box=None):
    return (x for x in range(3))  # neither pickle nor dill takes a generator
"""


class Site:
    """A namespace with a platform plugin and a general plugin from real distributions."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tag = f"lt{uuid.uuid4().hex[:10]}"
        self.ns = Namespace(self.tag, env_prefix=self.tag.upper())
        self.root = tmp_path / "site"
        self.root.mkdir()
        monkeypatch.syspath_prepend(str(self.root))
        self.pkg = f"{self.tag}_fault"
        fmt = {"pkg": self.pkg, "ns": self.tag}
        write_distribution(
            self.root,
            f"{self.tag}-fault",
            "1.0",
            entry_points={
                self.ns.config.platform_group: {"faultdev": f"{self.pkg}.platform:activate"},
                self.ns.config.plugin_group: {"faultplug": f"{self.pkg}.plugin:register"},
            },
            modules={
                f"{self.pkg}/__init__.py": _FAULT,
                f"{self.pkg}.platform": _PLATFORM.format(**fmt),
                f"{self.pkg}.plugin": _PLUGIN.format(**fmt),
                f"{self.pkg}.target": _TARGET.format(**fmt),
                f"{self.pkg}.payload": _PAYLOAD.format(**fmt),
                f"{self.pkg}.entry": _ENTRY.format(**fmt),
            },
        )
        _metadata.clear_cache()

    def entry(self, name: str = "run") -> str:
        return f"{self.pkg}.entry:{name}"

    def box(self, value: Any) -> Any:
        import importlib

        return importlib.import_module(f"{self.pkg}.payload").Box(value)


def fault_env(stage: str, kind: str, rank: int = 0) -> dict[str, str]:
    return {"SKT_FAULT_STAGE": stage, "SKT_FAULT_KIND": kind, "SKT_FAULT_RANK": str(rank)}


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_group_gone(group: Any, timeout: float = 3.0) -> None:
    """No worker of the group and no process carrying its run id is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in group.pids if not gone(pid)]
        left += [p.pid for p in _tagged(group.run_id) if p.pid != os.getpid()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes of group {group.run_id} still alive: {left}"


def mode_kwargs(request: pytest.FixtureRequest) -> dict[str, str]:
    """``start_method``/``context`` keyword arguments for a ``params=MODES`` fixture."""
    start_method, context = request.param
    return {"start_method": start_method, "context": context}


def make_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """Body of each test file's ``site`` fixture."""
    yield Site(tmp_path, monkeypatch)
    # A fork server is keyed by sys.path; this test's one is never reused.
    _warm_server.shutdown_forkservers()


__all__ = [
    "KINDS",
    "MODES",
    "STAGES",
    "Site",
    "assert_group_gone",
    "fault_env",
    "gone",
    "make_site",
    "mode_kwargs",
]
