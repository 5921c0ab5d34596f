"""TorchScript never silently compiles the original of a hooked function: it calls the hooks,
refuses, or is named.

``torch.jit.script`` compiles a function from its source, and ``inspect`` follows a chain's
``__wrapped__`` to the original's: scripted code calling a hooked function by its global name
ran the original, scripting the hooked function itself compiled the original, and scripted
callers compiled as the engine's module was imported kept the original, all while
``status()`` said applied.  Real modules in a temporary folder, the registry, and a real
spawned worker for the warning.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.errors import HookConflictWarning
from spawnkit.hooks import HookRegistry, HookType

if TYPE_CHECKING:
    from _hooks_support import Modules

pytestmark = [
    pytest.mark.needs_torch,
    pytest.mark.filterwarnings("ignore:`torch.jit.s[a-z]*` is deprecated:DeprecationWarning"),
]

_ACT = """
import torch


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def other(x: torch.Tensor) -> torch.Tensor:
    return x


def block(x: torch.Tensor) -> torch.Tensor:
    return scale(x) + 1


def calls_other(x: torch.Tensor) -> torch.Tensor:
    return other(x) * 2


class Layer(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale(x) + 1


class Helped(torch.nn.Module):
    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @torch.jit.export
    def exported(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.helper(x) + self.exported(x)
"""

# scripted as the module is imported, before any hook: ``layer`` compiles ``act`` in, and
# ``compiled_block`` compiles the plain ``scale`` in as its callee
_FUSED = """
import torch


@torch.jit.script
def act(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.jit.script
def layer(x: torch.Tensor) -> torch.Tensor:
    return act(x) + 1


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.jit.script
def compiled_block(x: torch.Tensor) -> torch.Tensor:
    return scale(x) + 1


@torch.jit.script
def alone(x: torch.Tensor) -> torch.Tensor:
    return x * 2
"""


def _triple(x):  # type: ignore[no-untyped-def]
    return x * 3


def _triple_method(self, x):  # type: ignore[no-untyped-def]
    return x * 3


def _times_10(original, x):  # type: ignore[no-untyped-def]
    return original(x) * 10


def _applied(mods: Modules, registry: type[HookRegistry], *targets: str):  # type: ignore[no-untyped-def]
    mods.write("act", _ACT)
    for target in targets:
        hook = _triple_method if "." in target else _triple
        registry.register(mods.name(f"act.{target}"), hook, HookType.REPLACE)
    registry.apply_hooks()
    return mods.load("act")


def test_scripted_code_calling_a_hooked_function_runs_the_hook(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    import torch

    act = _applied(mods, registry, "scale")
    x = torch.ones(1)
    assert float(torch.jit.script(act.block)(x)) == 4.0  # the original's copy gave 3.0
    assert float(torch.jit.script(act.Layer())(x)) == 4.0
    assert float(act.block(x)) == 4.0  # Python, as before


def test_a_hooked_method_runs_in_a_scripted_module(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    import torch

    act = _applied(mods, registry, "Helped.helper", "Helped.exported")
    scripted = torch.jit.script(act.Helped())
    x = torch.ones(1)
    assert float(scripted(x)) == 6.0  # both hooked; the originals' copies gave 4.0
    assert float(scripted.exported(x)) == 3.0


def test_scripting_the_hooked_function_itself_is_refused_naming_the_target(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    import torch

    act = _applied(mods, registry, "scale", "calls_other")
    said = f"spawnkit.hooks: target '{mods.name('act.scale')}' is hooked"
    with pytest.raises(RuntimeError, match=re.escape(said)):
        torch.jit.script(act.scale)  # compiled the original: 2.0 where the hook gives 3.0
    # a hooked function calling another global: no "undefined value" inside spawnkit's chain
    said = f"target '{mods.name('act.calls_other')}' is hooked"
    with pytest.raises(RuntimeError, match=re.escape(said)) as caught:
        torch.jit.script(act.calls_other)
    assert "_chain.py" not in str(caught.value) and "Script the code that calls it" in str(
        caught.value
    )


def test_saving_scripted_code_that_calls_the_hooked_python_fails(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    import torch

    act = _applied(mods, registry, "scale")
    scripted = torch.jit.script(act.Layer())
    with pytest.raises(RuntimeError, match="Could not export Python function call 'scale'"):
        torch.jit.save(scripted, io.BytesIO())  # saved the original's copy, unsaid


def test_scripted_callers_compiled_before_apply_are_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    import torch

    mods.write("fused", _FUSED)
    act, scale, alone = (mods.name(f"fused.{n}") for n in ("act", "scale", "alone"))
    registry.register(act, _times_10, HookType.AROUND)
    registry.register(scale, _triple, HookType.REPLACE)
    registry.register(alone, _times_10, HookType.AROUND)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookConflictWarning)  # the registry alone: status only
        registry.apply_hooks()
    fused = mods.load("fused")
    x = torch.ones(1)
    assert float(fused.act(x)) == 20.0 and float(fused.layer(x)) == 3.0  # what is named
    compiled = " (TorchScript, compiled before the hooks)"
    assert registry.bypassing() == {
        act: [mods.name("fused.layer") + compiled],
        scale: [mods.name("fused.compiled_block") + compiled],
    }  # ``alone`` has no scripted caller: its Python calls run the hook, nothing is skipped
    rows = {s.target: s for s in registry.status()}
    skipped = "runs that compiled copy and skips the hook: " + mods.name("fused.layer")
    assert rows[act].state == "applied" and skipped in rows[act].reason
    assert rows[alone].reason == "" and float(fused.alone(x)) == 20.0
    assert "Fix: hook the scripted caller" in registry._bypass_report()[act][2]


# an engine module that probes TorchScript as it is imported, with a local function it drops,
# and keeps another local function's scripted copy (under another name)
_PROBED = """
import torch


def act(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _ts_available() -> bool:
    def probe(x: torch.Tensor) -> torch.Tensor:
        return act(x)

    try:
        torch.jit.script(probe)
        return True
    except Exception:
        return False


TS_OK = _ts_available()


def _scripted():
    def kept(x: torch.Tensor) -> torch.Tensor:
        return act(x) + 1

    return torch.jit.script(kept)


KEPT = _scripted()
"""


def test_a_scripted_caller_no_one_can_run_is_not_named(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """TorchScript's compilation unit keeps every graph it compiled: the probe, gone with its
    function, was named as a scripted caller to hook (a conflict that stops a worker under
    ``<PREFIX>_HOOK_CONFLICTS=error``).  Control: the kept scripted copy is still named."""
    import torch

    mods.write("probed", _PROBED)
    act = mods.name("probed.act")
    registry.register(act, _times_10, HookType.AROUND)
    registry.apply_hooks()
    probed = mods.load("probed")
    assert probed.TS_OK and float(probed.act(torch.ones(1))) == 20.0
    assert float(probed.KEPT(torch.ones(1))) == 3.0  # the original's copy: skips the hook
    compiled = " (TorchScript, compiled before the hooks)"
    assert registry.bypassing() == {act: [mods.name("probed.kept") + compiled]}
    (row,) = registry.status()
    assert mods.name("probed.probe") not in row.reason and mods.name("probed.kept") in row.reason


def test_scripting_a_caller_of_a_hooked_script_function_is_refused(
    mods: Modules, registry: type[HookRegistry]
) -> None:
    """A hooked TorchScript function cannot be called by scripted code (torch asks the
    ScriptFunction for a Python signature): said, instead of torch's "unsupported callable"."""
    import torch

    mods.write("fused", _FUSED)
    registry.register(mods.name("fused.alone"), _times_10, HookType.AROUND)
    registry.apply_hooks()
    fused = mods.load("fused")

    def caller(x: torch.Tensor) -> torch.Tensor:
        return fused.alone(x) + 1

    said = f"target '{mods.name('fused.alone')}' is a TorchScript function with hooks"
    with pytest.raises(RuntimeError, match=re.escape(said)):
        torch.jit.script(caller)


def test_no_mark_and_no_import_where_torch_is_not_loaded(tmp_path: Path) -> None:
    """Control: a worker without torch pays nothing (one ``sys.modules`` look-up a chain)."""
    (tmp_path / "plain_eng.py").write_text("def f(x):\n    return x\n")
    code = textwrap.dedent(
        """
        import sys
        from spawnkit.hooks import HookRegistry, HookType
        HookRegistry.register("plain_eng.f", lambda r, x: r, HookType.AFTER)
        HookRegistry.apply_hooks()
        import plain_eng
        print(sorted(k for k in vars(plain_eng.f) if "script" in k),
              "torch" in sys.modules, "spawnkit.hooks._torchscript" in sys.modules)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "False", "False"]


def _run(tmp_path: Path, modules: dict[str, str], code: str) -> list[str]:
    """``code`` in a fresh interpreter, with ``modules`` written to ``tmp_path``: torch must
    be imported after the hooks are applied, which a test process has long done."""
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", textwrap.dedent(code)],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split()


#: an engine module that never imports torch: its chains are built before torch is loaded
_NO_TORCH = {
    "late_eng": "def scale(x):\n    return x * 2\n\ndef shift(x):\n    return x + 5\n",
    "late_model": """
        import torch
        import late_eng
        from late_eng import shift

        def block(x: torch.Tensor) -> torch.Tensor:
            return late_eng.scale(x) + shift(x)

        def again(x: torch.Tensor) -> torch.Tensor:
            return late_eng.scale(x) + 1
    """,
}


def test_chains_built_before_torch_is_imported_are_marked_at_its_import(
    tmp_path: Path,
) -> None:
    """The entry imports its model (and torch) after apply_hooks(): scripted code calling the
    hooked functions compiled the originals' source (2.0 + 6.0 where the hooks give 3.0 +
    60.0), and scripting the hooked function itself compiled the original, while status()
    said applied.  Chains of two registries, each marked as torch's import runs."""
    code = """
        import sys
        from spawnkit.hooks import HookRegistry, HookType, _on_import
        from spawnkit.namespace import Namespace
        other = Namespace("tslate", "TSLATE").hooks
        HookRegistry.register("late_eng.scale", lambda x: x * 3, HookType.REPLACE)
        other.register("late_eng.shift", lambda original, x: original(x) * 10, HookType.AROUND)
        HookRegistry.apply_hooks()
        other.apply_hooks()
        assert "torch" not in sys.modules
        import late_model, torch
        x = torch.ones(1)
        print(float(late_model.block(x)), float(torch.jit.script(late_model.block)(x)))
        for fn in (late_model.late_eng.scale, late_model.shift):
            try:
                torch.jit.script(fn)
                print("compiled")
            except RuntimeError as exc:
                print("refused:" + str(exc).partition("target ")[2].split()[0])
        print([s.state for s in (*HookRegistry.status(), *other.status())])
        print("torch._jit_internal" in _on_import._watched)
    """
    out = _run(tmp_path, _NO_TORCH, code)
    assert out[:2] == ["63.0", "63.0"]  # Python, then the scripted block: both run the hooks
    assert out[2:4] == ["refused:'late_eng.scale'", "refused:'late_eng.shift'"]
    assert out[4:] == ["['applied',", "'applied']", "False"]  # the watch ended as it fired


def test_a_chain_built_inside_torchs_import_leaves_the_late_marks_whole(tmp_path: Path) -> None:
    """An on_import target in a module ``torch._jit_internal`` imports first is applied while
    it is half run (no ``FunctionModifiers`` yet): torch's objects read then must not be kept,
    or the chains marked as its import ends get no IGNORE and scripting their callers raises."""
    code = """
        from spawnkit.hooks import HookRegistry, HookType
        HookRegistry.register("late_eng.scale", lambda x: x * 3, HookType.REPLACE)
        HookRegistry.register("torch.distributed.rpc.is_available", lambda o: o(),
                              HookType.AROUND, on_import=True)
        HookRegistry.apply_hooks()
        import late_model, torch
        x = torch.ones(1)
        print(float(torch.jit.script(late_model.again)(x)),
              [s.state for s in HookRegistry.status()])
    """
    out = _run(tmp_path, _NO_TORCH, code)
    assert out == ["4.0", "['applied',", "'applied']"]  # the original's copy gave 3.0


def test_unapply_still_restores_a_chain_marked_at_torchs_import(tmp_path: Path) -> None:
    """A chain marked at torch's import and then removed is harmless: the original is back,
    in Python and in code scripted after unapply()."""
    code = """
        from spawnkit.hooks import HookRegistry, HookType
        HookRegistry.register("late_eng.scale", lambda x: x * 3, HookType.REPLACE)
        HookRegistry.apply_hooks()
        import late_model, torch
        x = torch.ones(1)
        print(float(torch.jit.script(late_model.block)(x)))
        HookRegistry.unapply()
        print(late_model.late_eng.scale(1), float(torch.jit.script(late_model.late_eng.scale)(x)),
              float(torch.jit.script(late_model.again)(x)), HookRegistry.applied_targets())
    """
    out = _run(tmp_path, _NO_TORCH, code)
    assert out == ["9.0", "2", "2.0", "3.0", "[]"]  # hooked: 3.0 + 6.0; the original


def test_a_process_that_never_imports_torch_watches_one_name(tmp_path: Path) -> None:
    """Control: where torch is never imported, chains cost one weak entry each and the process
    one name in the on-import finder's table, awaiting no hook; neither ``_torchscript`` nor
    torch is imported, and the hooked function runs its hook."""
    code = """
        import sys
        from spawnkit.hooks import HookRegistry, HookType, _on_import
        HookRegistry.register("late_eng.scale", lambda x: x * 3, HookType.REPLACE)
        HookRegistry.register("late_eng.shift", lambda r, x: r + 1, HookType.AFTER)
        HookRegistry.apply_hooks()
        import late_eng
        print(late_eng.scale(1), late_eng.shift(1), sorted(_on_import._watched),
              _on_import.waiting(), "torch" in sys.modules,
              "spawnkit.hooks._torchscript" in sys.modules)
    """
    out = _run(tmp_path, _NO_TORCH, code)
    assert out == ["3", "7", "['torch._jit_internal']", "False", "False", "False"]


_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def times_10(original, x):
    return original(x) * 10

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.fused.act", times_10, HookType.AROUND)
"""

_ENTRY = _FUSED.replace("{", "{{").replace("}", "}}") + (
    "\n\ndef main():\n    x = torch.ones(1)\n    return float(act(x)), float(layer(x))\n"
)


def test_a_spawned_worker_warns_of_the_scripted_caller(tmp_path: Path) -> None:
    main = '\nif __name__ == "__main__":\n    print(launch("fused:main", "spawn", nprocs=1))\n'
    modules = {"fused": _ENTRY, "plugin": _PLUGIN}
    app = write_app(tmp_path, "tjit", LAUNCH + main, {"x10": "plugin:register"}, modules)
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[(20.0, 3.0)]"  # Python hooked, layer not
    (line,) = warned(proc, "HookConflictWarning")
    assert f"target '{app.pkg}.fused.act'" in line and f"{app.pkg}.fused.layer" in line


_PROBED_ENTRY = _PROBED.split("\n\ndef _scripted")[0].replace("{", "{{").replace("}", "}}") + (
    "\n\ndef main():\n    return TS_OK, float(act(torch.ones(1)))\n"
)


def test_a_worker_that_probed_torchscript_runs_under_conflicts_error(tmp_path: Path) -> None:
    """The engine module scripted a local probe calling the target as it was imported: the
    worker named the dropped probe as a scripted caller, and stopped in resolve_entry under
    ``<PREFIX>_HOOK_CONFLICTS=error``; nothing can run that copy, so it runs, hooked."""
    main = '\nif __name__ == "__main__":\n    print(launch("probed:main", "spawn", nprocs=1))\n'
    modules = {"probed": _PROBED_ENTRY, "plugin": _PLUGIN.replace(".fused.", ".probed.")}
    app = write_app(tmp_path, "tjp", LAUNCH + main, {"x10": "plugin:register"}, modules)
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[(True, 20.0)]"
    assert warned(proc, "HookConflict") == []
