"""A method hooked on a base and, as inherited, on a subclass: the subclass's chain calls the
base's attribute as it is at call time, so the base's hooks run for the subclass too, whichever
name sorts first in one apply and whichever is applied later."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

SCHED = """
class Scheduler:
    def step(self):
        return 'step'

    @classmethod
    def make(cls):
        return cls.__name__

    @staticmethod
    def limit(n):
        return n

class GpuScheduler(Scheduler):
    pass

class LocalGpuScheduler(GpuScheduler):
    pass
"""


def _tagging(ran: list[str], tag: str):  # type: ignore[no-untyped-def]
    def hook(orig, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(tag)
        return orig(*args, **kwargs)

    return hook


def test_base_hook_runs_for_a_subclass_hooked_in_the_same_apply(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    # 'GpuScheduler' sorts before 'Scheduler': its chain was built first, on the raw function
    m = mods.load("sched", SCHED)
    ran: list[str] = []
    for attr in ("step", "make", "limit"):
        registry.register(mods.name(f"sched.Scheduler.{attr}"), _tagging(ran, "base"),
                          HookType.AROUND)  # fmt: skip
        registry.register(mods.name(f"sched.GpuScheduler.{attr}"), _tagging(ran, "gpu"),
                          HookType.AROUND)  # fmt: skip
    registry.apply_hooks()
    for call, want in [
        (lambda: m.GpuScheduler().step(), "step"),
        (lambda: m.GpuScheduler.make(), "GpuScheduler"),
        (lambda: m.LocalGpuScheduler.make(), "LocalGpuScheduler"),
        (lambda: m.GpuScheduler().limit(3), 3),
        (lambda: m.LocalGpuScheduler().step(), "step"),
    ]:
        ran.clear()
        assert call() == want
        assert ran == ["gpu", "base"]
    ran.clear()
    assert m.Scheduler().step() == "step" and ran == ["base"]
    assert registry.bypassing() == {}


def test_base_hooked_later_and_rebuilt_reaches_the_subclass(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load("sched", SCHED)
    raw = m.Scheduler.__dict__["step"]
    ran: list[str] = []
    registry.register(mods.name("sched.GpuScheduler.step"), _tagging(ran, "gpu"), HookType.AROUND)
    registry.apply_hooks()
    registry.register(mods.name("sched.Scheduler.step"), _tagging(ran, "base"), HookType.AROUND)
    registry.apply_hooks()
    m.GpuScheduler().step()
    assert ran == ["gpu", "base"]
    registry.register(mods.name("sched.Scheduler.step"), lambda result, self: ran.append("base2"),
                      HookType.AFTER)  # fmt: skip
    registry.apply_hooks()
    ran.clear()
    m.GpuScheduler().step()
    assert ran == ["gpu", "base", "base2"]  # the base's rebuilt chain, from the subclass
    assert [r.state for r in registry.status()] == ["applied"] * 3
    registry.unapply()
    assert m.Scheduler.__dict__["step"] is raw and "step" not in vars(m.GpuScheduler)
    ran.clear()
    assert m.GpuScheduler().step() == "step" and ran == []


def test_a_class_own_method_still_calls_its_original_directly(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """Control: only an inherited target looks the base up at call time."""
    m = mods.load("sched", SCHED)
    raw = m.Scheduler.__dict__["step"]
    registry.register(mods.name("sched.Scheduler.step"), lambda orig, self: orig(self) + "!",
                      HookType.AROUND)  # fmt: skip
    registry.apply_hooks()
    chain = m.Scheduler.__dict__["step"]
    cells = [c.cell_contents for c in chain.__closure__ or ()]
    inner = [getattr(c, "args", ()) for c in cells]
    assert any(raw in args for args in inner)  # partial(hook, original): no lookup per call
    assert m.Scheduler().step() == "step!"
