"""``spawnkit launch --launcher torchrun`` across nodes: two agents on this machine form one
2-node job (node ranks 0 and 1, one rendezvous endpoint on 127.0.0.1), every rank runs the
one signed spec, and a failure on node 1 is reported by node 0's launcher."""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from _platform_dists import node_accelerator
from _scaleout_cli_support import SPAWNKIT, make_env
from spawnkit.testing import write_distribution

pytest.importorskip("torch.distributed.run")
pytestmark = pytest.mark.slow  # two torchrun agents and their ranks: ~20 s

_JOB = """
import json, os, time

def job(payload):
    from spawnkit.bootstrap import current_spec
    spec = current_spec()
    with open(os.path.join(payload["out"], f"rank{spec.rank}.json"), "w") as fh:
        json.dump({"rank": spec.rank, "world": spec.world_size, "run_id": spec.run_id,
                   "node": os.environ.get("GROUP_RANK")}, fh)
    if payload.get("fail") and spec.rank == 1:
        raise RuntimeError("rank 1 fails on node 1")
    if payload.get("fail"):
        time.sleep(90)  # node 0's rank waits for a peer that will never come
    return spec.rank
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(tmp_path: Path, fail: bool) -> tuple[list[str], dict[str, str], Path]:
    site = tmp_path / "site"
    write_distribution(site, "nodes-app", "1.0", modules={"nodes_app": _JOB})
    out = tmp_path / "out"
    out.mkdir()
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"out": str(out), "fail": fail}))
    common = [
        "nodes_app:job", "--launcher", "torchrun", "--payload-file", str(payload),
        "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", uuid.uuid4().hex[:8],
        "--spec-dir", str(tmp_path / "spec"), "--timeout", "150",
    ]
    return common, make_env(tmp_path, site), out


def _two_nodes(
    common: list[str],
    env: dict[str, str],
    cwd: Path,
    node1: dict[str, str] | None = None,
    writer: dict[str, str] | None = None,
) -> list[tuple[int, str]]:
    """Write the spec (as node 0 would), then run both nodes; ``node1``: node 1's own
    environment entries (its hardware, as a platform plugin reads it); ``writer``: those of
    the command that writes the spec."""
    written = subprocess.run([SPAWNKIT, "launch", *common, "--print-only"],
                             env={**env, **(writer or {})}, cwd=cwd, capture_output=True,
                             text=True, timeout=120)
    assert written.returncode == 0, written.stderr
    envs = (env, {**env, **(node1 or {})})
    procs = [
        subprocess.Popen([SPAWNKIT, "launch", *common, "--node-rank", str(rank)],
                         env=envs[rank], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    ended: list[tuple[int, str]] = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        ended.append((proc.returncode, err))
    return ended


def test_two_agents_form_one_job_from_one_signed_spec(tmp_path: Path) -> None:
    common, env, out = _job(tmp_path, fail=False)
    spec = tmp_path / "spec" / "spec.bin"
    (code0, err0), (code1, err1) = _two_nodes(common, env, tmp_path)
    assert code0 == 0, err0[-3000:]
    assert code1 == 0, err1[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world"] for r in ranks} == {2}
    assert [r["node"] for r in ranks] == ["0", "1"]  # node ranks as given
    assert len({r["run_id"] for r in ranks}) == 1  # the one spec, signed once
    assert oct(spec.parent.stat().st_mode & 0o777) == "0o700"


def test_a_failure_on_node_1_is_reported_by_node_0(tmp_path: Path) -> None:
    common, env, _ = _job(tmp_path, fail=True)
    (code0, err0), (code1, _err1) = _two_nodes(common, env, tmp_path)
    assert code1 != 0
    assert code0 == 1, err0[-3000:]
    assert "FAILED on node 1" in err0
    assert "rank 1" in err0 and "stage 'entry'" in err0
    assert "RuntimeError: rank 1 fails on node 1" in err0


_RETRIED = """
import os, time

def job(payload=None):
    attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
    if (rank, attempt) == ("1", "0"):
        raise RuntimeError("rank 1 fails on attempt 0")
    time.sleep(3)  # long enough for node 0's watcher to read the store
    return f"r{rank}-attempt{attempt}"
"""


def test_a_failure_torchrun_restarts_for_does_not_end_a_multi_node_job(tmp_path: Path) -> None:
    """With --max-restarts 1, node 0's watcher read attempt 0's failure from the job's store
    and stopped torchrun mid-restart ("the job cannot finish without rank 1"), exit 1."""
    site = tmp_path / "site"
    write_distribution(site, "retried-app", "1.0", modules={"retried_app": _RETRIED})
    args = [
        SPAWNKIT, "launch", "--launcher", "torchrun", "--nproc-per-node", "2", "--nnodes", "1",
        "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
        "--rdzv-id", uuid.uuid4().hex[:8], "--timeout", "150", "--json", "-",
        "retried_app:job", "--", "--max-restarts", "1",
    ]
    proc = subprocess.run(args, env=make_env(tmp_path, site), cwd=tmp_path,
                          capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FAILED on node" not in proc.stderr
    assert json.loads(proc.stdout)["results"] == ["'r0-attempt1'", "'r1-attempt1'"]




_PLATFORM_JOB = """
import os

def job(payload):
    from spawnkit.bootstrap import current_spec
    from spawnkit.platforms import current_platform
    rank = current_spec().rank
    with open(os.path.join(payload["out"], f"rank{rank}"), "w") as fh:
        fh.write(current_platform.device_name or "base")
"""


def _node_platforms(tmp_path: Path, writer: dict[str, str]) -> list[str]:
    """The platform each rank of a 2-node job ran, node 1 alone having the accelerator;
    ``writer``: the environment entries of the command that writes the spec (on node 0)."""
    site = tmp_path / "site"
    write_distribution(
        site, "nodes-fakeacc", "1.0",
        entry_points={"spawnkit.platforms": {"fakeacc": "nodes_fakeacc:activate"}},
        modules={
            "nodes_fakeacc.py": node_accelerator("nodes_fakeacc"),
            "nodes_platform_app.py": _PLATFORM_JOB,
        },
    )  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"out": str(out)}))
    env = make_env(tmp_path, site)
    for name in ("FAKEACC", "SPAWNKIT_PLATFORM", "SPAWNKIT_PLUGINS"):
        env.pop(name, None)
    common = [
        "nodes_platform_app:job", "--launcher", "torchrun", "--payload-file", str(payload),
        "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", uuid.uuid4().hex[:8],
        "--spec-dir", str(tmp_path / "spec"), "--timeout", "150",
    ]  # fmt: skip
    ended = _two_nodes(common, env, tmp_path, node1={"FAKEACC": "1"}, writer=writer)
    for code, err in ended:
        assert code == 0, err[-3000:]
    return [(out / f"rank{rank}").read_text() for rank in (0, 1)]


def test_each_node_runs_its_own_platform_unless_the_launcher_chose_one(tmp_path: Path) -> None:
    """The spec is written on node 0, whose detection finds no accelerator (``base``); node
    1 has one.  Before, the spec pinned node 0's detection: node 1's rank ran ``base``, exit
    0, nothing said, where a rank started there on its own runs ``fakeacc``."""
    (tmp_path / "detected").mkdir()
    assert _node_platforms(tmp_path / "detected", {}) == ["base", "fakeacc"]
    # SPAWNKIT_PLATFORM where the spec is written: the user's choice, run by every rank
    (tmp_path / "chosen").mkdir()
    chosen = _node_platforms(tmp_path / "chosen", {"SPAWNKIT_PLATFORM": "base"})
    assert chosen == ["base", "base"]


_KERNELS = """
import os

def register():  # the device's kernels: a general plugin of the platform's distribution
    os.environ["NODES_KERNELS"] = "loaded"
"""

_KERNELS_JOB = """
import os

def job(payload):
    from spawnkit.bootstrap import current_spec
    from spawnkit.platforms import current_platform
    rank = current_spec().rank
    with open(os.path.join(payload["out"], f"rank{rank}"), "w") as fh:
        fh.write(f"{current_platform.device_name or 'base'} {os.environ.get('NODES_KERNELS')}")
"""


def _kernel_nodes(tmp_path: Path, launcher_has_it: bool) -> tuple[list[tuple[int, str]], Path]:
    """A 2-node job whose platform distribution also ships its kernels as a general plugin;
    node 1 has the accelerator where the launcher (node 0, which writes the spec) has not,
    and the other way round."""
    site = tmp_path / "site"
    write_distribution(
        site, "nodes-kacc", "1.0",
        entry_points={"spawnkit.platforms": {"fakeacc": "nodes_kacc:activate"},
                      "spawnkit.plugins": {"kacc_kernels": "nodes_kacc_kernels:register"}},
        modules={
            "nodes_kacc.py": node_accelerator("nodes_kacc"),
            "nodes_kacc_kernels.py": _KERNELS,
            "nodes_kernels_app.py": _KERNELS_JOB,
        },
    )  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"out": str(out)}))
    env = make_env(tmp_path, site)
    for name in ("FAKEACC", "SPAWNKIT_PLATFORM", "SPAWNKIT_PLUGINS", "SPAWNKIT_LENIENT_PLUGINS"):
        env.pop(name, None)
    common = [
        "nodes_kernels_app:job", "--launcher", "torchrun", "--payload-file", str(payload),
        "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", uuid.uuid4().hex[:8],
        "--spec-dir", str(tmp_path / "spec"), "--timeout", "150",
    ]  # fmt: skip
    acc = {"FAKEACC": "1"}
    if launcher_has_it:  # node 0 and the spec's writer have it, node 1 not
        ended = _two_nodes(common, {**env, **acc}, tmp_path, node1={"FAKEACC": "0"}, writer=acc)
    else:
        ended = _two_nodes(common, env, tmp_path, node1=acc)
    return ended, out


def test_a_node_on_another_platform_than_the_launcher_s_is_told_of_its_plugins(
    tmp_path: Path,
) -> None:
    """The launcher only detected its platform, so each node decides its own; its plugin
    selection (the platform's kernels, ``kacc_kernels``) was made for its platform.  A node
    on another platform refused with the check for a user's own ``SPAWNKIT_PLUGINS`` ("the
    parent's selection (names=) selects 'kacc_kernels' ... leave the plugin out of
    SPAWNKIT_PLUGINS"), naming neither the node nor either platform: now a
    ``PluginDriftError`` that names them.  The other way round the node loads its own
    platform's kernels, as a rank started there alone would (not skipped)."""
    (tmp_path / "cpu-launcher").mkdir()
    ended, out = _kernel_nodes(tmp_path / "cpu-launcher", launcher_has_it=False)
    for code, err in ended:
        assert code == 0, err[-3000:]
    assert [(out / f"rank{r}").read_text() for r in (0, 1)] == ["base None", "fakeacc loaded"]

    (tmp_path / "acc-launcher").mkdir()
    ended, _ = _kernel_nodes(tmp_path / "acc-launcher", launcher_has_it=True)
    _, (code1, err1) = ended
    assert code1 != 0
    assert "PluginDriftError" in err1, err1[-3000:]
    said = err1[err1.index("PluginDriftError") :]
    assert "rank 1 on host" in said and "(node 1)" in said
    assert "runs platform 'base'" in said and "detected 'fakeacc'" in said
    assert "'kacc_kernels' (nodes-kacc 1.0)" in said
    assert "SPAWNKIT_PLATFORM" in said and "SPAWNKIT_LENIENT_PLUGINS=1" in said
    assert "names=" not in said
