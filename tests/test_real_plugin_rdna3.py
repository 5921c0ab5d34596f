"""A published SGLang plugin, ``sglang-radeon-rdna3`` 0.2.0, on spawnkit, and the same six shims
written with spawnkit alone.

The real wheel is downloaded from the package index at test time (never
committed) and installed with pip into a throw-away venv.  The engine and its
dependencies are fakes this test writes, holding only the module paths the
six shims touch: ``sglang`` (which registers the ``sglang.srt`` namespace in
the ``spawnkit.namespaces`` group), ``vllm``, ``aiter`` and ``triton``.

The second plugin (``rdna3_spawnkit``, below) states the same shims as
registrations: ``provide_module`` for aiter's missing CDNA modules,
``optional=True`` for vllm, ``condition=`` for the HIP-only shims and
``on_import=True`` for the diffusion runtime; no ``.pth``, no ``sys.modules``
writes or scans, no ``try/except ImportError``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from spawnkit.testing import write_distribution

pytestmark = pytest.mark.slow

DIFF = "sglang.multimodal_gen"
H3_STAGES = f"{DIFF}.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.stages"
NUMERICS = "sglang.kernels.ops.diffusion.common.numerics"
LAYERNORM_TRITON = "sglang.kernels.ops.diffusion.norm.layernorm_modulate_triton"
QKNORM = "sglang.kernels.ops.diffusion.qknorm"
H3_DIT = f"{DIFF}.runtime.models.dits.minimax_h3"

SGLANG = {
    "sglang.__init__": "",
    "sglang.srt._spawnkit": (
        "from spawnkit import Namespace\nNS = Namespace('sglang.srt', 'SGLANG')\n"
    ),
    "sglang.srt.utils.common": (
        "import os\ndef is_hip():\n    return os.environ.get('FAKE_ROCM') == '1'\n"
    ),
    "sglang.srt.layers.quantization.__init__": (
        "from sglang.srt.layers.quantization.quark.schemes import quark_w4a4_mxfp4\n"
    ),
    "sglang.srt.layers.quantization.quark.schemes.quark_w4a4_mxfp4": (
        "from sglang.srt.utils.common import is_hip\n"
        "if is_hip():\n"
        "    from aiter.ops.triton.gemm.fused.fused_gemm_afp4wfp4_split_cat import (\n"
        "        fused_gemm_afp4wfp4_split_cat,\n"
        "    )\n"
    ),
    "sglang.srt.layers.layernorm": (
        "from vllm import _custom_ops as ops\n"
        "def forward_with_residual(out, x, residual_out, residual, weight, eps):\n"
        "    ops.fused_add_rms_norm(out, x, residual_out, residual, weight, eps)\n"
        "    return out, residual_out\n"
    ),
    f"{DIFF}.runtime.utils.hf_diffusers_utils": (
        "import glob, os\n"
        "def _has_local_weight_files(component_path):\n"
        "    return bool(glob.glob(os.path.join(component_path, '*.safetensors')))\n"
    ),
    f"{DIFF}.runtime.platforms.__init__": (
        "class RocmPlatform:\n"
        "    def is_cuda(self):\n        return False\n"
        "    def is_mps(self):\n        return False\n"
        "    def is_hip(self):\n        return True\n"
        "current_platform = RocmPlatform()\n"
    ),
    f"{H3_STAGES}.denoising": (
        f"from {DIFF}.runtime.platforms import current_platform\n"
        "def _run_full_loop():\n"
        "    if not (current_platform.is_cuda() or current_platform.is_mps()):\n"
        "        raise RuntimeError('MiniMax H3 full-loop denoise requires CUDA or MPS')\n"
        "    return 'denoised'\n"
    ),
    "sglang.kernels.ops.__init__": "",
    QKNORM: "def can_use_fused_inplace_qknorm(*args):\n    return True\n",
    H3_DIT: (
        f"from {QKNORM} import can_use_fused_inplace_qknorm\n"
        "def _apply_qk_norm(q, k, q_norm, k_norm, head_dim):\n"
        "    return 'cuda-jit'\n"
    ),
    NUMERICS: (
        "import triton\n"
        "@triton.jit\ndef mul_rn_f32(x, y):\n    return 'ptx'\n"
        "@triton.jit\ndef div_rn_f32(x, y):\n    return 'ptx'\n"
        "@triton.jit\ndef rsqrt_approx_f32(x):\n    return 'ptx'\n"
    ),
    LAYERNORM_TRITON: "import triton\n@triton.jit\ndef _rcp4(x):\n    return 'ptx'\n",
}

VLLM = {
    "vllm.__init__": "",
    "vllm._custom_ops": (
        "def fused_add_rms_norm(input, residual, weight, epsilon):\n"
        "    residual.v = input.v + residual.v\n"
        "    input.v = residual.v * weight\n"
    ),
}
AITER = {"aiter.__init__": "", "aiter.ops.__init__": "", "aiter.ops.triton.__init__": ""}
TRITON = {
    "triton.__init__": "def jit(fn):\n    return fn\n",
    "triton.language.__init__": (
        "def sqrt(x):\n    return x ** 0.5\ndef rsqrt(x):\n    return x ** -0.5\n"
    ),
}

#: The six shims with spawnkit alone: registrations only.
SPAWNKIT_PLUGIN = f'''
import glob
import os
import types

from spawnkit.hooks import HookType
from spawnkit.namespace import get_namespace

HIP = "sglang.srt.utils.common:is_hip"
STUBS = "aiter.ops.triton.gemm.fused.fused_gemm_afp4wfp4_split_cat"


def is_hip():
    from sglang.srt.utils.common import is_hip as engine_is_hip
    return engine_is_hip()


def _unsupported(*args, **kwargs):
    raise RuntimeError("MXFP4 fused GEMM is a CDNA-only aiter kernel, not on RDNA3")


def _cdna_stub(name):
    module = types.ModuleType(name)
    module.fused_gemm_afp4wfp4_split_cat = _unsupported
    return module


def fused_add_rms_norm(original, *args):
    if len(args) == 6:
        out, x, residual_out, residual, weight, eps = args
        out.copy_(x)
        residual_out.copy_(residual)
        return original(out, residual_out, weight, eps)
    return original(*args)


def nested_weights(found, component_path):
    return found or any(
        glob.glob(os.path.join(component_path, "*", "*.safetensors")) for _ in (0,)
    )


def hip_is_cuda_alike(original, self):
    return True if self.is_hip() else original(self)


def never(*args, **kwargs):
    return False


def qk_norm_reference(q, k, q_norm, k_norm, head_dim):
    return q_norm(q), k_norm(k)


def mul_rn_f32(x, y):
    return x * y


def div_rn_f32(x, y):
    return x / y


def rsqrt_approx_f32(x):
    return x ** -0.5


def rcp4(x):
    return 1.0 / x


def register():
    hooks = get_namespace("sglang.srt").hooks
    hooks.provide_module(STUBS, factory=_cdna_stub)
    hooks.register("vllm._custom_ops.fused_add_rms_norm", fused_add_rms_norm, HookType.AROUND,
                   optional=True, on_import=True)
    hooks.register("{DIFF}.runtime.utils.hf_diffusers_utils._has_local_weight_files",
                   nested_weights, HookType.AFTER, on_import=True)
    hooks.register("{DIFF}.runtime.platforms.RocmPlatform.is_cuda", hip_is_cuda_alike,
                   HookType.AROUND, on_import=True, condition=is_hip)
    for target, replacement in [
        ("{QKNORM}.can_use_fused_inplace_qknorm", never),
        ("{H3_DIT}._apply_qk_norm", qk_norm_reference),
        ("{NUMERICS}.mul_rn_f32", mul_rn_f32),
        ("{NUMERICS}.div_rn_f32", div_rn_f32),
        ("{NUMERICS}.rsqrt_approx_f32", rsqrt_approx_f32),
        ("{LAYERNORM_TRITON}._rcp4", rcp4),
    ]:
        hooks.register(target, replacement, HookType.REPLACE, on_import=True, condition=is_hip)
'''

#: Entries the workers run: each checks the shims its kind of worker needs.
CHECK = f'''
import os
import sys
import tempfile


class T:
    def __init__(self, v):
        self.v = v

    def copy_(self, other):
        self.v = other.v


def _imports():
    from spawnkit.bootstrap import guard
    out = {{}}
    for name in ("torch", "vllm", "{DIFF}"):
        site = guard.first_import(name)
        out[name] = [name in sys.modules, site.step if site else None]
    return out


def _state():
    from spawnkit.bootstrap import current_report
    report = current_report()
    return {{t: [[h["state"], h["reason"]] for h in hs] for t, hs in report.hooks.items()}}


def llm():
    imports = _imports()  # before the entry imports anything
    import sglang.srt.layers.quantization  # needs aiter's CDNA modules (shim 1)
    from aiter.ops.triton.gemm.fused.fused_gemm_afp4wfp4_split_cat import (
        fused_gemm_afp4wfp4_split_cat,
    )
    try:
        fused_gemm_afp4wfp4_split_cat()
        stub = "callable"
    except RuntimeError as exc:
        stub = "CDNA" in str(exc)
    result = {{"stub": stub, "imports": imports, "report": _state()}}
    try:
        from sglang.srt.layers import layernorm
    except ImportError as exc:
        result["layernorm"] = "vllm missing: " + str(exc)
    else:
        out, residual_out = layernorm.forward_with_residual(T(0), T(1.0), T(0), T(2.0), 2.0, 1e-6)
        result["layernorm"] = [out.v, residual_out.v]  # shim 2: the 6-argument form works
    result["diffusion_imported"] = "{DIFF}" in sys.modules
    return result


def diffusion():
    result = llm()
    from {DIFF}.runtime.utils import hf_diffusers_utils as hfu
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "video_vae"))
        open(os.path.join(d, "video_vae", "model.safetensors"), "w").close()
        result["nested"] = hfu._has_local_weight_files(d)  # shim 3
    from {H3_STAGES} import denoising
    result["denoise"] = denoising._run_full_loop()  # shim 4
    from {H3_DIT.rsplit(".", 1)[0]} import minimax_h3
    from {QKNORM.rsplit(".", 1)[0]} import qknorm
    result["jit"] = [  # shim 5
        qknorm.can_use_fused_inplace_qknorm(),
        minimax_h3.can_use_fused_inplace_qknorm(),
        minimax_h3._apply_qk_norm("q", "k", str.upper, str.upper, 64),
    ]
    from {NUMERICS.rsplit(".", 1)[0]} import numerics
    from {LAYERNORM_TRITON.rsplit(".", 1)[0]} import layernorm_modulate_triton as lmt
    result["ptx"] = [numerics.mul_rn_f32(2.0, 3.0), numerics.div_rn_f32(3.0, 2.0), lmt._rcp4(4.0)]
    result["state_after"] = {{
        r.target: r.state for r in __import__("spawnkit.namespace").namespace
        .get_namespace().hooks.status()
    }}
    return result


def launch():
    import json
    from spawnkit import spawn_with_plugins
    method, entry, out = sys.argv[1:4]
    with spawn_with_plugins(
        f"rdna3_check:{{entry}}",
        nprocs=2,
        namespace="sglang.srt",
        start_method=method,
        env={{"FAKE_ROCM": "1"}},
        ready_timeout=240,
        join_timeout=300,
    ) as group:
        results = group.results(timeout=300)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    launch()
'''


def _run(python: Path, *args: str, env: dict[str, str], timeout: float = 400) -> str:
    proc = subprocess.run(
        [str(python), *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rdna3")
    wheels = tmp / "wheels"
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels),
         "sglang-radeon-rdna3==0.2.0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if download.returncode != 0:
        pytest.skip(f"sglang-radeon-rdna3==0.2.0 is not downloadable here: {download.stderr}")
    (wheel,) = wheels.glob("*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)  # fmt: skip
    python = venv / "bin" / "python"
    purelib = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
             env=dict(os.environ)).strip()
    )  # fmt: skip
    project_site = sysconfig.get_paths()["purelib"]
    (purelib / "_spawnkit_project_site.pth").write_text(
        f"import site; site.addsitedir({project_site!r})\n"
    )
    dists = {
        "sglang": (SGLANG, {"spawnkit.namespaces": {"sglang.srt": "sglang.srt._spawnkit:NS"}}),
        "vllm": (VLLM, {}),
        "aiter": (AITER, {}),
        "triton": (TRITON, {}),
        "rdna3-spawnkit": (
            {"rdna3_spawnkit": SPAWNKIT_PLUGIN},
            {"sglang.srt.plugins": {"rdna3_spawnkit": "rdna3_spawnkit:register"}},
        ),
        "rdna3-check": ({"rdna3_check": CHECK}, {}),
    }
    dirs = {}
    for name, (modules, eps) in dists.items():
        dirs[name] = tmp / "dists" / name
        write_distribution(dirs[name], name, "0.1", entry_points=eps, modules=modules)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG", "PYTHONPATH"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", str(wheel), env=env)
    pth = purelib / "sglang_radeon_rdna3.pth"
    assert pth.exists(), "the wheel no longer ships its .pth"
    return {"python": python, "purelib": purelib, "dirs": dirs, "env": env, "tmp": tmp,
            "pth": pth, "pth_text": pth.read_text()}  # fmt: skip


def _launch(world: dict[str, Any], method: str, entry: str, *, plugin: str,
            vllm: bool = True, pth: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    dirs = [str(d) for name, d in world["dirs"].items() if vllm or name != "vllm"]
    (world["purelib"] / "_fake_dists.pth").write_text("\n".join(dirs) + "\n")
    if pth:
        world["pth"].write_text(world["pth_text"])
    elif world["pth"].exists():
        world["pth"].unlink()
    out = world["tmp"] / f"out_{method}_{entry}_{plugin}_{vllm}_{pth}.json"
    env = {**world["env"], "SGLANG_PLUGINS": plugin}
    check = str(world["dirs"]["rdna3-check"] / "rdna3_check.py")
    _run(world["python"], check, method, entry, str(out), env=env)
    results: list[dict[str, Any]] = json.loads(out.read_text())
    assert len(results) == 2
    return results


def _six_shims_in_effect(r: dict[str, Any], *, vllm: bool = True) -> None:
    assert r["stub"] is True  # 1: aiter's CDNA modules exist, and refuse to run
    if vllm:
        assert r["layernorm"] == [6.0, 3.0]  # 2: the legacy 6-argument call works
    assert r["nested"] is True  # 3
    assert r["denoise"] == "denoised"  # 4
    assert r["jit"] == [False, False, ["Q", "K"]]  # 5
    assert r["ptx"] == [6.0, 1.5, 0.25]  # 6


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("pth", [True, False])
def test_published_plugin_shims_take_effect_in_workers(
    world: dict[str, Any], method: str, pth: bool
) -> None:
    for r in _launch(world, method, "diffusion", plugin="radeon_rdna3", pth=pth):
        _six_shims_in_effect(r)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_same_shims_with_spawnkit_alone(world: dict[str, Any], method: str) -> None:
    for r in _launch(world, method, "diffusion", plugin="rdna3_spawnkit", pth=False):
        _six_shims_in_effect(r)
        assert set(r["state_after"].values()) <= {"applied", "provided"}, r["state_after"]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_llm_worker_without_vllm_reports_each_shim_and_imports_no_diffusion(
    world: dict[str, Any], method: str
) -> None:
    for r in _launch(world, method, "llm", plugin="rdna3_spawnkit", vllm=False, pth=False):
        assert r["stub"] is True and r["layernorm"].startswith("vllm missing")
        assert r["diffusion_imported"] is False  # on_import: never forced
        for name, (imported, step) in r["imports"].items():
            # (a failed lookup of the missing vllm is recorded too; an import is what counts)
            assert not (imported and step == "apply_hooks"), f"apply_hooks imported {name}"
            if name != "torch":
                assert imported is False, name
        report = r["report"]
        assert report["vllm._custom_ops.fused_add_rms_norm"] == [
            ["skipped", "module 'vllm' is not installed"]
        ]
        (provided,) = report["aiter.ops.triton.gemm.fused.fused_gemm_afp4wfp4_split_cat"]
        assert provided[0] == "provided" and "is not installed" in provided[1]
        diffusion = [h for t, hs in report.items() if DIFF in t or "kernels" in t for h in hs]
        assert len(diffusion) == 8
        assert all(h[0] == "pending" and "waiting for the first import" in h[1] for h in diffusion)


def test_llm_worker_with_vllm_applies_it_on_import_not_in_the_apply_stage(
    world: dict[str, Any],
) -> None:
    for r in _launch(world, "spawn", "llm", plugin="rdna3_spawnkit", pth=False):
        assert r["layernorm"] == [6.0, 3.0]
        assert r["imports"]["vllm"][0] is False  # not imported before the entry
        assert r["diffusion_imported"] is False
