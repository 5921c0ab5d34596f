"""On an NVIDIA machine: resolve the CUDA platform, check every device query against torch,
and prove that discovery created no CUDA context (the process can still fork a CUDA child).

Elsewhere it prints why it skipped and exits 0.  Exit 1 when any check fails.

    python benchmarks/gpu_check.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ.pop("SPAWNKIT_PLATFORM", None)
os.environ.pop("SPAWNKIT_USE_CPU_ENGINE", None)

_failures: list[str] = []


def check(label: str, ok: bool, detail: str = "") -> None:
    print(f"  [{'PASS' if ok else 'FAIL'}] {label}{': ' + detail if detail else ''}")
    if not ok:
        _failures.append(label)


def _fork_child_uses_cuda(timeout: float = 120.0) -> tuple[bool, str]:
    """A forked child can initialise CUDA only if this process never ran cuInit."""
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            import torch

            t = torch.ones(4, device="cuda")
            code = 0 if float(t.sum()) == 4.0 else 2
        except BaseException as exc:  # report, then leave without running parent cleanup
            print(f"    child: {type(exc).__name__}: {exc}", flush=True)
        os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return code == 0, f"child exit code {code}"
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False, f"child did not finish in {timeout:.0f}s (killed)"


def main() -> int:
    from spawnkit.platforms._probes import cuda_available

    probe = cuda_available()
    if not probe.available:
        print(f"gpu_check: skipped, no usable NVIDIA GPU here ({probe.reason})")
        return 0
    print(f"gpu_check: {probe.reason}")

    t0 = time.perf_counter()
    from spawnkit.platforms import current_platform, explain_platform

    resolve_s = time.perf_counter() - t0
    print(f"resolved in {resolve_s * 1e3:.1f} ms: {current_platform}")
    check("auto-discovery picks CudaPlatform", type(current_platform).__name__ == "CudaPlatform")
    check("resolution did not import torch", "torch" not in sys.modules)
    ok, detail = _fork_child_uses_cuda()
    check("no CUDA context/driver init by discovery (forked child uses CUDA)", ok, detail)

    import torch

    check("torch.cuda.is_initialized() is False after resolution", not torch.cuda.is_initialized())
    p = current_platform
    count = p.get_device_count()
    check(
        "get_device_count == torch.cuda.device_count()",
        count == torch.cuda.device_count(),
        str(count),
    )
    for i in range(count):
        name = p.get_device_name(i)
        check(f"[{i}] get_device_name", name == torch.cuda.get_device_name(i), name)
        mem = p.get_device_total_memory(i)
        check(
            f"[{i}] get_device_total_memory",
            mem == torch.cuda.get_device_properties(i).total_memory,
            f"{mem / 2**30:.1f} GiB",
        )
        cap = p.get_device_capability(i)
        check(
            f"[{i}] get_device_capability",
            cap == tuple(torch.cuda.get_device_capability(i)),
            str(cap),
        )
        p.set_device(i)
        check(f"[{i}] set_device", torch.cuda.current_device() == i)
        x = torch.empty(1 << 20, dtype=torch.uint8, device=f"cuda:{i}")
        used = p.get_current_memory_usage(i)
        check(
            f"[{i}] get_current_memory_usage",
            used == float(torch.cuda.memory_allocated(i)) and used >= x.numel(),
            f"{used:.0f} bytes",
        )
        del x
    check(
        "backend nccl",
        p.get_torch_distributed_backend_str() == "nccl" and torch.distributed.is_nccl_available(),
    )
    check("is_cuda / support_cuda_graph", p.is_cuda() and p.support_cuda_graph())

    from spawnkit.platforms import RMSNorm

    op = RMSNorm(4096, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(8, 4096, dtype=torch.bfloat16, device="cuda")
    out = op(x)
    check("RMSNorm dispatches to forward_cuda", op.dispatch_choice == "forward_cuda")
    err = (out.float() - op.forward_native(x).float()).abs().max().item()
    check("forward_cuda matches forward_native", err < 2e-2, f"max abs err {err:.2e}")

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNKIT_")}
    env["SPAWNKIT_PLATFORM"] = "cuda"
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from spawnkit.platforms import current_platform as p; "
            "print(type(p).__name__, 'torch' in sys.modules)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(
        "SPAWNKIT_PLATFORM=cuda selects CUDA without importing torch",
        child.stdout.split() == ["CudaPlatform", "False"],
        child.stdout.strip() or child.stderr,
    )
    print(explain_platform())
    print(f"gpu_check: {'FAILED: ' + ', '.join(_failures) if _failures else 'all checks passed'}")
    return 1 if _failures else 0


if __name__ == "__main__":
    sys.exit(main())
