"""``apply_hooks()`` resolves the targets of one module together: one import, every target named."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError, HookTargetError
from spawnkit.hooks import HookRegistry, HookSource, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

ACME = HookSource("acme", "acme-plugin", "2.0")
OTHER = HookSource("other", "other-plugin", "1.0")


def test_a_module_that_fails_to_import_runs_once_and_every_target_in_it_is_named(
    mods: Modules, registry: type[HookRegistry], tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    mods.write(
        "broken",
        f"""
        with open({str(runs)!r}, "a") as log:
            log.write("ran\\n")
        raise RuntimeError("engine init failed")
        def f():
            pass
        class K:
            def m(self):
                pass
        """,
    )
    good = mods.load("good", "def g():\n    return 1\n")
    registry.register(mods.name("broken.f"), lambda r: r, source=ACME)
    registry.register(mods.name("broken.K.m"), lambda r, s: r, source=OTHER)
    registry.register(f"{mods.name('broken')}:K.m", lambda r, s: r, source=ACME)
    registry.register(mods.name("good.g"), lambda r: r + 1, source=ACME)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    assert runs.read_text() == "ran\n", "the failing module was executed once per target"
    failures = info.value.failures
    # every target of the module, each with its own plugins, in target order; not the good one
    assert list(failures) == [mods.name("broken.K.m"), mods.name("broken.f")]
    assert failures[mods.name("broken.f")][0] == [str(ACME)]
    assert failures[mods.name("broken.K.m")][0] == sorted([str(ACME), str(OTHER)])
    for _, text in failures.values():
        assert "engine init failed" in text and mods.name("broken") in text
    assert isinstance(info.value.__cause__, HookTargetError)
    assert isinstance(info.value.__cause__.__cause__, RuntimeError)
    assert good.g() == 1  # strict: the good target of the same call was rolled back


def test_one_bad_target_among_its_module_siblings_fails_alone_and_order_is_kept(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load(
        "eng",
        """
        def a():
            return 1
        def c():
            return 3
        class K:
            def m(self):
                return 10
        """,
    )
    names = ["eng.c", "eng.K.m", "eng.nothere", "eng.a"]
    for short in names:
        registry.register(mods.name(short), lambda r, *args: r + 1, source=ACME)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    assert list(info.value.failures) == [mods.name("eng.nothere")]
    assert "has no attribute 'nothere'" in info.value.failures[mods.name("eng.nothere")][1]
    assert (m.a(), m.c(), m.K().m()) == (1, 3, 10)  # rolled back: nothing half-patched
    patched = registry.apply_hooks(strict=False)
    # the module's targets are applied together, in target order (not registration order)
    assert patched == [mods.name(s) for s in ("eng.K.m", "eng.a", "eng.c")]
    assert (m.a(), m.c(), m.K().m()) == (2, 4, 11)


def test_a_class_replace_is_seen_by_the_method_targets_resolved_after_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    m = mods.load(
        "eng",
        """
        def f():
            return 1
        class K:
            def m(self):
                return 10
        """,
    )

    class Sub(m.K):  # type: ignore[misc, name-defined]
        def m(self) -> int:
            return 20

    registry.register(mods.name("eng.f"), lambda r: r + 1, source=ACME)
    registry.register(mods.name("eng.K.m"), lambda r, s: r + 1, source=ACME)
    registry.register(mods.name("eng.K"), Sub, HookType.REPLACE, source=OTHER)
    registry.apply_hooks()
    assert m.K is Sub and m.K().m() == 21 and m.f() == 2
    assert "m" in vars(Sub)
