"""Time to all-ready for 2 ranks: local spawn, Ray, torchrun; with and without spawnkit, one run.

"All-ready" is from the launching call until every rank has finished its
bootstrap and is about to call (or, for raw baselines, has started) the entry:

* local      ``spawn_with_plugins(...).wait_ready()``
* ray        ``spawnkit.ray.spawn_on_ray(...).wait_ready()`` on a local cluster
             (cluster start is timed separately and not included)
* ray-raw    two bare Ray actors (no spawnkit) in a placement group, until
             each answered a method call: Ray's own floor
* torchrun   ``torchrun --nproc-per-node 2 -m spawnkit.run --spec FILE`` until
             the last rank's entry wrote its timestamp
* torch-raw  ``torchrun --nproc-per-node 2 -m <module>`` whose module writes
             its timestamp at import: torchrun's own floor

Every spawnkit row loads the same plugin from a real distribution (one AROUND
hook) so the bootstrap does real work.  Usage::

    python benchmarks/scaleout_latency.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spawnkit.spec import NamespaceConfig, Payload, ProcessSpec
from spawnkit.spec.signing import generate_key, write_spec_file
from spawnkit.testing import write_distribution

NPROCS = 2
NS = NamespaceConfig.build("skbench", "SKBENCH")

APP = """
import json, os, time

def main(payload=None):
    from spawnkit.bootstrap import current_spec
    import skbench_app.target as target
    assert target.greet("x").endswith("(patched)")
    rank = current_spec().rank
    if payload and payload.get("out"):
        with open(os.path.join(payload["out"], f"ready{rank}"), "w") as fh:
            fh.write(repr(time.time()))
    return rank
"""
TARGET = "def greet(name):\n    return 'hello ' + name\n"
PLUGIN = """
from spawnkit.hooks import HookType

def _around(original, *args, **kwargs):
    return original(*args, **kwargs) + " (patched)"

def register():
    from spawnkit.namespace import get_namespace
    get_namespace("skbench").hooks.register("skbench_app.target.greet", _around, HookType.AROUND)
"""
RAW = """
import os, time
with open(os.path.join(os.environ["SKBENCH_OUT"], "ready" + os.environ["RANK"]), "w") as fh:
    fh.write(repr(time.time()))
"""


def _site(root: Path) -> Path:
    write_distribution(
        root, "skbench-app", "1.0", modules={"skbench_app.entry": APP, "skbench_app.target": TARGET}
    )
    write_distribution(
        root,
        "skbench-plugin",
        "1.0",
        entry_points={"skbench.plugins": {"patcher": "skbench_plugin:register"}},
        modules={"skbench_plugin": PLUGIN, "skbench_raw": RAW},
    )
    return root


def _child_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


# ------------------------------------------------------------------ runners
def run_local(root: Path) -> float:
    from spawnkit.launch.launcher import spawn_with_plugins

    t0 = time.perf_counter()
    with spawn_with_plugins(
        "skbench_app.entry:main", nprocs=NPROCS, namespace=NS, ready_timeout=120
    ) as group:
        group.wait_ready()
        elapsed = time.perf_counter() - t0
        group.join(60)
    return elapsed


def run_ray(root: Path) -> float:
    import spawnkit.scaleout.ray as skray

    t0 = time.perf_counter()
    with skray.spawn_on_ray(
        "skbench_app.entry:main",
        nprocs=NPROCS,
        namespace=NS,
        env={"PYTHONPATH": str(root)},
        ready_timeout=120,
        join_timeout=60,
    ) as group:
        group.wait_ready()
        elapsed = time.perf_counter() - t0
        group.results()
    return elapsed


class _Bare:
    def ping(self) -> int:
        return os.getpid()


def run_ray_raw(root: Path) -> float:
    import uuid

    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    t0 = time.perf_counter()
    pg = placement_group([{"CPU": 1.0}] * NPROCS)
    ray.get(pg.ready(), timeout=120)
    cls = ray.remote(_Bare)
    # A runtime env of its own, as spawnkit uses, so Ray starts fresh workers here too.
    env = {"env_vars": {"PYTHONPATH": str(root), "SKBENCH_RUN": uuid.uuid4().hex}}
    actors = [
        cls.options(
            num_cpus=1,
            runtime_env=env,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=i
            ),
        ).remote()
        for i in range(NPROCS)
    ]
    ray.get([a.ping.remote() for a in actors], timeout=120)
    elapsed = time.perf_counter() - t0
    for a in actors:
        ray.kill(a)
    remove_placement_group(pg)
    return elapsed


def _torchrun(args: list[str], env: dict[str, str], out: Path, tmp: Path) -> float:
    for old in out.glob("ready*"):
        old.unlink()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(NPROCS),
        "--monitor-interval",
        "0.1",
        "--log-dir",
        str(tempfile.mkdtemp(dir=tmp)),
        *args,
    ]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    stamps = [float((out / f"ready{r}").read_text()) for r in range(NPROCS)]
    return max(stamps) - t0


def make_torchrun(root: Path, tmp: Path) -> tuple[Callable[[Path], float], Callable[[Path], float]]:
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    key = generate_key()
    spec = ProcessSpec(
        entry="skbench_app.entry:main", namespace=NS, payload=Payload.capture({"out": str(out)})
    )
    spec_file = write_spec_file(spec, tmp / "spec.bin", key)
    env = _child_env(root)
    env["SPAWNKIT_SPEC_KEY"] = key
    raw_env = dict(env, SKBENCH_OUT=str(out))

    def spawnkit_run(_root: Path) -> float:
        return _torchrun(["-m", "spawnkit.run", "--spec", str(spec_file)], env, out, tmp)

    def raw_run(_root: Path) -> float:
        return _torchrun(["-m", "skbench_raw"], raw_env, out, tmp)

    return spawnkit_run, raw_run


def _settle(ray: Any, timeout: float = 30.0) -> None:
    """Wait (untimed) until the previous row's actors gave their CPUs back to the cluster."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) >= NPROCS:
            return
        time.sleep(0.05)
    raise RuntimeError(f"Ray CPUs were not released within {timeout}s: {ray.available_resources()}")


# -------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip", nargs="*", default=[], help="rows to skip (e.g. ray ray-raw)")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="skbench-"))
    root = _site(tmp / "site")
    sys.path.insert(0, str(root))  # local spawn children inherit the parent's sys.path
    rows: dict[str, Callable[[Path], float]] = {"local": run_local}
    notes: dict[str, str] = {}
    ray_mod: Any = None
    try:
        import ray as ray_mod

        t0 = time.perf_counter()
        ray_mod.init(
            address="local",
            num_cpus=NPROCS,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
            _temp_dir=tempfile.mkdtemp(prefix="skbr-", dir="/tmp"),
        )
        notes["ray cluster start"] = f"{time.perf_counter() - t0:.2f} s (not in the rows)"
        rows["ray"] = run_ray
        rows["ray-raw"] = run_ray_raw
    except Exception as exc:
        notes["ray"] = f"skipped: {type(exc).__name__}: {exc}"
    tr, tr_raw = make_torchrun(root, tmp)
    rows["torchrun"] = tr
    rows["torch-raw"] = tr_raw
    for name in args.skip:
        rows.pop(name, None)

    timings: dict[str, list[float]] = {name: [] for name in rows}
    try:
        for _ in range(args.repeat):  # interleaved, so drift hits every row alike
            for name, fn in rows.items():
                if name.startswith("ray"):
                    _settle(ray_mod)
                timings[name].append(fn(root))
    finally:
        if ray_mod is not None and ray_mod.is_initialized():
            ray_mod.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    base = statistics.median(timings["local"]) if timings.get("local") else None
    floors = {"ray": "ray-raw", "torchrun": "torch-raw"}
    print(f"time to all-ready, {NPROCS} ranks, {args.repeat} run(s) each (seconds)")
    print(f"{'launcher':<11}{'median':>9}{'min':>9}{'max':>9}{'vs local':>10}{'vs raw':>9}")
    result: dict[str, Any] = {"nprocs": NPROCS, "repeat": args.repeat, "rows": {}, "notes": notes}
    for name, values in timings.items():
        med = statistics.median(values)
        vs_local = f"{med / base:.2f}x" if base else "-"
        floor = floors.get(name)
        vs_raw = (
            f"{med / statistics.median(timings[floor]):.2f}x"
            if floor and timings.get(floor)
            else "-"
        )
        print(
            f"{name:<11}{med:>9.3f}{min(values):>9.3f}{max(values):>9.3f}{vs_local:>10}{vs_raw:>9}"
        )
        result["rows"][name] = {"median_s": med, "min_s": min(values), "all_s": values}
    for key, note in notes.items():
        print(f"note: {key}: {note}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
