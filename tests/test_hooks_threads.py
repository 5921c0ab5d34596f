"""Registration and application from several threads at once."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from spawnkit.hooks import HookRegistry, HookType

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
