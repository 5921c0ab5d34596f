"""Specs for launchers spawnkit does not start itself; `spawnkit launch --launcher torchrun|ray`.

The torchrun and Ray tests start the real launchers through the real CLI
(a ``spawnkit`` subprocess), with real plugin distributions on PYTHONPATH.
"""

from __future__ import annotations

import json
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from _scaleout_cli_support import (
    CLI_TIMEOUT_S,
    cli,
    make_env,
    write_app,
    write_payload,
)
from spawnkit import build_spec, write_launch_spec
from spawnkit.bootstrap._parent_death import RUN_ID_VAR
from spawnkit.errors import PlatformNotFoundError, SpecError
from spawnkit.spec.signing import generate_key, read_spec_file


# ------------------------------------------------------------------ build_spec
def test_build_spec_freezes_platform_plugins_and_rows_in_the_parent(site: Any) -> None:
    site.add_platform("skdev")
    plug = site.mod("plug")
    site.add(
        "skl-plug-dist",
        {"plug": f"{plug}:register"},
        {plug: "def register():\n    pass\n"},
        group=site.ns.config.plugin_group,
    )
    spec = build_spec("json:dumps", {"a": 1}, nprocs=3, namespace=site.ns)
    assert spec.platform == "skdev"
    assert spec.plugins == ("plug",)
    assert {row[0] for row in spec.entry_points or ()} == {"skdev", "plug"}
    assert spec.world_size == 3 and spec.rank == 0
    assert spec.payload is not None and spec.payload.materialize() == {"a": 1}
    assert spec.env[RUN_ID_VAR] == spec.run_id and spec.run_id
    assert spec.report_conn is None and spec.death_conn is None


def test_build_spec_refuses_a_bad_selection_before_any_rank_exists(site: Any) -> None:
    site.add_platform("skdev")
    with pytest.raises(PlatformNotFoundError, match="nosuchdev"):
        build_spec("json:dumps", namespace=site.ns, env={site.var: "nosuchdev"})


def test_build_spec_sends_an_unimportable_entry_by_value() -> None:
    spec = build_spec(lambda: 1)
    assert spec.entry == "" and spec.entry_payload is not None
    with pytest.raises(ValueError, match="module:function"):
        build_spec("no_colon")


def test_write_launch_spec_is_private_and_signed(tmp_path: Path) -> None:
    key = generate_key()
    path = tmp_path / "spec.bin"
    template = write_launch_spec(path, "json:dumps", [1, 2], key=key, nprocs=2)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = read_spec_file(path, key)
    assert back == template and back.world_size == 2
    with pytest.raises(SpecError, match="failed its signature check"):
        read_spec_file(path, generate_key())


# ----------------------------------------------------------- option checking
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--print-only"], "--print-only prints a torchrun command"),
        (["--address", "127.0.0.1:1"], "--address names a Ray cluster"),
        # before: an empty value was taken for none, and the option dropped unsaid
        (["--launcher", "torchrun", "--trace", ""], "--trace draws ranks this process starts"),
        (["--launcher", "ray", "--trace", ""], "--trace draws ranks this process starts"),
        (["--address", ""], "--address names a Ray cluster"),
        (["--launcher", "torchrun", "--start-method", "forkserver"], "torchrun starts its own"),
        (["--launcher", "ray", "--start-method", "forkserver"], "ray starts its own"),
        # before: the command ran --nproc-per-node 2, the --nprocs 4 dropped unsaid
        (
            ["--launcher", "torchrun", "--print-only", "--nprocs", "4", "--nproc-per-node", "2"],
            "--nprocs 4 and --nproc-per-node 2 both give the ranks on this node",
        ),
        # ENTRY first, then "--" (README's form): "unrecognized arguments" before, unread
        (["--", "--max-restarts", "1"], "arguments after -- are torchrun's (got --launcher local)"),
    ],
)
def test_launcher_options_that_do_not_fit_are_usage_errors(args: list[str], needle: str) -> None:
    from spawnkit.cli import main

    err = __import__("io").StringIO()
    code = main(["launch", "json:dumps", *args], stdout=err, stderr=err)
    assert code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Fix:" in lines[0], lines


# ------------------------------------------------------------------ torchrun
@pytest.mark.needs_torch
@pytest.mark.parametrize(
    "counts",
    [["--nprocs", "3"], ["--nproc-per-node", "3"], ["--nprocs", "3", "--nproc-per-node", "3"]],
)
def test_launch_torchrun_takes_the_rank_count_from_either_option(
    tmp_path: Path, counts: list[str]
) -> None:
    env = make_env(tmp_path, write_app(tmp_path))
    proc = cli(["json:dumps", "--launcher", "torchrun", "--print-only", *counts], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--nproc-per-node 3 " in proc.stdout, proc.stdout
    (folder,) = Path(env["TMPDIR"]).glob("spawnkit-torchrun-*")
    assert read_spec_file(folder / "spec.bin", (folder / "key").read_text()).world_size == 3


@pytest.mark.needs_torch
def test_torchruns_own_arguments_follow_dashes_after_the_entry_as_readme_writes_them(
    tmp_path: Path,
) -> None:
    """``spawnkit launch ENTRY --launcher torchrun ... -- --max-restarts 1`` (README's
    multi-node form) was a usage error, "unrecognized arguments: -- --max-restarts 1": argparse
    filled ENTRY and the torchrun arguments at once; only ENTRY last worked."""
    env = make_env(tmp_path, write_app(tmp_path))
    args = ["json:dumps", "--launcher", "torchrun", "--print-only", "--nprocs", "2"]
    proc = cli([*args, "--", "--max-restarts", "1"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--max-restarts 1" in proc.stdout, proc.stdout


@pytest.mark.needs_torch
def test_launch_torchrun_runs_two_ranks_and_removes_spec_and_key(tmp_path: Path) -> None:
    site = write_app(tmp_path)
    payload, out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    cmd = ["skl_app.entry:main", "--launcher", "torchrun", "--nprocs", "2"]
    proc = cli([*cmd, "--namespace", "skl", "--payload-file", str(payload)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 rank(s) finished under torchrun" in proc.stdout
    # each rank's result, as a local launch prints it
    assert "rank 0 returned: 'x (patched)'\nrank 1 returned: 'x (patched)'\n" in proc.stdout
    assert list(Path(env["TMPDIR"]).glob("spawnkit-results-*")) == []
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert all(r["greet"] == "x (patched)" and r["payload"] == "t1" for r in ranks)
    assert not any(r["key_visible"] for r in ranks)
    assert list(Path(env["TMPDIR"]).glob("spawnkit-torchrun-*")) == []


@pytest.mark.needs_torch
def test_launch_torchrun_reports_each_ranks_result_in_json(tmp_path: Path) -> None:
    """torchrun keeps no return values: `main()` returning 1 (a status, as `sys.exit(main())`
    scripts do) printed only "N rank(s) finished"; `sys.exit(0)` is None, as locally."""
    site = write_app(tmp_path)
    payload, _out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    args = ["skl_app.entry:exits", "--launcher", "torchrun", "--nprocs", "2", "--namespace", "skl"]
    proc = cli([*args, "--payload-file", str(payload), "--json", "-"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["ok"] is True and document["results"] == ["1", "None"]
    proc = cli([*args, "--payload-file", str(payload)], env, tmp_path)
    assert "rank 0 returned: 1\nrank 1 returned: None\n" in proc.stdout, proc.stderr
    assert list(Path(env["TMPDIR"]).glob("spawnkit-results-*")) == []


@pytest.mark.needs_torch
def test_launch_torchrun_print_only_writes_private_files_and_a_working_command(
    tmp_path: Path,
) -> None:
    site = write_app(tmp_path)
    payload, out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    cmd = ["skl_app.entry:main", "--launcher", "torchrun", "--nprocs", "2", "--print-only"]
    proc = cli([*cmd, "--namespace", "skl", "--payload-file", str(payload)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not list(out.iterdir())  # nothing was started
    (folder,) = Path(env["TMPDIR"]).glob("spawnkit-torchrun-*")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("key", "spec.bin"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert f"rm -r {folder}" in proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    ran = subprocess.run(
        ["bash", "-c", line],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads((out / "rank1.json").read_text())["greet"] == "x (patched)"


@pytest.mark.needs_torch
def test_launch_torchrun_failing_rank_gives_its_traceback_and_status(tmp_path: Path) -> None:
    site = write_app(tmp_path)
    payload, _out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    args = ["skl_app.entry:crash", "--launcher", "torchrun", "--nprocs", "2", "--namespace", "skl"]
    proc = cli([*args, "--payload-file", str(payload)], env, tmp_path)
    assert proc.returncode == 1
    assert "RuntimeError: skl entry blew up on purpose" in proc.stderr
    assert "spawnkit: FAILED: torchrun exited with status 1" in proc.stderr
    assert list(Path(env["TMPDIR"]).glob("spawnkit-torchrun-*")) == []


@pytest.mark.needs_torch
def test_launch_torchrun_timeout_stops_every_rank(tmp_path: Path) -> None:
    site = write_app(tmp_path)
    payload, out = write_payload(tmp_path)
    env = make_env(tmp_path, site)
    args = ["skl_app.entry:hang", "--launcher", "torchrun", "--nprocs", "2", "--namespace", "skl"]
    proc = cli([*args, "--payload-file", str(payload), "--timeout", "20"], env, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "BootstrapTimeoutError" in proc.stderr and "--timeout 20 s" in proc.stderr
    pids = [int((out / f"pid{r}").read_text()) for r in (0, 1)]
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(psutil.pid_exists(p) for p in pids)
    assert list(Path(env["TMPDIR"]).glob("spawnkit-torchrun-*")) == []


_ATTEMPTS_SRC = """
import os, time

def seeded(payload=None):
    return os.environ.get("PYTHONHASHSEED")

def stale(payload=None):
    attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
    if (rank, attempt) == ("0", "0"):
        return "r0-attempt0"
    if (rank, attempt) == ("1", "0"):
        time.sleep(2)  # rank 0 has written its result by now
        raise RuntimeError("rank 1 fails on attempt 0")
    if (rank, attempt) == ("0", "1"):
        raise RuntimeError("rank 0 fails on attempt 1")
    return f"r{rank}-attempt{attempt}"
"""


def _attempts_app(tmp_path: Path) -> dict[str, str]:
    from spawnkit.testing import write_distribution

    site = tmp_path / "site"
    write_distribution(site, "skl-attempts", "1.0", modules={"skl_attempts": _ATTEMPTS_SRC})
    return make_env(tmp_path, site)


@pytest.mark.needs_torch
def test_launch_torchrun_keeps_results_of_ranks_restarted_for_start_time_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank re-execs itself to apply env={"PYTHONHASHSEED": ...}; the new image lost the
    result folder, and --json said ok with results [null, null]."""
    env = _attempts_app(tmp_path)
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir(mode=0o700)
    key = generate_key()
    (spec_dir / "key").write_text(key)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # the entry is checked as it is written
    write_launch_spec(
        spec_dir / "spec.bin",
        "skl_attempts:seeded",
        key=key,
        nprocs=2,
        env={"PYTHONHASHSEED": "0"},
    )
    args = ["skl_attempts:seeded", "--launcher", "torchrun", "--nprocs", "2"]
    proc = cli([*args, "--spec-dir", str(spec_dir), "--json", "-"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"] == ["'0'", "'0'"]


@pytest.mark.needs_torch
def test_launch_torchrun_shows_no_result_of_an_earlier_attempt(tmp_path: Path) -> None:
    """Under --max-restarts, rank 0 returned on attempt 0 and failed on attempt 1: --json
    showed its attempt-0 result beside the failure table naming it."""
    env = _attempts_app(tmp_path)
    args = ["--launcher", "torchrun", "--nprocs", "2", "--json", "-", "skl_attempts:stale"]
    proc = cli([*args, "--", "--max-restarts", "1"], env, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "rank 0 fails on attempt 1" in proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert results[0] is None
    assert results[1] in (None, "'r1-attempt1'")  # stopped as rank 0 failed, or finished
    assert list(Path(env["TMPDIR"]).glob("spawnkit-results-*")) == []


def test_results_of_an_older_attempt_than_another_ranks_are_not_shown(tmp_path: Path) -> None:
    """A rank that did not start again (its number taken by another node) left its result."""
    from spawnkit.cli._torchrun import _read_results

    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "repr": "'old'", "attempt": 0}))
    (tmp_path / "rank1.json").write_text(json.dumps({"rank": 1, "repr": "'new'", "attempt": 1}))
    assert _read_results(tmp_path, 3) == [None, "'new'", None]
