"""``torchrun -m spawnkit.run --spec FILE``: real torchrun, real ranks, real error files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spawnkit.scaleout.errorfile import error_file_payload
from spawnkit.scaleout.torchrun import RankEnvError, rank_from_env, spec_for_rank
from spawnkit.spec import NamespaceConfig, Payload, ProcessSpec
from spawnkit.spec.signing import generate_key, write_spec_file
from spawnkit.testing import write_distribution

TORCHRUN_TIMEOUT_S = 120

ENTRY_SRC = """
import json, os

def main(payload):
    from spawnkit.bootstrap import current_report, current_spec
    import sktr_app.target as target

    spec = current_spec()
    report = current_report()
    out = {
        "rank": spec.rank,
        "local_rank": spec.local_rank,
        "world_size": spec.world_size,
        "env_rank": os.environ.get("RANK"),
        "greet": target.greet("x"),
        "payload_tag": payload["tag"],
        "report_rank": report.rank,
        "report_hooks": sorted(report.hooks),
        "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "from_spec": os.environ.get("SKTR_FROM_SPEC"),
        "key_visible": "SPAWNKIT_SPEC_KEY" in os.environ,
        "platform": report.platform.get("name"),
    }
    with open(os.path.join(payload["out"], f"rank{spec.rank}.json"), "w") as fh:
        json.dump(out, fh)
    return out

def crash(payload):
    raise RuntimeError("entry of rank blew up on purpose")

def start_env(payload):
    import sys
    from spawnkit.bootstrap import current_spec

    rank = current_spec().rank
    out = {
        "hash_randomization": sys.flags.hash_randomization,
        "hash_abc": hash("abc"),
        "seed": os.environ.get("PYTHONHASHSEED"),
        "marker": [k for k in os.environ if k.startswith("SPAWNKIT_RUN_RESTART")],
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "from_spec": os.environ.get("SKTR_FROM_SPEC"),
    }
    with open(os.path.join(payload["out"], f"rank{rank}.json"), "w") as fh:
        json.dump(out, fh)
"""

TARGET_SRC = """
def greet(name):
    return "hello " + name
"""

PLUGIN_SRC = """
from spawnkit.hooks import HookType

def _around(original, *args, **kwargs):
    return original(*args, **kwargs) + " (patched)"

def register():
    from spawnkit.namespace import get_namespace
    get_namespace("sktr").hooks.register("sktr_app.target.greet", _around, HookType.AROUND)

def register_broken():
    raise ValueError("sktr broken plugin refuses to register")
"""


def _namespace() -> NamespaceConfig:
    return NamespaceConfig.build("sktr", "SKTR")


def _write_app(root: Path, *, broken: bool = False) -> None:
    write_distribution(
        root,
        "sktr-app",
        "1.0",
        modules={"sktr_app.entry": ENTRY_SRC, "sktr_app.target": TARGET_SRC},
    )
    value = "sktr_plugin:register_broken" if broken else "sktr_plugin:register"
    write_distribution(
        root,
        "sktr-plugin",
        "2.0",
        entry_points={"sktr.plugins": {"patcher": value}},
        modules={"sktr_plugin": PLUGIN_SRC},
    )


def _spec(tmp_path: Path, entry: str = "sktr_app.entry:main") -> ProcessSpec:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return ProcessSpec(
        entry=entry,
        namespace=_namespace(),
        payload=Payload.capture({"tag": "t1", "out": str(out)}),
        # The never-copy names must not reach the ranks; the ordinary one must.
        env={"SKTR_FROM_SPEC": "yes", "CUDA_VISIBLE_DEVICES": "7", "RANK": "5"},
    )


def _env(root: Path, key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKTR_", "TORCHELASTIC_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["SPAWNKIT_SPEC_KEY"] = key
    env["OMP_NUM_THREADS"] = "1"
    return env


def _torchrun(
    spec_file: Path, env: dict[str, str], log_dir: Path
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--monitor-interval",
        "0.2",
        "--log-dir",
        str(log_dir),
        "-m",
        "spawnkit.run",
        "--spec",
        str(spec_file),
    ]
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT_S, check=False
    )


# ----------------------------------------------------------------- in-process units
def test_rank_from_env_reads_torchrun_variables() -> None:
    assert rank_from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == (3, 1, 4)
    assert rank_from_env({}) == (0, 0, 1)
    with pytest.raises(RankEnvError, match="not WORLD_SIZE"):
        rank_from_env({"RANK": "0", "LOCAL_RANK": "0"})
    with pytest.raises(RankEnvError, match="integers"):
        rank_from_env({"RANK": "a", "LOCAL_RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(RankEnvError, match="not a valid rank"):
        rank_from_env({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"})


def test_spec_for_rank_fills_ranks_and_filters_env(tmp_path: Path) -> None:
    spec = spec_for_rank(_spec(tmp_path), {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert (spec.rank, spec.local_rank, spec.world_size) == (1, 1, 2)
    assert spec.env == {"SKTR_FROM_SPEC": "yes"}


@pytest.mark.needs_torch
def test_error_file_is_what_torchelastic_parses(tmp_path: Path) -> None:
    """Parsed by torch's own ProcessFailure, the consumer torchrun's agent uses."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / "error.json"
    path.write_text(json.dumps(error_file_payload("ValueError", "bad", "Traceback: here\n")))
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(path))
    assert failure.message["message"] == "ValueError: bad"
    assert failure.message["extraInfo"]["py_callstack"] == "Traceback: here\n"
    assert failure.timestamp > 0


def test_single_rank_without_torchrun_writes_error_file(tmp_path: Path) -> None:
    """``python -m spawnkit.run`` alone is rank 0 of 1; a failing plugin fills the error file."""
    root = tmp_path / "site"
    _write_app(root, broken=True)
    key = generate_key()
    spec_file = write_spec_file(_spec(tmp_path), tmp_path / "spec.bin", key)
    env = _env(root, key)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
    proc = subprocess.run(
        [sys.executable, "-m", "spawnkit.run", "--spec", str(spec_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TORCHRUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((tmp_path / "err.json").read_text())
    info = doc["message"]["extraInfo"]
    assert "sktr broken plugin refuses to register" in doc["message"]["message"]
    assert "load_plugins" in doc["message"]["message"]
    assert "register_broken" in info["py_callstack"]  # the plugin's own frame
    assert info["spawnkit_stage"] == "load_plugins" and info["spawnkit_rank"] == "0"
    assert "register_broken" in proc.stderr


# --------------------------------------------------------------------- real torchrun
def _read_outputs(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads((tmp_path / "out" / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.needs_torch
def test_torchrun_two_ranks_bootstrap_and_run(tmp_path: Path) -> None:
    root = tmp_path / "site"
    _write_app(root)
    key = generate_key()
    spec_file = write_spec_file(_spec(tmp_path), tmp_path / "spec.bin", key)
    proc = _torchrun(spec_file, _env(root, key), tmp_path / "logs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outs = _read_outputs(tmp_path)
    for rank, out in enumerate(outs):
        assert out["rank"] == out["report_rank"] == rank
        assert out["env_rank"] == str(rank)
        assert out["local_rank"] == rank and out["world_size"] == 2
        assert out["greet"] == "hello x (patched)"  # the plugin's hook was applied
        assert out["report_hooks"] == ["sktr_app.target.greet"]
        assert out["payload_tag"] == "t1"
        assert out["from_spec"] == "yes"
        assert out["cvd"] is None  # never copied from the spec
        assert out["key_visible"] is False


@pytest.mark.needs_torch
def test_torchrun_refuses_tampered_spec(tmp_path: Path) -> None:
    root = tmp_path / "site"
    _write_app(root)
    key = generate_key()
    spec_file = write_spec_file(_spec(tmp_path), tmp_path / "spec.bin", key)
    data = bytearray(spec_file.read_bytes())
    data[-5] ^= 0x40
    spec_file.write_bytes(bytes(data))
    proc = _torchrun(spec_file, _env(root, key), tmp_path / "logs")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "SpecError[signature]" in text and "failed its signature check" in text
    assert "To enable traceback" not in text
    assert not (tmp_path / "out" / "rank0.json").exists()


@pytest.mark.needs_torch
def test_torchrun_failing_plugin_reaches_agent_table(tmp_path: Path) -> None:
    root = tmp_path / "site"
    _write_app(root, broken=True)
    key = generate_key()
    spec_file = write_spec_file(_spec(tmp_path), tmp_path / "spec.bin", key)
    proc = _torchrun(spec_file, _env(root, key), tmp_path / "logs")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # torchrun's ChildFailedError table carries the rank's traceback from our error file.
    assert "ChildFailedError" in text and "Root Cause" in text
    table = text.split("Root Cause", 1)[1]
    assert "error_file: <N/A>" not in table
    assert "sktr broken plugin refuses to register" in table
    assert "register_broken" in table  # the plugin's own frame
    assert "bootstrap stage 'load_plugins' failed" in table  # rank and stage lead it
    assert "To enable traceback" not in text


def test_spec_file_refuses_connections(tmp_path: Path) -> None:
    from multiprocessing import Pipe

    a, b = Pipe()
    try:
        with pytest.raises(ValueError, match="Connection"):
            write_spec_file(_spec(tmp_path).replace(death_conn=a), tmp_path / "s", generate_key())
    finally:
        a.close()
        b.close()


def test_missing_key_is_reported_to_error_file(tmp_path: Path) -> None:
    key = generate_key()
    spec_file = write_spec_file(_spec(tmp_path), tmp_path / "spec.bin", key)
    env = _env(tmp_path, key)
    del env["SPAWNKIT_SPEC_KEY"]
    env.update(RANK="1", LOCAL_RANK="0", WORLD_SIZE="2")
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
    proc = subprocess.run(
        [sys.executable, "-m", "spawnkit.run", "--spec", str(spec_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TORCHRUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 1
    doc = json.loads((tmp_path / "err.json").read_text())
    assert doc["message"]["extraInfo"]["spawnkit_stage"] == "read_spec"
    assert doc["message"]["extraInfo"]["spawnkit_rank"] == "1"
    assert "SpecError[signature]" in doc["message"]["message"]


def _rank_by_hand(spec_file: Path, env: dict[str, str], **ranks: str) -> Any:
    """``python -m spawnkit.run --spec FILE`` with torchrun's variables set by hand."""
    env = dict(env, **ranks)
    return subprocess.run(
        [sys.executable, "-m", "spawnkit.run", "--spec", str(spec_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TORCHRUN_TIMEOUT_S,
        check=False,
    )


def test_a_rank_of_a_job_of_another_size_than_the_spec_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_launch_spec(..., nprocs=4)`` run by a rank with ``WORLD_SIZE=2``: before, the
    rank said ``world_size 2``, exit 0, the spec's 4 dropped, nothing said."""
    from spawnkit import write_launch_spec

    root = tmp_path / "site"
    _write_app(root)
    key = generate_key()
    out = tmp_path / "out"
    out.mkdir()
    payload = {"tag": "t1", "out": str(out)}
    spec_file = tmp_path / "spec.bin"
    monkeypatch.syspath_prepend(str(root))  # the launcher finds the entry, as the ranks do
    entry, ns = "sktr_app.entry:main", _namespace()
    write_launch_spec(spec_file, entry, payload, key=key, nprocs=4, namespace=ns)
    env = _env(root, key)
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
    proc = _rank_by_hand(spec_file, env, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not list(out.iterdir())  # the entry never ran
    doc = json.loads((tmp_path / "err.json").read_text())
    assert doc["message"]["extraInfo"]["spawnkit_stage"] == "read_spec"
    text = doc["message"]["message"]
    assert text.startswith("spawnkit.errors.ConfigError"), text
    assert "written for 4 ranks" in text and "WORLD_SIZE=2" in text, text
    assert "nprocs=2" in text and "N x K = 4" in text, text
    # without torchrun's variables it would run as rank 0 of 1: the same refusal
    alone = {k: v for k, v in env.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    proc = _rank_by_hand(spec_file, alone)
    assert proc.returncode == 1 and "written for 4 ranks" in proc.stderr, proc.stderr
    assert "no torchrun variables" in proc.stderr, proc.stderr
    # the control: the job the spec was written for runs
    proc = _rank_by_hand(spec_file, env, RANK="3", LOCAL_RANK="1", WORLD_SIZE="4")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "rank3.json").read_text())["world_size"] == 4


def _write_versioned(root: Path, version: str | None) -> Path:
    """The app and, unless ``version`` is None, the plugin at ``version`` (its hook says which)."""
    write_distribution(
        root,
        "sktr-app",
        "1.0",
        modules={"sktr_app.entry": ENTRY_SRC, "sktr_app.target": TARGET_SRC},
    )
    if version is not None:
        write_distribution(
            root,
            "sktr-plugin",
            version,
            entry_points={"sktr.plugins": {"patcher": "sktr_plugin:register"}},
            modules={"sktr_plugin": PLUGIN_SRC.replace("(patched)", f"(patched by {version})")},
        )
    return root


def test_a_rank_whose_node_has_another_plugin_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec written where sktr-plugin 1.0 is installed, run by a rank whose node has 2.0
    (``spawnkit launch --spec-dir`` across nodes): before, the rank imported the plugin by
    module name and ran 2.0's hook, exit 0, nothing said; a node without it failed on
    "No module named ..., from sktr-plugin 1.0 ... Fix or upgrade sktr-plugin"."""
    from spawnkit import write_launch_spec

    launcher = _write_versioned(tmp_path / "v1", "1.0")
    key = generate_key()
    out = tmp_path / "out"
    out.mkdir()
    spec_file = tmp_path / "spec.bin"
    monkeypatch.syspath_prepend(str(launcher))
    payload = {"tag": "t1", "out": str(out)}
    write_launch_spec(spec_file, "sktr_app.entry:main", payload, key=key, namespace=_namespace())
    ranks = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "1"}
    for node_version, shown in (("2.0", "node 2.0"), (None, "node not installed")):
        env = _env(_write_versioned(tmp_path / f"node-{node_version}", node_version), key)
        env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
        proc = _rank_by_hand(spec_file, env, **ranks)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert not list(out.iterdir())  # no plugin loaded, the entry never ran
        doc = json.loads((tmp_path / "err.json").read_text())
        assert doc["message"]["extraInfo"]["spawnkit_stage"] == "plugin_check"
        text = doc["message"]["message"]
        assert text.startswith("spawnkit.errors.PluginDriftError"), text
        assert "rank 0 on node 1" in text and f"sktr-plugin: launcher 1.0, {shown}" in text
        assert "pip install 'sktr-plugin==1.0'" in text and "SKTR_ALLOW_PLUGIN_DRIFT=1" in text
    # allowed: it runs with its node's version, and says so
    env = _env(tmp_path / "node-2.0", key)
    proc = _rank_by_hand(spec_file, dict(env, SKTR_ALLOW_PLUGIN_DRIFT="1"), **ranks)
    assert proc.returncode == 0, proc.stderr
    assert "another plugin set than the launcher" in proc.stderr, proc.stderr
    assert json.loads((out / "rank0.json").read_text())["greet"] == "hello x (patched by 2.0)"
    # the control: a node with the launcher's version runs quietly
    (out / "rank0.json").unlink()
    proc = _rank_by_hand(spec_file, _env(tmp_path / "v1", key), **ranks)
    assert proc.returncode == 0, proc.stderr
    assert "plugin set" not in proc.stderr, proc.stderr
    assert json.loads((out / "rank0.json").read_text())["greet"] == "hello x (patched by 1.0)"


def test_a_rank_whose_own_environment_selects_otherwise_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_launch_spec(...)`` with no plugin selection (the plugin ``patcher`` selected)
    and ``SKTR_PLATFORM=base`` chosen, then ``SKTR_PLUGINS='' torchrun -m spawnkit.run ...``
    (or ``SKTR_PLATFORM=cpu``): the spec pins the launcher's selection, so before, the rank
    loaded ``patcher`` on ``base`` all the same, exit 0, the variable doing nothing.  A
    platform the launcher only detected is left to the node, whose variable then decides."""
    from spawnkit import write_launch_spec

    root = _write_versioned(tmp_path / "site", "1.0")
    key = generate_key()
    out = tmp_path / "out"
    out.mkdir()
    spec_file = tmp_path / "spec.bin"
    monkeypatch.syspath_prepend(str(root))
    payload = {"tag": "t1", "out": str(out)}
    detected = tmp_path / "detected.bin"
    write_launch_spec(detected, "sktr_app.entry:main", payload, key=key, namespace=_namespace())
    monkeypatch.setenv("SKTR_PLATFORM", "base")  # the launcher's choice
    write_launch_spec(spec_file, "sktr_app.entry:main", payload, key=key, namespace=_namespace())
    monkeypatch.delenv("SKTR_PLATFORM")
    env = _env(root, key)
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
    ranks = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    for var, value, kind, said in (
        ("SKTR_PLUGINS", "", "PluginDriftError", "(selecting no plugin), but the launcher "
         "selected patcher for every rank"),
        ("SKTR_PLATFORM", "cpu", "ConfigError", "but the launcher pinned platform 'base'"),
    ):  # fmt: skip
        proc = _rank_by_hand(spec_file, dict(env, **{var: value}), **ranks)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert not list(out.iterdir())  # the entry never ran
        doc = json.loads((tmp_path / "err.json").read_text())
        assert doc["message"]["extraInfo"]["spawnkit_stage"] == "plugin_check"
        text = doc["message"]["message"]
        assert text.startswith(f"spawnkit.errors.{kind}"), text
        assert f"{var}={value!r} in its own environment" in text and said in text, text
        assert "does nothing" in text and "unset it in this node's environment" in text, text
    allowed = dict(env, SKTR_PLUGINS="", SKTR_ALLOW_PLUGIN_DRIFT="1")
    proc = _rank_by_hand(spec_file, allowed, **ranks)
    assert proc.returncode == 0 and "allows this" in proc.stderr, proc.stderr
    assert json.loads((out / "rank0.json").read_text())["greet"] == "hello x (patched by 1.0)"
    # the controls: the same selection (however spelt) and platform, or the launcher's own
    # choice carried in the spec, run quietly
    same = dict(env, SKTR_PLUGINS=" patcher,", SKTR_PLATFORM="base")
    proc = _rank_by_hand(spec_file, same, **ranks)
    assert proc.returncode == 0 and "own environment" not in proc.stderr, proc.stderr
    write_launch_spec(
        spec_file, "sktr_app.entry:main", payload, key=key, namespace=_namespace(),
        env={"SKTR_PLUGINS": "patcher"},
    )  # fmt: skip
    proc = _rank_by_hand(spec_file, dict(env, SKTR_PLUGINS=""), **ranks)
    assert proc.returncode == 0 and "own environment" not in proc.stderr, proc.stderr
    # a platform the launcher detected, not chose: this node's variable is followed
    (out / "rank0.json").unlink()
    proc = _rank_by_hand(detected, dict(env, SKTR_PLATFORM="cpu"), **ranks)
    assert proc.returncode == 0 and "own environment" not in proc.stderr, proc.stderr
    assert json.loads((out / "rank0.json").read_text())["platform"] == "cpu"


def test_spec_for_rank_holds_a_spec_to_its_rank_count(tmp_path: Path) -> None:
    from spawnkit.errors import ConfigError

    four = _spec(tmp_path).replace(world_size=4)
    with pytest.raises(ConfigError, match="written for 4 ranks") as caught:
        spec_for_rank(four, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert caught.value.setting == "nprocs"
    assert spec_for_rank(four, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}).world_size == 4
    # one rank is ProcessSpec's default: a spec built by hand for a job of any size
    assert spec_for_rank(_spec(tmp_path), {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "3"})


@pytest.mark.needs_torch
def test_torchrun_with_fewer_ranks_than_the_spec_fails_every_rank(tmp_path: Path) -> None:
    root = tmp_path / "site"
    _write_app(root)
    key = generate_key()
    spec_file = write_spec_file(_spec(tmp_path).replace(world_size=4), tmp_path / "spec.bin", key)
    proc = _torchrun(spec_file, _env(root, key), tmp_path / "logs")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert not list((tmp_path / "out").iterdir())
    assert "written for 4 ranks" in proc.stderr and "WORLD_SIZE=2" in proc.stderr, proc.stderr


DEMO_PLUGIN_SRC = """
import json, os

def _record(original, local_rank, rank, server_args, pipe_writer):
    result = original(local_rank, rank, server_args, pipe_writer)
    path = os.path.join(os.environ["SKTR_DEMO_OUT"], f"demo{rank}.json")
    with open(path, "w") as fh:
        json.dump({"rank": rank, "local_rank": local_rank, "result": result}, fh, default=str)
    return result

def register():
    from spawnkit.demo.namespace import demo_namespace
    from spawnkit.hooks import HookType
    demo_namespace().hooks.register(
        "spawnkit.demo.scheduler.run_scheduler_process", _record, HookType.AROUND
    )
"""


@pytest.mark.needs_torch
def test_torchrun_runs_the_demo_entry(tmp_path: Path) -> None:
    """The demo engine's real entry, two ranks, a plugin from a real distribution."""
    from spawnkit.demo import ServerArgs
    from spawnkit.demo.namespace import demo_namespace

    root = tmp_path / "site"
    write_distribution(
        root,
        "sktr-demo-recorder",
        "0.3",
        entry_points={"spawnkit.demo.plugins": {"sktr_recorder": "sktr_demo_rec:register"}},
        modules={"sktr_demo_rec": DEMO_PLUGIN_SRC},
    )
    out = tmp_path / "out"
    out.mkdir()
    spec = ProcessSpec(
        entry="spawnkit.demo.entry:scheduler_entry",
        namespace=demo_namespace().config,
        payload=Payload.capture(ServerArgs(num_requests=8, dp_size=2)),
        env={"SKTR_DEMO_OUT": str(out)},
    )
    key = generate_key()
    spec_file = write_spec_file(spec, tmp_path / "spec.bin", key)
    proc = _torchrun(spec_file, _env(root, key), tmp_path / "logs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(2):
        doc = json.loads((out / f"demo{rank}.json").read_text())
        assert doc["rank"] == rank and doc["local_rank"] == rank
        assert doc["result"]["rank"] == rank and doc["result"]["tokens"] > 0


def test_never_copy_list_covers_devices_ranks_and_launcher_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from spawnkit.scaleout.env import NEVER_COPY_ENV, split_env

    assert {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "RANK", "LOCAL_RANK"} <= NEVER_COPY_ENV
    with caplog.at_level("WARNING", logger="spawnkit.scaleout"):
        kept, dropped = split_env(
            {"A": "1", "CUDA_VISIBLE_DEVICES": "0", "TORCHELASTIC_ERROR_FILE": "/x"},
            {"A": "2", "WORLD_SIZE": "8", "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "k"},
            context="test group",
        )
    assert kept == {"A": "2"}  # later sources win
    assert dropped == sorted(
        [
            "CUDA_VISIBLE_DEVICES",
            "TORCHELASTIC_ERROR_FILE",
            "WORLD_SIZE",
            "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR",
        ]
    )
    assert "test group" in caplog.text and "CUDA_VISIBLE_DEVICES" in caplog.text
    with pytest.raises(TypeError, match="str to str"):
        split_env({"A": 1})  # type: ignore[dict-item]


def test_key_in_the_spec_env_does_not_reach_the_entry(tmp_path: Path) -> None:
    """The signing key stays out of the rank's environment even if the spec's env names it."""
    root = tmp_path / "site"
    _write_app(root)
    key = generate_key()
    spec = _spec(tmp_path)
    spec = spec.replace(env=dict(spec.env, SPAWNKIT_SPEC_KEY=key))
    spec_file = write_spec_file(spec, tmp_path / "spec.bin", key)
    env = _env(root, key)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "spawnkit.run", "--spec", str(spec_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TORCHRUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "out" / "rank0.json").read_text())
    assert out["from_spec"] == "yes" and out["key_visible"] is False


@pytest.mark.needs_torch
def test_env_read_at_start_takes_effect_in_a_torchrun_rank(tmp_path: Path) -> None:
    """``env={"PYTHONHASHSEED": "0"}`` showed in a rank's ``os.environ`` while its hashes
    stayed random: it was set after the interpreter had started.  The rank is exec'd again
    with it (same pid: torchrun's own child), once."""
    root = tmp_path / "site"
    _write_app(root)
    key = generate_key()
    spec = _spec(tmp_path, "sktr_app.entry:start_env")
    spec = spec.replace(env=dict(spec.env, PYTHONHASHSEED="0"))
    spec_file = write_spec_file(spec, tmp_path / "spec.bin", key)
    env = _env(root, key)
    env.pop("PYTHONHASHSEED", None)
    proc = _torchrun(spec_file, env, tmp_path / "logs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = subprocess.run(
        [sys.executable, "-c", "print(hash('abc'))"],
        env={**env, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout.strip()  # fmt: skip
    outs = _read_outputs(tmp_path)
    assert len(outs) == 2
    for out in outs:
        assert out["seed"] == "0" and out["hash_randomization"] == 0
        assert str(out["hash_abc"]) == expected
        assert out["marker"] == []  # taken out of the environment after the restart
        assert out["from_spec"] == "yes"
    assert outs[0]["ppid"] == outs[1]["ppid"] != 1  # both still the agent's children


def test_env_read_at_start_is_refused_where_the_rank_cannot_restart(tmp_path: Path) -> None:
    """``main()`` called from another program cannot exec itself again: it fails in stage
    read_spec naming the variable, never runs with it silently not in effect."""
    key = generate_key()
    spec = _spec(tmp_path).replace(env={"MALLOC_ARENA_MAX": "2"})
    spec_file = write_spec_file(spec, tmp_path / "spec.bin", key)
    script = (
        "import sys\n"
        "from spawnkit.scaleout.torchrun import main\n"
        "sys.exit(main(['--spec', sys.argv[1]]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.pop("MALLOC_ARENA_MAX", None)
    env["SPAWNKIT_SPEC_KEY"] = key
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "error.json")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(spec_file)], env=env, capture_output=True, text=True,
        timeout=TORCHRUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "failed in 'read_spec'" in proc.stderr and "MALLOC_ARENA_MAX" in proc.stderr
    assert "not started as `python -m spawnkit.run`" in proc.stderr
    assert "Export them in the environment torchrun is started with" in proc.stderr
