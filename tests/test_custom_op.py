"""CustomOp dispatch (registry, forward_<device_type>, forward_native) and RMSNorm."""

from __future__ import annotations

import copy
import pickle
import sys
import warnings
from typing import Any

import pytest

# Every test here needs torch; the marker says so and conftest skips them where it is not
# installed, but this module's own top-level use of torch must not break collection first.
pytestmark = pytest.mark.needs_torch
torch = pytest.importorskip("torch", reason='needs torch: pip install "spawnkit[torch]"')

from _platform_dists import PluginSite  # noqa: E402
from spawnkit.errors import CustomOpError, CustomOpWarning  # noqa: E402
from spawnkit.platforms import CustomOp, RMSNorm  # noqa: E402
from spawnkit.platforms._probes import Probe  # noqa: E402


class Toy(CustomOp):
    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def forward_cpu(self, x: torch.Tensor) -> torch.Tensor:
        return x + 2


class ToyChild(Toy):
    pass


class NativeOnly(CustomOp):
    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


@pytest.fixture
def cpu_ns(site: PluginSite) -> Any:
    site.pm.set_selection("cpu")
    yield site.ns
    for cls in (Toy, ToyChild, NativeOnly, RMSNorm):
        for key in ("cpu", "my_device"):
            CustomOp.unregister_oot_forward(cls, key)


def _oot(op: Toy, x: torch.Tensor) -> torch.Tensor:
    return x + 100


def test_forward_device_type_before_native(cpu_ns: Any) -> None:
    op = Toy(namespace=cpu_ns)
    assert op.dispatch_choice is None
    assert op(torch.zeros(1)).item() == 2
    assert op.dispatch_choice == "forward_cpu"
    assert NativeOnly(namespace=cpu_ns)(torch.ones(1)).item() == 3


def test_registered_forward_wins_for_the_exact_class_only(cpu_ns: Any) -> None:
    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")
    op, child = Toy(namespace=cpu_ns), ToyChild(namespace=cpu_ns)
    assert op(torch.zeros(1)).item() == 100 and op.dispatch_choice == "oot:cpu"
    assert child(torch.zeros(1)).item() == 2  # a subclass is another op
    assert CustomOp.oot_forward(Toy, "cpu") is _oot


def test_registration_for_another_key_is_ignored(cpu_ns: Any) -> None:
    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="my_device")
    assert Toy(namespace=cpu_ns)(torch.zeros(1)).item() == 2


def test_registering_twice_needs_replace(cpu_ns: Any) -> None:
    def other(op: Toy, x: torch.Tensor) -> torch.Tensor:
        return x - 1

    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")
    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")  # same fn: idempotent
    with pytest.raises(CustomOpError) as info:
        CustomOp.register_oot_forward(Toy, fn=other, platform_key="cpu")
    text = str(info.value)
    assert "Toy" in text and "'cpu'" in text and "_oot" in text and "replace=True" in text
    CustomOp.register_oot_forward(Toy, fn=other, platform_key="cpu", replace=True)
    assert Toy(namespace=cpu_ns)(torch.zeros(1)).item() == -1


@pytest.mark.parametrize("spelling", ["CPU", "cpu ", " Cpu"])
def test_keys_are_one_key_whatever_the_case_and_spaces(cpu_ns: Any, spelling: str) -> None:
    """``platform_key="CPU"`` (CpuPlatform.dispatch_key) or ``"cpu "`` was accepted and never
    looked up: the platform's key is ``cpu``, so every instance ran ``forward_cpu``."""
    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key=spelling)
    op = Toy(namespace=cpu_ns)
    assert op(torch.zeros(1)).item() == 100 and op.dispatch_choice == "oot:cpu"
    assert CustomOp.oot_forward(Toy, "cpu") is _oot

    def other(op: Toy, x: torch.Tensor) -> torch.Tensor:
        return x - 1

    with pytest.raises(CustomOpError, match="already has an out-of-tree forward"):
        CustomOp.register_oot_forward(Toy, fn=other, platform_key="cpu")  # the same key
    CustomOp.unregister_oot_forward(Toy, spelling.upper())
    assert CustomOp.oot_forward(Toy, "cpu") is None


_ASCEND = """
from spawnkit.platforms import Platform, PlatformEnum

class AscendPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "ascend"  # what <PREFIX>_PLATFORM and the entry point call it
    device_type = "npu"  # torch's device type, and so the dispatch key
    dispatch_key = "PrivateUse1"
"""


def _ascend(site: PluginSite) -> None:
    pkg = site.mod("ascendp")
    site.add(
        "ascend-plugin",
        {"ascend": f"{pkg}:activate"},
        {
            f"{pkg}.__init__": f"def activate():\n    return '{pkg}.platform.AscendPlatform'\n",
            f"{pkg}.platform": _ASCEND,
        },
    )
    site.monkeypatch.setenv(site.var, "ascend")


@pytest.mark.parametrize(
    ("registered", "named"),
    [("ascend", "device_name 'ascend'"), ("PrivateUse1", "dispatch_key 'PrivateUse1'")],
)
def test_a_kernel_under_another_name_of_the_platform_warns_once(
    site: PluginSite, registered: str, named: str
) -> None:
    """A platform plugin registered its kernel under its device_name or torch dispatch key;
    dispatch looks up ``get_dispatch_key_name()`` (``npu``): every op silently ran
    ``forward_native`` while the registration had been accepted."""
    _ascend(site)

    class Norm(RMSNorm):  # an op of this test's own
        pass

    CustomOp.register_oot_forward(Norm, fn=_oot, platform_key=registered)
    x = torch.ones(1, 4)
    op = Norm(4, namespace=site.ns)
    with pytest.warns(CustomOpWarning) as record:
        out = op(x)
    torch.testing.assert_close(out, op.forward_native(x))
    assert op.dispatch_choice == "forward_native" and len(record) == 1
    text = str(record[0].message)
    assert f"platform key {registered.lower()!r}" in text and named in text
    assert "looks up 'npu'" in text and "runs forward_native" in text
    assert "platform_key='npu'" in text and "_oot" in text
    assert record[0].filename == __file__  # the op's call, not spawnkit's or torch's frame
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Norm(4, namespace=site.ns)(x)  # once per op and key


def test_an_escalated_warning_refuses_each_instances_first_call(site: PluginSite) -> None:
    """``-W error::spawnkit.CustomOpWarning`` refuses every first call, not only the first."""
    _ascend(site)

    class Norm(RMSNorm):
        pass

    CustomOp.register_oot_forward(Norm, fn=_oot, platform_key="ascend")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomOpWarning)
        for _ in range(2):
            with pytest.raises(CustomOpWarning, match="platform_key='npu'"):
                Norm(4, namespace=site.ns)(torch.ones(1, 4))


def test_a_kernel_for_another_platform_stays_quiet(site: PluginSite) -> None:
    """Control: a kernel registered for ``cuda`` is the CUDA platform's, not a mistake."""
    _ascend(site)

    class Norm(RMSNorm):
        pass

    CustomOp.register_oot_forward(Norm, fn=_oot, platform_key="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = Norm(4, namespace=site.ns)
        op(torch.ones(1, 4))
    assert op.dispatch_choice == "forward_native"


class Ported(CustomOp):  # an SGLang op: aiter on AMD, sgl_kernel (CUDA-only) on NVIDIA
    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        return x + 2

    def forward_hip(self, x: torch.Tensor) -> torch.Tensor:
        return x + 3


class CudaOnly(CustomOp):
    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        return x + 2


def _gpu_ns(site: PluginSite, name: str) -> Any:
    """The built-in ``name`` selected, its probe answering present (this machine has no GPU)."""
    site.pm._probes[name] = lambda: Probe(True, f"test: {name}")
    site.pm.set_selection(name)
    return site.ns


@pytest.fixture
def gpu_ops() -> Any:
    yield
    for cls in (Ported, CudaOnly):
        for key in ("cuda", "rocm", "hip"):
            CustomOp.unregister_oot_forward(cls, key)


def test_rocm_runs_forward_hip_before_forward_cuda(site: PluginSite, gpu_ops: None) -> None:
    """RocmPlatform's device type and key are ``cuda``: an op's ``forward_hip`` never ran, its
    ``forward_cuda`` (in SGLang ports a CUDA-only ``sgl_kernel`` call) ran on AMD."""
    ns = _gpu_ns(site, "rocm")
    op = Ported(namespace=ns)
    assert op(torch.zeros(1)).item() == 3 and op.dispatch_choice == "forward_hip"
    fallback = CudaOnly(namespace=ns)  # no forward_hip: CUDA's, as SGLang's default does
    assert fallback(torch.zeros(1)).item() == 2 and fallback.dispatch_choice == "forward_cuda"


@pytest.mark.parametrize("amd_key", ["rocm", "hip"])
def test_rocm_runs_a_kernel_for_rocm_before_cuda_ones(
    site: PluginSite, gpu_ops: None, amd_key: str
) -> None:
    """A kernel registered for ``rocm`` was never looked up on ROCm; one for ``cuda`` ran."""
    ns = _gpu_ns(site, "rocm")
    CustomOp.register_oot_forward(Ported, fn=_oot, platform_key=amd_key)
    CustomOp.register_oot_forward(Ported, fn=lambda op, x: x - 1, platform_key="cuda")
    op = Ported(namespace=ns)
    assert op(torch.zeros(1)).item() == 100 and op.dispatch_choice == f"oot:{amd_key}"
    CustomOp.unregister_oot_forward(Ported, amd_key)
    op.reset_dispatch()
    assert op(torch.zeros(1)).item() == 3  # forward_hip before the CUDA kernel
    CustomOp.register_oot_forward(CudaOnly, fn=_oot, platform_key="cuda")
    fallback = CudaOnly(namespace=ns)
    assert fallback(torch.zeros(1)).item() == 100 and fallback.dispatch_choice == "oot:cuda"


def test_cuda_keeps_its_order(site: PluginSite, gpu_ops: None) -> None:
    """Control: on CUDA nothing of AMD's runs."""
    ns = _gpu_ns(site, "cuda")
    CustomOp.register_oot_forward(CudaOnly, fn=_oot, platform_key="rocm")
    op, cuda_only = Ported(namespace=ns), CudaOnly(namespace=ns)
    assert op(torch.zeros(1)).item() == 2 and op.dispatch_choice == "forward_cuda"
    assert cuda_only(torch.zeros(1)).item() == 2 and cuda_only.dispatch_choice == "forward_cuda"


_RDNA3 = """
from spawnkit.platforms import PlatformEnum, RocmPlatform, CudaPlatform

class Plat(RocmPlatform):
    _enum = PlatformEnum.OOT  # required of every out-of-tree class
    device_name = "rdna3"

class VChip(CudaPlatform):
    _enum = PlatformEnum.OOT
    device_name = "vchip"
"""


@pytest.mark.parametrize(("name", "cls"), [("rdna3", "Plat"), ("vchip", "VChip")])
def test_a_plugin_deriving_from_a_built_in_keeps_its_family(
    site: PluginSite, gpu_ops: None, name: str, cls: str
) -> None:
    """A vendor plugin ``class Rdna3Platform(RocmPlatform)`` with the required
    ``_enum = PlatformEnum.OOT``: is_rocm() answered False, so ops ran ``forward_cuda`` (CUDA-only
    in SGLang ports) on AMD and a kernel registered for ``rocm`` never ran."""
    pkg = site.add_platform(
        name, cls_body=_RDNA3, activate=f"return '{site.mod(name)}.platform.{cls}'"
    )
    site.monkeypatch.setenv(site.var, name)
    platform = site.pm.current()
    assert type(platform).__module__ == f"{pkg}.platform" and platform.is_out_of_tree()
    rocm = name == "rdna3"
    assert platform.is_rocm() is rocm and platform.is_cuda() is not rocm
    assert not platform.is_cpu() and not platform.is_xpu()
    op = Ported(namespace=site.ns)
    assert op(torch.zeros(1)).item() == (3 if rocm else 2)  # forward_hip / forward_cuda
    CustomOp.register_oot_forward(Ported, fn=_oot, platform_key="rocm")
    op = Ported(namespace=site.ns)
    assert op(torch.zeros(1)).item() == (100 if rocm else 2)


_OOT_CHIP = """
from spawnkit.platforms import Platform, PlatformEnum

class Plat(Platform):
    _enum = PlatformEnum.OOT
    device_name = "{name}"
    device_type = "{device_type}"

    def get_dispatch_key_name(self) -> str:
        return "{key}"
"""


def _oot_chip_ns(site: PluginSite, device_type: str = "ootchip", key: str = "ootchip") -> Any:
    """A real platform plugin ``ootchip`` (out of tree), selected by its variable."""
    body = _OOT_CHIP.format(name="ootchip", device_type=device_type, key=key)
    site.add_platform("ootchip", cls_body=body)
    site.monkeypatch.setenv(site.var, "ootchip")
    return site.ns


class PortedOot(CustomOp):  # the shape of SGLang's diffusion ops and vLLM's
    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        return x + 2

    def forward_oot(self, x: torch.Tensor) -> torch.Tensor:
        return x + 4


class KeyNamed(PortedOot):
    def forward_cpu(self, x: torch.Tensor) -> torch.Tensor:
        return x + 8

    def forward_my_device(self, x: torch.Tensor) -> torch.Tensor:
        return x + 16


@pytest.fixture
def oot_ops() -> Any:
    yield
    for cls in (PortedOot, KeyNamed):
        for key in ("ootchip", "my_device", "cpu"):
            CustomOp.unregister_oot_forward(cls, key)


def test_an_out_of_tree_platform_runs_forward_oot(site: PluginSite, oot_ops: None) -> None:
    """An op ported from SGLang or vLLM with ``forward_oot`` (what both run on any out-of-tree
    platform): it was never looked up, ``forward_native`` ran, nothing said."""
    ns = _oot_chip_ns(site)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = PortedOot(namespace=ns)
        assert op(torch.zeros(1)).item() == 4 and op.dispatch_choice == "forward_oot"
    CustomOp.register_oot_forward(PortedOot, fn=_oot, platform_key="ootchip")
    op = PortedOot(namespace=ns)  # a kernel for the platform's key still comes first
    assert op(torch.zeros(1)).item() == 100 and op.dispatch_choice == "oot:ootchip"


def test_forward_named_after_the_dispatch_key_runs(site: PluginSite, oot_ops: None) -> None:
    """The walkthrough's shape: a host-backed device (torch device type ``cpu``) whose kernels
    are keyed ``my_device``: an op's ``forward_my_device`` never ran, ``forward_cpu`` did."""
    ns = _oot_chip_ns(site, device_type="cpu", key="my_device")
    op = KeyNamed(namespace=ns)
    assert op(torch.zeros(1)).item() == 16 and op.dispatch_choice == "forward_my_device"
    CustomOp.register_oot_forward(KeyNamed, fn=_oot, platform_key="my_device")
    op = KeyNamed(namespace=ns)
    assert op(torch.zeros(1)).item() == 100 and op.dispatch_choice == "oot:my_device"
    without_own = PortedOot(namespace=ns)  # no forward_my_device, no forward_cpu: forward_oot
    assert without_own(torch.zeros(1)).item() == 4


def test_forward_oot_never_runs_on_a_built_in_platform(site: PluginSite, oot_ops: None) -> None:
    """Control: ``forward_oot`` is for out-of-tree platforms only, and says nothing on CPU."""
    site.pm.set_selection("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = PortedOot(namespace=site.ns)
        assert op(torch.zeros(1)).item() == 1 and op.dispatch_choice == "forward_native"


def test_a_method_named_after_the_device_name_warns(site: PluginSite) -> None:
    """``forward_ascend`` on a platform whose device_name is ``ascend`` and key ``npu``: never
    looked up, so the op ran ``forward_native`` while it looked ported."""
    _ascend(site)

    class Norm(CustomOp):
        def forward_native(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

        def forward_ascend(self, x: torch.Tensor) -> torch.Tensor:
            return x + 2

    with pytest.warns(CustomOpWarning) as record:
        op = Norm(namespace=site.ns)
        assert op(torch.zeros(1)).item() == 1
    text = str(record[0].message)
    assert len(record) == 1 and "Norm.forward_ascend" in text and "device_name 'ascend'" in text
    assert "forward_npu then forward_oot" in text and "runs forward_native" in text
    assert "Name the method forward_npu" in text and record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Norm(namespace=site.ns)(torch.zeros(1))  # once per op and method


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((int, _oot, "cpu"), "CustomOp subclass"),
        ((Toy, 3, "cpu"), "callable"),
        ((Toy, _oot, ""), "platform_key"),
    ],
)
def test_bad_registrations(args: tuple[Any, ...], fragment: str) -> None:
    with pytest.raises(CustomOpError, match=fragment):
        CustomOp.register_oot_forward(*args)


def test_choice_is_made_once_per_instance(cpu_ns: Any) -> None:
    op = Toy(namespace=cpu_ns)
    assert op(torch.zeros(1)).item() == 2
    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")
    assert op(torch.zeros(1)).item() == 2  # already dispatched
    assert Toy(namespace=cpu_ns)(torch.zeros(1)).item() == 100  # new instances see it
    op.reset_dispatch()
    assert op(torch.zeros(1)).item() == 100


def test_base_platform_uses_native(site: PluginSite) -> None:
    site.pm.set_selection("base")
    op = Toy(namespace=site.ns)
    assert op(torch.zeros(1)).item() == 1 and op.dispatch_choice == "forward_native"


def test_op_without_any_forward(cpu_ns: Any) -> None:
    class Empty(CustomOp):
        pass

    with pytest.raises(CustomOpError, match="forward_native"):
        Empty(namespace=cpu_ns)(torch.zeros(1))


def test_module_hooks_still_run(cpu_ns: Any) -> None:
    op = Toy(namespace=cpu_ns)
    seen: list[str] = []
    h1 = op.register_forward_pre_hook(lambda m, a: seen.append("pre"))
    h2 = op.register_forward_hook(lambda m, a, out: out * 10)
    assert op(torch.zeros(1)).item() == 20 and seen == ["pre"]
    h1.remove()
    h2.remove()
    assert op(torch.zeros(1)).item() == 2
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, out: out + 0.5)
    try:
        assert op(torch.zeros(1)).item() == 2.5
    finally:
        handle.remove()


def test_copies_dispatch_afresh(cpu_ns: Any) -> None:
    op = RMSNorm(8, namespace=cpu_ns)
    x = torch.randn(2, 8)
    expected = op(x)
    for clone in (copy.deepcopy(op), pickle.loads(pickle.dumps(op))):
        assert clone.dispatch_choice is None
        torch.testing.assert_close(clone(x), expected)


def test_data_parallel_replicas_dispatch_for_themselves(cpu_ns: Any) -> None:
    op = Toy(namespace=cpu_ns)
    op(torch.zeros(1))
    replica = op._replicate_for_data_parallel()
    assert replica.dispatch_choice is None and "_kernel" not in replica.__dict__
    assert replica(torch.zeros(1)).item() == 2
    assert replica.__dict__["_kernel"].__self__ is replica


def _reference_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.double()
    return (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_reference(cpu_ns: Any, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    op = RMSNorm(16, eps=1e-5, dtype=dtype, namespace=cpu_ns)
    with torch.no_grad():
        op.weight.copy_(torch.linspace(0.5, 1.5, 16))
    x = torch.randn(3, 16, dtype=dtype)
    out = op(x)
    assert out.dtype == dtype
    tol = 1e-5 if dtype is torch.float32 else 1e-2
    torch.testing.assert_close(out, _reference_rms(x, op.weight, 1e-5), atol=tol, rtol=tol)
    torch.testing.assert_close(op.forward_cuda(x), op.forward_native(x), atol=tol, rtol=tol)
    res = torch.randn(3, 16, dtype=dtype)
    normed, new_res = op(x, res)
    torch.testing.assert_close(new_res, (x.float() + res.float()).to(dtype))
    torch.testing.assert_close(normed, _reference_rms(new_res, op.weight, 1e-5), atol=tol, rtol=tol)


def test_seed_diffusion_plugin_registers_rmsnorm_kernel_in_init_backend(site: PluginSite) -> None:
    """The seed's MyDiffusionPlatform: dispatch key 'my_device', kernel registered at init."""
    pkg = site.mod("mydiff")
    body = """
from spawnkit.platforms import Platform, PlatformEnum

CALLS = []

def rms_norm_forward(self, x, residual=None):
    CALLS.append(tuple(x.shape))
    return self.forward_native(x, residual)

class MyDiffusionPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "my_device"
    device_type = "my_device"
    dispatch_key = "PrivateUse1"

    def get_dispatch_key_name(self) -> str:
        return "my_device"

    def init_backend(self) -> None:
        from spawnkit.platforms.custom_op import CustomOp
        from spawnkit.platforms.layers import RMSNorm
        CustomOp.register_oot_forward(RMSNorm, fn=rms_norm_forward, platform_key="my_device")
"""
    site.add(
        "my-platform-plugin",
        {"my_device": f"{pkg}:activate_diffusion"},
        {
            f"{pkg}.__init__": "def activate_diffusion():\n"
            f"    return '{pkg}.diffusion_platform.MyDiffusionPlatform'\n",
            f"{pkg}.diffusion_platform": body,
        },
        version="0.1.0",
    )
    site.monkeypatch.setenv(site.var, "my_device")
    try:
        op = RMSNorm(4, namespace=site.ns)  # built before init_backend ran
        x = torch.randn(2, 4)
        out = op(x)
        import sys

        assert sys.modules[f"{pkg}.diffusion_platform"].CALLS == [(2, 4)]
        assert op.dispatch_choice == "oot:my_device"
        torch.testing.assert_close(out, op.forward_native(x))
    finally:
        CustomOp.unregister_oot_forward(RMSNorm, "my_device")


_OPS = """
from spawnkit.platforms import CustomOp

class Norm(CustomOp):
    def forward_native(self, x):
        return x + 1

    def forward_cpu(self, x):
        return x + 2

class GemmaNorm(Norm):  # another op: keeps no kernel of Norm's
    pass
"""

_COUNTING = """
from PKG.ops import Norm

class CountingNorm(Norm):
    calls = 0

    def forward(self, *args, **kwargs):
        CountingNorm.calls += 1
        return super().forward(*args, **kwargs)
"""


def test_a_hook_on_an_ops_forward_runs_at_every_call(cpu_ns: Any, mods: Any, registry: Any) -> None:
    """The first call pinned the chosen kernel as the instance's ``forward``, which every later
    call ran directly: a profiler's AROUND hook on ``Norm.forward`` ran once per instance
    while the report said applied.  The same once the hook comes after the first call."""
    ops = mods.load("ops", _OPS)
    calls: list[float] = []

    def timed(original_fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1.0)
        return original_fn(*args, **kwargs)

    early = ops.Norm(namespace=cpu_ns)
    assert early(torch.zeros(1)).item() == 2  # dispatched before the hook exists
    registry.register(mods.name("ops.Norm.forward"), timed, "AROUND")
    registry.apply_hooks()
    op = ops.Norm(namespace=cpu_ns)
    assert [op(torch.zeros(1)).item() for _ in range(3)] == [2, 2, 2]
    assert early(torch.zeros(1)).item() == 2
    assert len(calls) == 4 and op.dispatch_choice == "forward_cpu"
    registry.unapply()
    assert op(torch.zeros(1)).item() == 2 and len(calls) == 4


def test_a_replaced_op_keeps_the_kernel_registered_for_the_original(
    cpu_ns: Any, mods: Any, registry: Any
) -> None:
    """A platform registers its kernel for ``Norm`` (before the hooks); a plugin REPLACEs
    ``Norm`` with a subclass: keyed by exact class, every instance of the replacement ran
    ``forward_native``/``forward_cpu`` instead, while the report said applied."""
    ops = mods.load("ops", _OPS)
    mods.write("counting", _COUNTING)
    CustomOp.register_oot_forward(ops.Norm, fn=_oot, platform_key="cpu")
    try:
        registry.register(mods.name("ops.Norm"), mods.name("counting") + ":CountingNorm", "REPLACE")
        registry.apply_hooks()
        op = ops.Norm(namespace=cpu_ns)
        assert type(op).__name__ == "CountingNorm" and op(torch.zeros(1)).item() == 100
        assert op.dispatch_choice == "oot:cpu" and type(op).calls == 1
        assert ops.GemmaNorm(namespace=cpu_ns)(torch.zeros(1)).item() == 2  # another op
        registry.unapply()
        made = sys.modules[mods.name("counting")].CountingNorm(namespace=cpu_ns)
        assert made(torch.zeros(1)).item() == 2  # no longer at Norm's home: another op
    finally:
        CustomOp.unregister_oot_forward(ops.Norm, "cpu")


class _Scale(torch.nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * 1.0


@pytest.mark.parametrize("reclass", ["register_parametrization", "weight_norm"])
def test_an_op_torch_reclasses_keeps_its_kernel(cpu_ns: Any, reclass: str) -> None:
    """torch's ``parametrize`` re-classes the module as ``ParametrizedRMSNorm`` (made in
    ``torch.nn.utils.parametrize``, adding only a property): keyed by exact class, it lost the
    platform's kernel and ran ``forward_native``."""
    from torch.nn.utils import parametrizations, parametrize

    CustomOp.register_oot_forward(RMSNorm, fn=_oot, platform_key="cpu")
    op = RMSNorm(4, namespace=cpu_ns)
    if reclass == "weight_norm":
        op = parametrizations.weight_norm(op, name="weight", dim=0)
    else:
        parametrize.register_parametrization(op, "weight", _Scale())
    assert type(op).__name__ == "ParametrizedRMSNorm"
    assert op(torch.zeros(1, 4)).tolist() == [[100.0] * 4] and op.dispatch_choice == "oot:cpu"


def test_a_class_at_no_home_without_a_forward_runs_its_parents_kernel(cpu_ns: Any) -> None:
    """The rule torch's classes meet, for any class made at run time: no forward of its own."""

    class Renamed(Toy):
        label = "same computation"

    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")
    op = Renamed(namespace=cpu_ns)
    assert op(torch.zeros(1)).item() == 100 and op.dispatch_choice == "oot:cpu"


def test_a_subclass_with_a_forward_of_its_own_stays_another_op(cpu_ns: Any) -> None:
    """Control: a local subclass (at no home either) that defines a forward is another op,
    and so is torch's re-classing of it; a subclass at its home is another op."""
    from torch.nn.utils import parametrize

    class Shifted(Toy):
        def forward_cpu(self, x: torch.Tensor) -> torch.Tensor:
            return x + 5

    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")
    op = Shifted(namespace=cpu_ns)
    assert op(torch.zeros(1)).item() == 5 and op.dispatch_choice == "forward_cpu"
    wrapped = Shifted(namespace=cpu_ns)
    wrapped.scale = torch.nn.Parameter(torch.ones(1))
    parametrize.register_parametrization(wrapped, "scale", _Scale())
    assert type(wrapped).__name__ == "ParametrizedShifted" and wrapped(torch.zeros(1)).item() == 5
    assert ToyChild(namespace=cpu_ns)(torch.zeros(1)).item() == 2  # at its home: another op


class _Graphs:
    """A ``torch.compile`` backend that records the size of each graph a call runs."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        kinds = ("call_function", "call_method", "call_module")
        size = sum(node.op in kinds for node in gm.graph.nodes)

        def run(*args: Any) -> Any:
            self.ran.append(size)
            return gm.forward(*args)

        return run


@pytest.mark.parametrize("fullgraph", [True, False])
def test_compiling_before_the_first_call_keeps_every_op_in_one_graph(
    cpu_ns: Any, fullgraph: bool
) -> None:
    """``torch.compile(model)`` before any eager call: each op chose its kernel inside dynamo's
    trace, whose platform initialization and registry locks it cannot trace: a graph break at
    every op, kept in the compiled code (two graphs a call, the ops run between them, unsaid),
    and ``fullgraph=True`` (vLLM's compile) failed with dynamo's "Unsupported context
    manager" inside spawnkit."""
    CustomOp.register_oot_forward(Toy, fn=_oot, platform_key="cpu")
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 4), Toy(namespace=cpu_ns), RMSNorm(4, namespace=cpu_ns),
        NativeOnly(namespace=cpu_ns), torch.nn.Linear(4, 4),
    )  # fmt: skip
    reference = copy.deepcopy(model)
    graphs = _Graphs()
    compiled = torch.compile(model, backend=graphs, fullgraph=fullgraph)
    x = torch.randn(2, 4)
    for _ in range(2):
        graphs.ran.clear()
        torch.testing.assert_close(compiled(x), reference(x))
        assert len(graphs.ran) == 1, graphs.ran
    choices = [op.dispatch_choice for op in model[1:4]]
    assert choices == ["oot:cpu", "forward_native", "forward_native"]
    torch.testing.assert_close(model(x), reference(x))  # eager calls afterwards choose alike


def test_a_hook_on_the_chosen_kernel_is_compiled_in(cpu_ns: Any, mods: Any, registry: Any) -> None:
    """Control: the kernel compiled in is the class's method as it is now, hooks included."""
    ops = mods.load("ops", _OPS)
    registry.register(mods.name("ops.Norm.forward_cpu"), lambda o, s, x: o(s, x) * 10, "AROUND")
    registry.apply_hooks()
    graphs = _Graphs()
    op = ops.Norm(namespace=cpu_ns)
    compiled = torch.compile(op, backend=graphs, fullgraph=True)
    assert compiled(torch.zeros(1)).item() == 20 and graphs.ran
    assert op.dispatch_choice == "forward_cpu"


def test_a_choice_made_while_compiling_still_warns_and_refuses(site: PluginSite) -> None:
    """Control: the ``CustomOpWarning`` of a choice made in the trace is issued; escalated, or
    an op with no forward, the call fails with spawnkit's text (dynamo wraps what a function
    it runs at trace time raises in its own error, naming the type)."""
    _ascend(site)

    class Norm(RMSNorm):
        pass

    class Empty(CustomOp):
        pass

    CustomOp.register_oot_forward(Norm, fn=_oot, platform_key="ascend")
    x = torch.ones(1, 4)
    with pytest.warns(CustomOpWarning, match="platform_key='npu'"):
        torch.compile(Norm(4, namespace=site.ns), backend="eager", fullgraph=True)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomOpWarning)

        class Other(RMSNorm):
            pass

        CustomOp.register_oot_forward(Other, fn=_oot, platform_key="ascend")
        with pytest.raises(Exception, match=r"CustomOpWarning: .* platform_key='npu'"):
            torch.compile(Other(4, namespace=site.ns), backend="eager")(x)
    with pytest.raises(Exception, match=r"CustomOpError: .* define forward_native"):
        torch.compile(Empty(namespace=site.ns), backend="eager")(x)
