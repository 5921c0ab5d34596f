"""Registration and application from several threads at once; and what another thread's
running code holds of an original as the hooks are applied."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, MAIN, guard_stops_then_warns, write_app
from spawnkit.hooks import HookRegistry, HookType
from spawnkit.hooks._stale import BEGUN, RUNNING

TIMEOUT = 30.0

if TYPE_CHECKING:
    from _hooks_support import Modules


def _run(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "thread did not finish in time"


def test_concurrent_registrations_are_all_recorded(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    barrier = threading.Barrier(8, timeout=TIMEOUT)

    def worker(i: int) -> None:
        barrier.wait()
        for j in range(25):
            registry.register(mods.name("m.f"), lambda r, x, _k=i * 100 + j: r + 1)

    _run([threading.Thread(target=worker, args=(i,)) for i in range(8)])
    regs = registry.registrations()
    assert len(regs) == 200 and len({r.seq for r in regs}) == 200
    registry.apply_hooks()
    assert m.f(0) == 200


def test_two_threads_applying_at_once_apply_once(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    # A slow module import keeps the first apply busy while the second one arrives.
    mods.write("slow", "import time\ntime.sleep(0.3)\ndef f(x):\n    return x\n")
    registry.register(mods.name("slow.f"), lambda r, x: r + 1, HookType.AFTER)
    results: list[list[str]] = []
    barrier = threading.Barrier(2, timeout=TIMEOUT)

    def worker() -> None:
        barrier.wait()
        results.append(registry.apply_hooks())

    _run([threading.Thread(target=worker) for _ in range(2)])
    assert sorted(len(r) for r in results) == [0, 1]
    import importlib

    slow = importlib.import_module(mods.name("slow"))
    assert slow.f(1) == 2  # wrapped once: twice would give 3


def test_calls_during_reapply_see_a_complete_chain(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("m", "def f(x):\n    return x\n")
    registry.register(mods.name("m.f"), lambda r, x: r + 1)
    registry.apply_hooks()
    stop = threading.Event()
    bad: list[int] = []

    def caller() -> None:
        while not stop.is_set():
            value = m.f(0)
            if value < 1:
                bad.append(value)

    t = threading.Thread(target=caller)
    t.start()
    try:
        for _ in range(50):
            registry.register(mods.name("m.f"), lambda r, x: r + 1)
            registry.apply_hooks()
    finally:
        stop.set()
        t.join(TIMEOUT)
    assert not t.is_alive()
    assert bad == []
    assert m.f(0) == 51


# A module that, as it is imported, starts background work handed a hook target: a pool's
# task (its work item is held by the worker thread's running frames only) or a thread (held
# by its Thread object too); each calls it until told to stop (or a deadline).
_POLLING = """
import threading
import time
from concurrent.futures import ThreadPoolExecutor

OUT = []
STOP = threading.Event()
STARTED = threading.Event()

def collect():
    return "orig"

def _poll(fn):
    deadline = time.monotonic() + 60
    while not STOP.is_set():
        OUT.append(fn())
        STARTED.set()
        if time.monotonic() > deadline:
            break
        STOP.wait(0.01)

BACKGROUND
STARTED.wait(10)  # the task runs before the hooks are applied
"""

_BY_POOL = """_POOL = ThreadPoolExecutor(1, thread_name_prefix="metrics")
_POOL.submit(_poll, collect)
"""

_BY_THREAD = """_THREAD = threading.Thread(target=_poll, args=(collect,), name="poller")
_THREAD.daemon = True
_THREAD.start()
"""


@pytest.fixture
def stopped(mods: Modules) -> Iterator[list[str]]:
    """The short names of polling modules to stop (and join) at the test's end."""
    started: list[str] = []
    yield started
    for short in started:
        module = sys.modules.get(mods.name(short))
        if module is None:
            continue
        module.STOP.set()
        if hasattr(module, "_POOL"):
            module._POOL.shutdown(wait=True)
        for thread in getattr(module, "_THREADS", [getattr(module, "_THREAD", None)]):
            if thread is not None:
                thread.join(TIMEOUT)
                assert not thread.is_alive()


def test_a_pool_task_started_at_import_holding_the_original_is_named(
    mods: Modules, registry: type[HookRegistry], stopped: list[str]
) -> None:
    """The work item is held by the pool thread's frames only: no referrer gc knows of, and
    frames were never climbed (locals of running code end), so nothing was named."""
    name = mods.write("pooled", _POLLING.replace("BACKGROUND", _BY_POOL))
    stopped.append("pooled")
    registry.register(f"{name}.collect", lambda r: r + "+hook", HookType.AFTER)
    registry.apply_hooks()
    module = sys.modules[name]
    assert module.collect() == "orig+hook"
    module.OUT.clear()
    module.STARTED.clear()
    assert module.STARTED.wait(TIMEOUT)
    assert module.OUT[-1] == "orig"  # what is named: the task still calls the original
    (holder,) = registry.stale_holders()
    assert (holder["module"], holder["kind"]) == (name, RUNNING)
    assert holder["target"] == f"{name}.collect"
    where = re.escape(str(mods.root / mods.pkg / "pooled.py"))
    label = rf"_poll\(\) local fn, in thread 'metrics_0' at {where}:\d+"
    assert re.fullmatch(label, holder["name"]), holder["name"]
    assert [row.state for row in registry.status()] == ["partial"]


def test_a_thread_started_at_import_is_named_by_its_running_local_not_its_arguments(
    mods: Modules, registry: type[HookRegistry], stopped: list[str]
) -> None:
    """The started thread's ``_args`` (``_THREAD._args[0]``, ``threading._active[...]``)
    were spent as ``Thread.run`` called its target: the local that calls the original is
    what is named, once; the applying thread's own locals never are."""
    stopped.append("threaded")
    module = mods.load("threaded", _POLLING.replace("BACKGROUND", _BY_THREAD))
    original = module.collect  # a local of the applying thread: it ends
    registry.register(f"{module.__name__}.collect", lambda r: r + "+hook", HookType.AFTER)
    registry.apply_hooks()
    assert (original(), module.collect()) == ("orig", "orig+hook")
    (holder,) = registry.stale_holders()
    assert (holder["module"], holder["kind"]) == (module.__name__, RUNNING)
    where = re.escape(str(mods.root / mods.pkg / "threaded.py"))
    label = rf"_poll\(\) local fn, in thread 'poller' at {where}:\d+"
    assert re.fullmatch(label, holder["name"]), holder["name"]


# A module that, as it is imported, starts a call of a hook target that keeps running (an
# engine's serve loop) in a pool's thread (whose initializer ran first) or in a thread.
_SERVING = """
import threading
import time
from concurrent.futures import ThreadPoolExecutor

STOP = threading.Event()
IN = threading.Event()

def init_thread():
    threading.current_thread().ready = True

def serve():
    IN.set()
    deadline = time.monotonic() + 60
    while not STOP.wait(0.01) and time.monotonic() < deadline:
        pass

BACKGROUND
IN.wait(10)  # the call began before the hooks are applied
"""

_SERVE_BY_POOL = """_POOL = ThreadPoolExecutor(1, initializer=init_thread, thread_name_prefix="eng")
_POOL.submit(serve)
"""

_SERVE_BY_THREAD = """_THREAD = threading.Thread(target=serve, name="eng_0", daemon=True)
_THREAD.start()
"""


@pytest.mark.parametrize("background", [_SERVE_BY_POOL, _SERVE_BY_THREAD], ids=["pool", "thread"])
def test_a_call_in_progress_since_before_the_hooks_is_named_as_such(
    mods: Modules, registry: type[HookRegistry], stopped: list[str], background: str
) -> None:
    """The loop never calls the hook: named once, as the call it is (not as the pool's
    ``_WorkItem.run`` local ``self.fn``, which calls nothing more; a thread's target was
    rebound on its spent ``Thread`` and the call went unnamed, ``applied``)."""
    name = mods.write("serving", _SERVING.replace("BACKGROUND", background))
    stopped.append("serving")
    registry.register(f"{name}.serve", lambda orig: orig(), HookType.AROUND)
    registry.apply_hooks()
    (holder,) = registry.stale_holders()
    assert (holder["module"], holder["kind"], holder["target"]) == (name, BEGUN, f"{name}.serve")
    where = re.escape(str(mods.root / mods.pkg / "serving.py"))
    label = rf"serve\(\) call in progress in thread 'eng_0' at {where}:\d+"
    assert re.fullmatch(label, holder["name"]), holder["name"]
    assert [row.state for row in registry.status()] == ["partial"]


def test_a_pool_initializer_that_ran_is_named_as_a_call_not_a_thread_argument(
    mods: Modules, registry: type[HookRegistry], stopped: list[str]
) -> None:
    """The pool's idle thread ran the original initializer before the hooks: that is what
    is named, not ``threading._active[...]._args[2]`` (spent as the thread started) nor the
    worker's local ``initializer`` (past its call); the pool's own ``_initializer``, which
    a thread it starts later calls, is rebound."""
    background = _SERVE_BY_POOL.replace("_POOL.submit(serve)", "_POOL.submit(IN.set)")
    name = mods.write("initialized", _SERVING.replace("BACKGROUND", background))
    stopped.append("initialized")
    registry.register(f"{name}.init_thread", lambda r: r, HookType.AFTER)
    registry.apply_hooks()
    (holder,) = registry.stale_holders()
    assert (holder["module"], holder["kind"]) == (name, BEGUN)
    assert holder["name"] == "init_thread() run as the initializer of thread 'eng_0'"
    module = sys.modules[name]
    assert module._POOL._initializer is module.init_thread  # the hooked one
    assert [row.state for row in registry.status()] == ["partial"]


_WRAPPED = """
import functools
import threading
import time

STOP = threading.Event()
IN = threading.Barrier(3, timeout=10)

def traced(fn):
    @functools.wraps(fn)
    def wrapper():
        return fn()
    return wrapper

def _loop():
    IN.wait()
    deadline = time.monotonic() + 60
    while not STOP.wait(0.01) and time.monotonic() < deadline:
        pass

@traced
def serve():
    _loop()

@traced
def other():
    _loop()

_THREADS = [threading.Thread(target=f, name=f.__name__, daemon=True) for f in (serve, other)]
for _t in _THREADS:
    _t.start()
IN.wait()
"""


def test_a_call_in_progress_is_told_by_its_function_not_a_shared_wrapper_code(
    mods: Modules, registry: type[HookRegistry], stopped: list[str]
) -> None:
    """Both threads run the decorator's one ``wrapper`` code: only the hooked function's
    call (its closure's ``fn``) is named."""
    name = mods.write("wrapped", _WRAPPED)
    stopped.append("wrapped")
    registry.register(f"{name}.serve", lambda r: r, HookType.AFTER)
    registry.apply_hooks()
    (holder,) = registry.stale_holders()
    assert holder["kind"] == BEGUN
    label = r"(traced\.<locals>\.)?wrapper\(\) call in progress in thread 'serve' at \S+"
    assert re.fullmatch(label, holder["name"]), holder["name"]  # (3.10: no co_qualname)


_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace


def register():
    get_namespace({tag!r}).hooks.register(
        "{pkg}.metrics.collect", lambda r: r + "+hook", HookType.AFTER
    )
"""

_ENTRY = """
from {pkg} import metrics


def main():
    metrics.STARTED.clear()
    metrics.STARTED.wait(10)
    metrics.STOP.set()  # (the pool joins its thread as the interpreter ends)
    return metrics.collect(), metrics.OUT[-1]
"""


def test_a_worker_stops_naming_the_pool_task_or_warns(tmp_path: Path) -> None:
    """The worker's apply stage imports the module, which starts the task; the entry stops
    it (a stopped worker ends at once; the task's own deadline bounds it anyway)."""
    modules = {
        "metrics": _POLLING.replace("BACKGROUND", _BY_POOL),
        "entry": _ENTRY,
        "plugin": _PLUGIN,
    }
    app = write_app(tmp_path, "pooled", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    stopped, results, _ = guard_stops_then_warns(app, "spawn")
    holder = (
        rf"{app.pkg}\.metrics\._poll\(\) local fn, in thread 'metrics_0' at \S+metrics\.py:\d+ "
        rf"\({re.escape(RUNNING)}\) holds '{app.pkg}\.metrics\.collect'"
    )
    assert re.search(holder, stopped), stopped
    assert "start it after the hooks are applied" in stopped
    assert results == [("orig+hook", "orig")]  # the task still calls the original


_SERVE_ENTRY = """
from {pkg} import serving


def main():
    serving.STOP.set()  # (the pool joins its thread as the interpreter ends)
    return serving.IN.is_set()
"""


def test_a_worker_stops_naming_the_call_in_progress_or_warns(tmp_path: Path) -> None:
    """The worker's apply stage imports the module, which starts the serve loop in a pool's
    thread; the message says what it is (the call never runs the hook) and the fix."""
    plugin = _PLUGIN.replace("metrics.collect", "serving.serve").replace('r + "+hook"', "r")
    modules = {
        "serving": _SERVING.replace("BACKGROUND", _SERVE_BY_POOL),
        "entry": _SERVE_ENTRY,
        "plugin": plugin,
    }
    app = write_app(tmp_path, "serving", LAUNCH + MAIN, {"p": "plugin:register"}, modules)
    stopped, results, _ = guard_stops_then_warns(app, "spawn")
    assert "1 call of hooked original began in another thread before the hooks" in stopped
    holder = (
        rf"- {app.pkg}\.serving\.serve\(\) call in progress in thread 'eng_0' at "
        rf"\S+serving\.py:\d+ \({re.escape(BEGUN)}\), of '{app.pkg}\.serving\.serve'"
    )
    assert re.search(holder, stopped), stopped
    assert "local self.fn" not in stopped
    assert "start that thread or pool after the hooks are applied" in stopped
    assert results == [True]
