"""A ``CustomOp``'s kernel follows hooks applied or removed after its first call.

The kernel is chosen at an instance's first call and kept (``_kernel``); the direct call
path runs it with no lookup.  A hook on the op's ``forward_cpu`` or on its registered kernel
applied after the model ran once never ran on that instance, and a hook removed after the
first call kept running; a compiled op kept the kernel it traced.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import spawnkit
from spawnkit.testing import write_distribution

pytestmark = pytest.mark.needs_torch
torch = pytest.importorskip("torch", reason='needs torch: pip install "spawnkit[torch]"')

from _platform_dists import PluginSite  # noqa: E402
from spawnkit.platforms import CustomOp  # noqa: E402

_OPS = """
from spawnkit.platforms import CustomOp
from PKG.kernels import registered

class Norm(CustomOp):
    def forward_native(self, x):
        return x + 1

    def forward_cpu(self, x):
        return x + 2

class GemmaNorm(Norm):
    pass

class Fused(CustomOp):
    def forward_native(self, x):
        return x + 1

CustomOp.register_oot_forward(Fused, fn=registered, platform_key="cpu")
"""

_KERNELS = """
def registered(op, x):
    return x + 100
"""


def _times_ten(original: Any, *args: Any, **kwargs: Any) -> Any:
    return original(*args, **kwargs) * 10


@pytest.fixture
def ops(site: PluginSite, mods: Any) -> Iterator[Any]:
    site.pm.set_selection("cpu")
    mods.write("kernels", _KERNELS)
    module = mods.load("ops", _OPS)
    module.ns = site.ns
    yield module
    CustomOp.unregister_oot_forward(module.Fused, "cpu")


def _run(*ops: Any) -> list[float]:
    return [op(torch.zeros(1)).item() for op in ops]


def _hook_both(registry: Any, mods: Any) -> None:
    registry.register(mods.name("ops.Norm.forward_cpu"), _times_ten, "AROUND")
    registry.register(mods.name("kernels.registered"), _times_ten, "AROUND")
    registry.apply_hooks()


def test_a_hook_applied_after_the_first_call_runs(ops: Any, mods: Any, registry: Any) -> None:
    norm, fused = ops.Norm(namespace=ops.ns), ops.Fused(namespace=ops.ns)
    gemma = ops.GemmaNorm(namespace=ops.ns)
    assert _run(norm, fused, gemma) == [2, 100, 2]  # each pinned its kernel
    _hook_both(registry, mods)
    assert _run(norm, fused, gemma) == [20, 1000, 20]
    assert [norm.dispatch_choice, fused.dispatch_choice] == ["forward_cpu", "oot:cpu"]


def test_a_hook_removed_after_the_first_call_stops(ops: Any, mods: Any, registry: Any) -> None:
    with registry.isolated():
        _hook_both(registry, mods)
        norm, fused = ops.Norm(namespace=ops.ns), ops.Fused(namespace=ops.ns)
        assert _run(norm, fused) == [20, 1000]  # pinned the hooked kernels
        registry.unapply()
        assert _run(norm, fused) == [2, 100]
        registry.apply_hooks()
        assert _run(norm, fused) == [20, 1000]
    assert _run(norm, fused) == [2, 100]  # isolated's exit undid them


def test_a_hook_put_on_a_subclass_that_inherits_the_method(
    ops: Any, mods: Any, registry: Any
) -> None:
    """``GemmaNorm.forward_cpu`` is ``Norm``'s: the hook goes into ``GemmaNorm``'s dict."""
    norm, gemma = ops.Norm(namespace=ops.ns), ops.GemmaNorm(namespace=ops.ns)
    assert _run(norm, gemma) == [2, 2]
    registry.register(mods.name("ops.GemmaNorm.forward_cpu"), _times_ten, "AROUND")
    registry.apply_hooks()
    assert _run(norm, gemma) == [2, 20]
    registry.unapply()
    assert _run(norm, gemma) == [2, 2]


def test_a_hook_elsewhere_keeps_the_pinned_kernel(ops: Any, mods: Any, registry: Any) -> None:
    """Control: a change the op's kernel is not chosen from leaves its pin alone."""
    mods.write("other", "def unrelated():\n    return 1\n")
    norm, fused = ops.Norm(namespace=ops.ns), ops.Fused(namespace=ops.ns)
    assert _run(norm, fused) == [2, 100]
    pinned = [norm.__dict__["_kernel"], fused.__dict__["_kernel"]]
    registry.register(mods.name("other.unrelated"), _times_ten, "AROUND")
    registry.apply_hooks()
    assert _run(norm, fused) == [2, 100]
    assert [norm.__dict__["_kernel"], fused.__dict__["_kernel"]] == pinned


def test_a_compiled_op_follows_a_later_hook(ops: Any, mods: Any, registry: Any) -> None:
    """The graph traced the kernel as it was: a hook applied on ``forward_cpu`` after the
    compiled op ran never ran in it (a registered kernel followed, by chance of the sweep
    rebinding the entry dynamo guards on); removed, the original runs again."""
    torch._dynamo.reset()  # every op's frame is ``CustomOp.__call__``: its recompile limit
    norm, fused = ops.Norm(namespace=ops.ns), ops.Fused(namespace=ops.ns)
    compiled = [torch.compile(op, backend="eager", fullgraph=True) for op in (norm, fused)]
    try:
        assert _run(*compiled) == [2, 100]
        with registry.isolated():
            _hook_both(registry, mods)
            assert _run(*compiled) == [20, 1000]
            registry.unapply()
            assert _run(*compiled) == [2, 100]
            registry.apply_hooks()
            assert _run(*compiled) == [20, 1000]
        assert _run(*compiled) == [2, 100]
    finally:
        torch._dynamo.reset()


_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def times_ten(original, *args, **kwargs):
    return original(*args, **kwargs) * 10

def register():
    hooks = get_namespace({ns!r}).hooks
    hooks.register({eng!r} + ".ops.Norm.forward_cpu", times_ten, HookType.AROUND)
    hooks.register({eng!r} + ".kernels.registered", times_ten, HookType.AROUND)
"""

_SCRIPT = """
import os
import torch
import spawnkit

NS = spawnkit.Namespace({ns!r}, env_prefix={ns!r}.upper())
os.environ[NS.config.platform_var] = "cpu"
os.environ[{ns!r}.upper() + "_IMPORT_GUARD"] = "warn"  # the ops were imported: run anyway
from {eng}.ops import Fused, Norm

ops, x = [Norm(namespace=NS), Fused(namespace=NS)], torch.zeros(1)
before = [op(x).item() for op in ops]  # the model ran once: each op pinned its kernel
spawnkit.bootstrap_here(NS)
print([before, [op(x).item() for op in ops]])
"""


def test_bootstrap_here_after_the_model_ran_hooks_its_kernels(tmp_path: Path) -> None:
    """README's pattern, late: an engine's script runs its model, then ``bootstrap_here()``
    applies a plugin's hooks on the ops' ``forward_cpu`` and registered kernel.  Before, the
    ops kept the kernels they pinned and the hooks never ran, while the report said applied.
    Real distributions, a real process."""
    tag = uuid.uuid4().hex[:8]
    ns, eng, site = f"nsop{tag}", f"engop{tag}", tmp_path / "site"
    write_distribution(
        site,
        f"{eng}-dist",
        modules={f"{eng}.ops": _OPS.replace("PKG", eng), f"{eng}.kernels": _KERNELS},
    )
    write_distribution(
        site,
        f"plugop{tag}",
        entry_points={f"{ns}.plugins": {"late": f"plugop{tag}:register"}},
        modules={f"plugop{tag}": _PLUGIN.format(ns=ns, eng=eng)},
    )
    script = tmp_path / "run_model.py"
    script.write_text(_SCRIPT.format(ns=ns, eng=eng))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    ours = str(Path(spawnkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), ours, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before, after = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert (before, after) == ([2, 100], [20, 1000]), proc.stderr
