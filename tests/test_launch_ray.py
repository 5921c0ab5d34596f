"""`spawnkit launch --launcher ray`: a local cluster the CLI starts, or a running one it joins."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest

from _scaleout_cli_support import cli, make_env, write_app, write_payload
from test_ray import ray_cluster  # noqa: F401  (module-scoped cluster fixture; skips without Ray)


@pytest.mark.slow
def test_launch_ray_starts_a_local_cluster_and_runs_two_ranks(tmp_path: Path) -> None:
    site = write_app(tmp_path)
    payload, out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    # Ray's unix socket paths are length-limited: a short temp dir of its own.
    ray_tmp = Path(subprocess.check_output(["mktemp", "-d", "/tmp/skr-XXXXXX"], text=True).strip())
    env["RAY_TMPDIR"] = str(ray_tmp)
    try:
        args = ["skl_app.entry:main", "--launcher", "ray", "--nprocs", "2", "--namespace", "skl"]
        proc = cli([*args, "--payload-file", str(payload), "--timeout", "150"], env, tmp_path)
    finally:
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 1 returned: 'x (patched)'" in proc.stdout
    assert "2 rank(s) finished on a local Ray cluster" in proc.stdout
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:  # the actors' worker processes went with the cluster
        assert not psutil.pid_exists(r["pid"]) or psutil.Process(r["pid"]).status() == "zombie"


def test_launch_ray_bad_address_is_a_typed_error(tmp_path: Path) -> None:
    site = write_app(tmp_path)
    env = make_env(tmp_path, site)
    # A port nothing listens on: bound and closed by us just now.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["skl_app.entry:main", "--launcher", "ray", "--address", f"127.0.0.1:{port}"]
    proc = cli([*args, "--namespace", "skl", "--timeout", "60"], env, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "LauncherUnavailableError" in proc.stderr and "nothing answers" in proc.stderr
    assert f"the Ray cluster at 127.0.0.1:{port}" in proc.stderr


@pytest.mark.slow
def test_launch_ray_joins_a_running_cluster_and_leaves_it_running(
    ray_cluster: Any,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    site = write_app(tmp_path)
    payload, out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    address = ray_cluster.get_runtime_context().gcs_address
    args = ["skl_app.entry:main", "--launcher", "ray", "--nprocs", "2", "--namespace", "skl"]
    proc = cli(
        [*args, "--address", address, "--payload-file", str(payload), "--timeout", "150"],
        env,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"2 rank(s) finished on the Ray cluster at {address}" in proc.stdout
    assert json.loads((out / "rank0.json").read_text())["greet"] == "x (patched)"
    assert ray_cluster.cluster_resources().get("CPU", 0) >= 2  # still up for its other users
