"""``optional=True`` skips a missing target, ``condition=`` decides at apply time; both say why."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spawnkit.errors import HookApplyError, HookRegistrationError
from spawnkit.hooks import HookRegistry, HookSource, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

SRC = HookSource("rdna3", "rdna3-shims", "0.2")


def _plus_one(result: int, *args: object) -> int:
    return result + 1


def test_optional_missing_module_is_skipped_with_its_reason(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")
    registry.register("vllm_not_installed_xyz.layers.f", _plus_one, optional=True, source=SRC)
    registry.register("vllm_not_installed_xyz.layers:K.m", _plus_one, optional=True, source=SRC)
    registry.register(mods.name("lib.f"), _plus_one, source=SRC)
    assert registry.apply_hooks() == [mods.name("lib.f")]
    assert lib.f(1) == 2
    rows = {r.target: (r.state, r.reason) for r in registry.status()}
    reason = "module 'vllm_not_installed_xyz' is not installed"
    assert rows["vllm_not_installed_xyz.layers.f"] == ("skipped", reason)
    assert rows["vllm_not_installed_xyz.layers:K.m"] == ("skipped", reason)
    assert registry.apply_hooks() == []  # decided once, not retried on every call


def test_optional_missing_attribute_is_skipped(mods: Modules, registry: type[HookRegistry]) -> None:
    mods.load("lib", "class C:\n    pass\n")
    registry.register(mods.name("lib.C.gone"), _plus_one, optional=True)
    registry.apply_hooks()
    (row,) = registry.status()
    assert row.state == "skipped" and "has no attribute 'gone'" in row.reason


def test_non_optional_missing_target_is_still_an_error(registry: type[HookRegistry]) -> None:
    registry.register("vllm_not_installed_xyz.layers.f", _plus_one, source=SRC)
    with pytest.raises(HookApplyError, match="vllm_not_installed_xyz"):
        registry.apply_hooks()
    assert registry.status()[0].state == "failed"


def test_optional_module_that_raises_on_import_is_an_error(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("raising", "raise RuntimeError('module init failed')\n")
    mods.write("broken", "import not_installed_dependency_xyz\ndef f():\n    pass\n")
    registry.register(mods.name("raising.f"), _plus_one, optional=True)
    registry.register(mods.name("broken:f"), _plus_one, optional=True)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    assert "module init failed" in info.value.failures[mods.name("raising.f")][1]
    assert "not_installed_dependency_xyz" in info.value.failures[mods.name("broken:f")][1]


def test_condition_false_skips_without_importing(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.write("hip_only", "def f(x):\n    return x\n")
    calls: list[int] = []

    def is_hip() -> bool:
        calls.append(1)
        return False

    registry.register(mods.name("hip_only.f"), _plus_one, condition=is_hip, source=SRC)
    registry.apply_hooks()
    assert mods.name("hip_only") not in sys.modules
    (row,) = registry.status()
    assert row.state == "skipped"
    assert row.reason == f"condition {__name__}:{is_hip.__qualname__} is false"
    registry.apply_hooks()
    assert calls == [1]


def test_condition_true_applies(mods: Modules, registry: type[HookRegistry]) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")
    registry.register(mods.name("lib.f"), _plus_one, HookType.AFTER, condition=lambda: True)
    registry.apply_hooks()
    assert lib.f(1) == 2 and registry.status()[0].state == "applied"


def test_condition_that_raises_is_an_error_naming_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", "def f(x):\n    return x\n")
    original = lib.f

    def broken_probe() -> bool:
        raise OSError("no /dev/kfd")

    registry.register(mods.name("lib.f"), _plus_one, condition=broken_probe, source=SRC)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert "broken_probe" in text and "no /dev/kfd" in text and "rdna3-shims" in text
    assert isinstance(info.value.__cause__, HookRegistrationError)
    assert lib.f is original


def _is_hip() -> bool:
    return False


async def _async_is_hip() -> bool:
    return False


@pytest.mark.parametrize(
    ("condition", "said"),
    [(lambda: _is_hip, "call it inside the condition"), (_async_is_hip, "make it a plain def")],
    ids=["call-forgotten", "async-def"],
)
def test_a_condition_that_answers_with_a_function_or_a_coroutine_is_refused(
    mods: Modules,
    registry: type[HookRegistry],
    condition: Any,
    said: str,
    recwarn: pytest.WarningsRecorder,
) -> None:
    # Before: both answers are truthy, so a hook meant for HIP only was applied here too.
    lib = mods.load("lib", "def f(x):\n    return x\n")
    original = lib.f
    target = mods.name("lib.f")
    registry.register(target, _plus_one, HookType.AFTER, condition=condition, source=SRC)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert "which is always true" in text and said in text and "rdna3-shims" in text, text
    assert isinstance(info.value.__cause__, HookRegistrationError)
    assert lib.f is original
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_condition_must_be_callable(registry: type[HookRegistry]) -> None:
    with pytest.raises(HookRegistrationError, match="condition must be a callable"):
        registry.register("a.b", _plus_one, condition=True)  # type: ignore[arg-type]


def test_keywords_work_on_plugin_hook_and_namespace_facades(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    from spawnkit.namespace import Namespace

    ns = Namespace(f"kwns_{mods.pkg}", f"KW{mods.pkg.upper()}")
    with ns.hooks.isolated():
        ns.HookRegistry.register("vllm_not_installed_xyz.f", _plus_one, optional=True)
        ns.plugin_hook(mods.name("lib.f"), condition=lambda: False)(_plus_one)
        ns.hooks.plugin_hook(mods.name("lib.g"), on_import=True)(_plus_one)
        ns.hooks.apply_hooks()
        states = [r.state for r in ns.hooks.status()]
        assert states == ["skipped", "skipped", "pending"]


def test_optional_on_import_target_of_a_missing_package_is_skipped_at_once(
    registry: type[HookRegistry],
) -> None:
    registry.register(
        "vllm_not_installed_xyz._custom_ops.f", _plus_one, optional=True, on_import=True
    )
    registry.apply_hooks()
    (row,) = registry.status()
    assert (row.state, row.reason) == (
        "skipped",
        "module 'vllm_not_installed_xyz' is not installed",
    )


def test_an_optional_target_one_typo_from_a_real_name_is_skipped_loudly(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    # optional=True is for "not there" (a dependency not installed, a version without it);
    # before, a misspelt or renamed target was skipped the same way, with nothing said.
    mods.load("lib", "def fused_add_rms_norm(x): ...\nclass K:\n    def step(self): ...\n")
    misspelt = {
        mods.name("lib.fused_add_rms_nrom"): "fused_add_rms_norm",
        mods.name("lib.K.stepp"): "step",
        mods.name("lbi.fused_add_rms_norm"): "lib",  # a submodule of the package
    }
    for target in misspelt:
        registry.register(target, _plus_one, optional=True, source=SRC)
    registry.register(mods.name("lib.K.unrelated_name"), _plus_one, optional=True, source=SRC)
    with caplog.at_level("WARNING", logger="spawnkit.hooks"):
        registry.apply_hooks()
        registry.apply_hooks()
    rows = {r.target: (r.state, r.reason) for r in registry.status()}
    assert {rows[t][0] for t in rows} == {"skipped"}
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == len(misspelt), warned  # once each; nothing close: nothing said
    for target, near in misspelt.items():
        assert rows[target][1].endswith(f" (did you mean {near!r}?)"), rows[target]
        (line,) = [w for w in warned if repr(target) in w]
        assert f"but it has {near!r}" in line and "plugin 'rdna3' (rdna3-shims 0.2)" in line
    assert "did you mean" not in rows[mods.name("lib.K.unrelated_name")][1]


@pytest.mark.parametrize("on_import", [False, True])
def test_an_optional_target_whose_package_is_one_typo_from_an_installed_one_is_said(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture, on_import: bool
) -> None:
    """``vlm.ops.f`` for ``vllm`` (installed): "not installed", skipped like vllm on a
    machine without it, with nothing said; the hook never ran."""
    mods.load("ops", "def f(x):\n    return x\n")
    pkg = mods.pkg
    swapped = pkg[:-1]  # the last letter dropped: one slip
    target = f"{swapped}.ops.f"
    registry.register(target, _plus_one, optional=True, on_import=on_import, source=SRC)
    registry.register("vllm_not_installed_xyz.ops.f", _plus_one, optional=True, source=SRC)
    with caplog.at_level("WARNING", logger="spawnkit.hooks"):
        registry.apply_hooks()
    rows = {r.target: (r.state, r.reason) for r in registry.status()}
    assert rows[target] == (
        "skipped",
        f"module {swapped!r} is not installed (did you mean {pkg!r}?)",
    )
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    (line,) = warned  # the package that is simply not installed: nothing said, as before
    assert repr(target) in line and f"but {pkg!r} is installed" in line, line
    assert "plugin 'rdna3' (rdna3-shims 0.2)" in line


def test_a_required_target_whose_package_is_one_typo_off_names_it(
    registry: type[HookRegistry],
) -> None:
    registry.register("jsno.dumps", _plus_one, source=SRC)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    assert "no module named 'jsno' (did you mean 'json'?)" in str(info.value.__cause__)


def test_a_required_on_import_target_whose_package_is_not_installed_is_an_error(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """It waited, ``pending``, for an import that could never come: the hook never ran, while
    "a non-optional missing target stays an error" held only without on_import.  (A target in
    an installed package still waits: tests/test_hooks_on_import.py.)"""
    lib = mods.load("lib", "def f(x):\n    return x\n")
    registry.register(f"{mods.pkg[:-1]}.lib.f", _plus_one, on_import=True, source=SRC)
    registry.register(mods.name("lib.f"), _plus_one, source=SRC)
    with pytest.raises(HookApplyError) as info:
        registry.apply_hooks()
    text = str(info.value)
    assert f"no module named {mods.pkg[:-1]!r} (did you mean {mods.pkg!r}?)" in text, text
    assert "optional=True" in text and lib.f(1) == 1  # nothing patched


def test_a_required_target_one_typo_from_a_real_name_names_it(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    mods.load("lib", "def fused_add_rms_norm(x):\n    return x\n")
    registry.register(mods.name("lib.fused_add_rms_nrom"), _plus_one, source=SRC)
    with pytest.raises(HookApplyError, match="Did you mean 'fused_add_rms_norm'"):
        registry.apply_hooks()


@pytest.mark.parametrize("optional", [False, True])
def test_a_private_method_written_as_in_its_class_body_names_the_stored_name(
    mods: Modules, registry: type[HookRegistry], optional: bool
) -> None:
    """``Engine.__step`` is stored as ``_Engine__step``: the required target names the name to
    hook, and an optional one says it where it is skipped."""
    mods.load("lib", "class _Engine:\n    def __step(self):\n        return 1\n")
    registry.register(mods.name("lib._Engine.__step"), _plus_one, optional=optional)
    if not optional:
        with pytest.raises(HookApplyError, match="Did you mean '_Engine__step'"):
            registry.apply_hooks()
        return
    registry.apply_hooks()
    (row,) = registry.status()
    assert row.state == "skipped" and "did you mean '_Engine__step'?" in row.reason


def _osa_distance(a: str, b: str) -> int:
    """Edits (change, add, drop, swap two neighbours) from ``a`` to ``b``: the textbook table."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@given(st.text("abc_", max_size=7), st.text("abc_", max_size=7))
def test_one_slip_is_exactly_an_edit_distance_of_one(a: str, b: str) -> None:
    from spawnkit.hooks._resolve import _one_edit

    assert _one_edit(a, b) == (_osa_distance(a, b) == 1)


_GATE = "def is_hip():\n    return False\n\ndef fused_ok():\n    return True\n"


@pytest.mark.parametrize("gate_first", [True, False], ids=["gate-first", "gated-first"])
def test_a_condition_reads_the_gate_another_plugin_replaces(
    mods: Modules, registry: type[HookRegistry], gate_first: bool
) -> None:
    """``condition=is_hip`` with a platform plugin's REPLACE of ``is_hip`` answering True: the
    condition was asked before anything was patched, read the original (False) and skipped
    the HIP-only hook in every worker while ``is_hip()`` answered True from then on; the
    status said 'condition is false'.  In either registration order."""
    lib = mods.load("lib", _GATE)
    asked: list[bool] = []

    def on_hip() -> bool:
        asked.append(lib.is_hip())
        return asked[-1]

    gate = (mods.name("lib.is_hip"), lambda: True, HookType.REPLACE)
    gated = (mods.name("lib.fused_ok"), lambda: False, HookType.REPLACE)
    for target, hook, kind in [gate, gated] if gate_first else [gated, gate]:
        registry.register(target, hook, kind, condition=on_hip if hook is gated[1] else None)
    registry.apply_hooks()
    assert (lib.is_hip(), lib.fused_ok()) == (True, False)
    # asked of the originals, then with the hooks (turned: patched again), then once more
    assert {r.state for r in registry.status()} == {"applied"} and asked == [False, True, True]
    registry.apply_hooks()
    assert len(asked) == 3  # decided: not asked on every call


def test_a_condition_that_a_replace_turns_false_skips_its_hook(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    lib = mods.load("lib", _GATE.replace("return False", "return True", 1))
    registry.register(mods.name("lib.is_hip"), lambda: False, HookType.REPLACE)

    def hip() -> bool:
        return bool(lib.is_hip())

    registry.register(mods.name("lib.fused_ok"), lambda: False, HookType.REPLACE, condition=hip)
    assert registry.apply_hooks() == [mods.name("lib.is_hip")]  # fused_ok: patched, undone
    assert lib.fused_ok() is True
    rows = {r.target: (r.state, r.reason) for r in registry.status()}
    assert rows[mods.name("lib.fused_ok")] == (
        "skipped",
        f"condition {__name__}:{hip.__qualname__} is false once the hooks are applied",
    )


def test_a_condition_that_reads_its_own_hook_keeps_its_first_answer_with_a_warning(
    mods: Modules, registry: type[HookRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """``condition=lambda: not is_hip()`` on a REPLACE of ``is_hip`` itself: each answer undoes
    the other; after the second turn the hook is as first decided, and the log says why."""
    lib = mods.load("lib", _GATE)
    calls: list[int] = []

    def not_yet() -> bool:
        calls.append(1)
        return not lib.is_hip()

    registry.register(mods.name("lib.is_hip"), lambda: True, HookType.REPLACE, condition=not_yet)
    with caplog.at_level("WARNING", logger="spawnkit.hooks"):
        registry.apply_hooks()
    assert lib.is_hip() is True and registry.status()[0].state == "applied"
    assert len(calls) == 3  # before, after (turned: skipped), after again (turned back)
    assert "reads what its own hook changes" in caplog.text and "not_yet" in caplog.text


_PLATFORM_GATE = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def register():  # a platform plugin answering the engine's gate
    get_namespace({tag!r}).hooks.register("{pkg}.utils.is_hip", lambda: True, HookType.REPLACE)
"""

_HIP_ONLY = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def on_hip():
    from {pkg}.utils import is_hip  # inside the condition, as the README shows
    return is_hip()

def register():  # a HIP-only shim: loaded first, its condition asked before any patching
    get_namespace({tag!r}).hooks.register(
        "{pkg}.kernels.fused_ok", lambda: False, HookType.REPLACE, condition=on_hip
    )
"""

_GATED_ENTRY = """
def main():
    from {pkg}.kernels import fused_ok
    from {pkg}.utils import is_hip
    return is_hip(), fused_ok()
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_workers_condition_sees_the_platform_plugins_gate(tmp_path: Path, method: str) -> None:
    from _plugin_app import LAUNCH, MAIN, run_script, write_app

    modules = {
        "utils": "def is_hip():\n    return False\n",
        "kernels": "def fused_ok():\n    return True\n",
        "entry": _GATED_ENTRY,
        "a_shim": _HIP_ONLY,
        "b_platform": _PLATFORM_GATE,
    }
    plugins = {"a_shim": "a_shim:register", "b_platform": "b_platform:register"}
    app = write_app(tmp_path, "gate", LAUNCH + MAIN, plugins, modules)
    proc = run_script(app.script, method)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[(True, False)]"  # was [(True, True)]
