"""Bad input fails with a specific error naming target and source; apply is atomic."""

from __future__ import annotations

import logging
import pickle
import sys
from typing import TYPE_CHECKING

import pytest

from spawnkit.errors import HookApplyError, HookRegistrationError, HookTargetError
from spawnkit.hooks import HookRegistry, HookSource, HookType

SRC = HookSource("acme", "acme-plugin", "2.0")

if TYPE_CHECKING:
    from _hooks_support import Modules


def test_class_hook_with_non_replace_type(mods: Modules, registry: type[HookRegistry]) -> None:
    mods.load("m", "def f():\n    pass\n")

    class Hook:
        pass

    with pytest.raises(TypeError, match="only be a REPLACE hook") as info:
        registry.register(mods.name("m.f"), Hook, HookType.AROUND, source=SRC)
    assert isinstance(info.value, HookRegistrationError)
    assert "acme-plugin 2.0" in str(info.value) and mods.name("m.f") in str(info.value)
    assert registry.registrations() == []


def test_unknown_type_and_not_callable(registry: type[HookRegistry]) -> None:
    with pytest.raises(HookRegistrationError, match="unknown hook type 'sideways'"):
        registry.register("a.b", lambda: None, "sideways", source=SRC)  # type: ignore[arg-type]
    with pytest.raises(HookRegistrationError, match="not a callable") as info:
        registry.register("a.b", 42, HookType.AFTER, source=SRC)  # type: ignore[arg-type]
    assert "'acme'" in str(info.value)
    with pytest.raises(HookRegistrationError, match="module:qualname"):
        registry.register("a.b", "no_colon_here", HookType.AFTER)
    with pytest.raises(HookRegistrationError, match="must be a string"):
        registry.register(None, lambda: None)  # type: ignore[arg-type]
    with pytest.raises(HookTargetError, match="names no attribute"):
        registry.register("justmodule", lambda: None)
    with pytest.raises(HookTargetError, match="not a Python identifier"):
        registry.register("a.1b", lambda: None)
    registry.register("a.b", lambda r: r, "around")  # names are accepted case-insensitively
    assert registry.registrations()[0].hook_type is HookType.AROUND


def test_class_target_with_non_replace_hook(mods: Modules, registry: type[HookRegistry]) -> None:
    m = mods.load("m", "class C:\n    pass\n")
    registry.register(mods.name("m.C"), lambda r: r, HookType.AFTER, source=SRC)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert "is a class" in text and "HookRegistrationError" in text and "acme-plugin" in text
    assert isinstance(info.value.__cause__, TypeError)
    assert m.C.__name__ == "C"


def test_missing_module_and_attribute_say_what_was_missing(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("m", "class C:\n    pass\n")
    registry.register(f"{mods.pkg}.nomod.f", lambda r: r, source=SRC)
    registry.register(mods.name("m.Missing.method"), lambda r: r, source=SRC)
    registry.register(mods.name("m.C.nothere"), lambda r: r, source=SRC)
    registry.register("definitely_not_a_module_xyz.f", lambda r: r, source=SRC)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    failures = info.value.failures
    assert set(failures) == {
        f"{mods.pkg}.nomod.f",
        mods.name("m.Missing.method"),
        mods.name("m.C.nothere"),
        "definitely_not_a_module_xyz.f",
    }
    assert "has no attribute 'nomod'" in failures[f"{mods.pkg}.nomod.f"][1]
    assert "has no attribute 'Missing'" in failures[mods.name("m.Missing.method")][1]
    assert "class " in failures[mods.name("m.C.nothere")][1]
    assert (
        "no module named 'definitely_not_a_module_xyz'"
        in (failures["definitely_not_a_module_xyz.f"][1])
    )
    assert all(sources == [str(SRC)] for sources, _ in failures.values())
    # the error itself is specific and carries the missing part
    registry.reset()
    registry.register(mods.name("m.C.nothere"), lambda r: r)
    with pytest.raises(HookApplyError) as info2:
        registry.apply_hooks()
    cause = info2.value.__cause__
    assert isinstance(cause, HookTargetError) and cause.missing == mods.name("m.C.nothere")


def test_module_that_fails_to_import_is_reported_not_skipped(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("broken", "import not_installed_dependency_xyz\ndef f():\n    pass\n")
    mods.write("raising", "raise RuntimeError('module init failed')\n")
    registry.register(mods.name("broken.f"), lambda r: r)
    registry.register(mods.name("raising.f"), lambda r: r)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    f = info.value.failures
    assert "not_installed_dependency_xyz" in f[mods.name("broken.f")][1]
    assert "module init failed" in f[mods.name("raising.f")][1]


def test_strict_apply_rolls_back_everything(mods: Modules, registry: type[HookRegistry]) -> None:
    lib = mods.load(
        "lib", "def good(x):\n    return x\nclass K:\n    def m(self):\n        return 1\n"
    )
    user = mods.load("user", "from PKG.lib import good\n")
    original_good, original_m = lib.good, vars(lib.K)["m"]
    registry.register(mods.name("lib.good"), lambda r, x: r + 1, source=HookSource("ok"))
    registry.register(mods.name("lib.K.m"), lambda r, s: r + 1, source=HookSource("ok"))
    registry.register(mods.name("lib.nothere"), lambda r: r, source=SRC)
    registry.register(mods.name("lib.K.m2"), lambda r: r, source=HookSource("other", "o-dist"))
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    assert lib.good is original_good and user.good is original_good
    assert vars(lib.K)["m"] is original_m
    assert registry.applied_targets() == []
    text = str(info.value)
    assert "2 target(s)" in text and "rolled back" in text
    assert "'acme' (acme-plugin 2.0)" in text and "'other' (o-dist)" in text
    # the error survives a process boundary with its fields
    again = pickle.loads(pickle.dumps(info.value))
    assert again.failures == info.value.failures and str(again) == text


def test_strict_failure_on_reapply_keeps_previous_chains(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")
    registry.register(mods.name("lib.f"), lambda r, x: r + 1)
    registry.apply_hooks()
    first = lib.f
    registry.register(mods.name("lib.f"), lambda r, x: r * 2)
    registry.register(mods.name("lib.gone"), lambda r: r)
    with pytest.raises(HookApplyError):
        registry.apply_hooks()
    assert lib.f is first and lib.f(1) == 2
    assert registry.applied_targets()[0].target == mods.name("lib.f")
    assert len(registry.applied_targets()[0].hooks) == 1


def test_non_strict_logs_each_failure_and_applies_the_rest(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")
    registry.register(mods.name("lib.f"), lambda r, x: r + 1)
    registry.register(mods.name("lib.nope"), lambda r: r, source=SRC)
    registry.register(mods.name("lib.f2"), f"{mods.pkg}.nohooks:h", source=SRC)
    with caplog.at_level(logging.ERROR, logger="spawnkit.hooks"):
        assert registry.apply_hooks(strict=False) == [mods.name("lib.f")]
    assert lib.f(1) == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert all("acme-plugin" in r.getMessage() for r in errors)
    assert any("cannot be imported" in r.getMessage() for r in errors)


def test_target_with_one_bad_hook_is_left_untouched(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")
    original = lib.f
    registry.register(mods.name("lib.f"), lambda r, x: r + 1)
    registry.register(mods.name("lib.f"), f"{mods.pkg}.lib:missing_hook", HookType.AROUND)
    assert registry.apply_hooks(strict=False) == []
    assert lib.f is original


def test_string_hook_resolving_to_class_with_wrong_type(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("lib", "def f(x):\n    return x\nclass NotAHook:\n    pass\n")
    registry.register(mods.name("lib.f"), f"{mods.pkg}.lib:NotAHook", HookType.AFTER, source=SRC)
    with pytest.raises(HookApplyError, match="only be a REPLACE hook"):
        registry.apply_hooks()


def test_before_bad_return_is_type_error_naming_hook_and_target(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")

    def sloppy_before(x):  # type: ignore[no-untyped-def]
        return x

    registry.register(mods.name("lib.f"), sloppy_before, HookType.BEFORE, source=SRC)
    registry.apply_hooks()
    with pytest.raises(TypeError) as info:
        lib.f(1)
    msg = str(info.value)
    assert "sloppy_before" in msg and mods.name("lib.f") in msg and "acme-plugin" in msg
    assert "(args, kwargs)" in msg
    registry.reset()
    registry.register(mods.name("lib.f"), lambda x: ((x,), [1]), HookType.BEFORE)
    registry.apply_hooks()
    with pytest.raises(TypeError, match="BEFORE hook"):
        lib.f(1)


def test_hook_exception_gets_note_naming_hook_source_and_target(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", "def f(x):\n    return 1 / x\n")

    def exploding(result, x):  # type: ignore[no-untyped-def]
        raise KeyError("k")

    def passthrough(orig, x):  # type: ignore[no-untyped-def]
        return orig(x)

    registry.register(mods.name("lib.f"), exploding, HookType.AFTER, source=SRC)
    registry.register(mods.name("lib.f"), passthrough, HookType.AROUND, source=SRC)
    registry.apply_hooks()
    with pytest.raises(KeyError) as info:
        lib.f(1)
    notes = info.value.__notes__ if sys.version_info >= (3, 11) else []
    if sys.version_info >= (3, 11):
        assert len(notes) == 1  # the innermost layer names it; outer ones add nothing
        assert "AFTER hook" in notes[0] and "exploding" in notes[0]
        assert "acme-plugin 2.0" in notes[0] and mods.name("lib.f") in notes[0]
    with pytest.raises(ZeroDivisionError) as info2:
        lib.f(0)  # the original's own error passes unchanged (noted as passing the AROUND)
    assert type(info2.value) is ZeroDivisionError


def test_hook_errors_are_hierarchy_members() -> None:
    assert issubclass(HookRegistrationError, TypeError)
    assert issubclass(HookTargetError, LookupError)
