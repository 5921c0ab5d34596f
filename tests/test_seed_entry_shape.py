"""The seed's worker shape, ``run_scheduler_process(local_rank, rank, server_args,
pipe_writer)``, launched as it is (``entry_args=``), and a dataclass payload built in the parent
by ``spawnkit launch --payload-factory``."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import uuid
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest

from spawnkit.errors import ConfigError
from spawnkit.launch import spawn_with_plugins
from spawnkit.namespace import Namespace

SPAWNKIT = str(Path(sys.executable).with_name("spawnkit"))

_ARGS = """
from dataclasses import dataclass

@dataclass
class ServerArgs:
    model_path: str
    base_gpu_id: int = 0

def make_server_args():
    return ServerArgs(model_path="tiny", base_gpu_id=4)
"""

_SCHEDULER = """
def run_scheduler_process(local_rank, rank, server_args, pipe_writer=None):
    gpu_id = server_args.base_gpu_id + local_rank
    if pipe_writer is not None:
        pipe_writer.send({"status": "ready", "rank": rank, "gpu_id": gpu_id})
    return {"rank": rank, "gpu_id": gpu_id, "model": server_args.model_path,
            "args_type": type(server_args).__qualname__}
"""


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    pkg = f"seedeng_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "server_args.py").write_text(_ARGS)
    (tmp_path / pkg / "scheduler.py").write_text(_SCHEDULER)
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg, tmp_path


def _ns() -> Namespace:
    tag = uuid.uuid4().hex[:8]
    return Namespace(f"seedeng{tag}", env_prefix=f"SEEDENG{tag.upper()}")


def test_seed_signature_with_a_per_rank_pipe_needs_no_adapter(engine: tuple[str, Path]) -> None:
    pkg, _ = engine
    import importlib

    server_args = importlib.import_module(f"{pkg}.server_args").make_server_args()
    pipes = [Pipe(duplex=False) for _ in range(2)]
    with spawn_with_plugins(
        f"{pkg}.scheduler:run_scheduler_process",
        server_args,
        nprocs=2,
        namespace=_ns(),
        rank_extra=lambda rank: {"pipe_writer": pipes[rank][1]},
        entry_args=("local_rank", "rank", "payload", "pipe_writer"),
        ready_timeout=120,
        join_timeout=120,
    ) as group:
        for _, writer in pipes:
            writer.close()
        results = group.results()
    assert [r["gpu_id"] for r in results] == [4, 5]
    assert all(r["args_type"] == "ServerArgs" and r["model"] == "tiny" for r in results)
    for rank, (reader, _) in enumerate(pipes):
        assert reader.poll(30)
        assert reader.recv() == {"status": "ready", "rank": rank, "gpu_id": 4 + rank}


def test_an_entry_arg_no_rank_provides_is_refused_in_the_parent(
    engine: tuple[str, Path],
) -> None:
    pkg, _ = engine
    with pytest.raises(ConfigError, match=r"entry_args names \['pipe_writer'\] for rank 0"):
        spawn_with_plugins(
            f"{pkg}.scheduler:run_scheduler_process",
            None,
            nprocs=1,
            namespace=_ns(),
            entry_args=("local_rank", "rank", "payload", "pipe_writer"),
        )


@pytest.mark.parametrize(
    "make",
    [iter, lambda names: map(str, names), lambda names: (n for n in names)],
    ids=["iter", "map", "generator"],
)
def test_entry_args_given_as_an_iterator_reach_the_entry_in_order(
    engine: tuple[str, Path], make: Any
) -> None:
    """An iterator was used up by the launcher's own check of its names, so every rank's
    entry was called with no argument (its defaults ran, exit 0)."""
    pkg, _ = engine
    import importlib

    server_args = importlib.import_module(f"{pkg}.server_args").make_server_args()
    names = ["local_rank", "rank", "payload"]
    with spawn_with_plugins(
        f"{pkg}.scheduler:run_scheduler_process",
        server_args,
        nprocs=2,
        namespace=_ns(),
        entry_args=make(names),
        ready_timeout=120,
        join_timeout=120,
    ) as group:
        results = group.results()
    assert [(r["rank"], r["gpu_id"], r["model"]) for r in results] == [
        (0, 4, "tiny"),
        (1, 5, "tiny"),
    ]


@pytest.mark.parametrize(
    "given", [set, frozenset, lambda names: 3], ids=["set", "frozenset", "int"]
)
def test_entry_args_without_an_order_is_refused_in_the_parent(
    engine: tuple[str, Path], given: Any
) -> None:
    """A set passed the entry's arguments in hash order (``rank`` as ``server_args``...)."""
    pkg, _ = engine
    with pytest.raises(
        ConfigError, match=r"entry_args=.*(a set|of type int, not a sequence)"
    ) as info:
        spawn_with_plugins(
            f"{pkg}.scheduler:run_scheduler_process",
            None,
            nprocs=1,
            namespace=_ns(),
            entry_args=given(["local_rank", "rank", "payload"]),
        )
    assert info.value.setting == "entry_args" and "No worker was started" in str(info.value)


def test_a_rank_extra_key_the_launcher_passes_itself_is_refused_in_the_parent(
    engine: tuple[str, Path],
) -> None:
    """``rank_extra=lambda r: {"rank": node * 8 + r}`` with ``entry_args=("rank", ...)``: the
    entry got the launcher's 0..nprocs-1 (a second node's ranks were the first node's), and
    nothing said so."""
    pkg, _ = engine
    with pytest.raises(ConfigError, match=r"rank_extra\(0\) returns rank=8, world_size=16") as info:
        spawn_with_plugins(
            f"{pkg}.scheduler:run_scheduler_process",
            None,
            nprocs=2,
            namespace=_ns(),
            rank_extra=lambda r: {"rank": 8 + r, "world_size": 16, "pipe_writer": None},
            entry_args=("local_rank", "rank", "world_size", "pipe_writer"),
        )
    assert info.value.setting == "rank_extra" and "'global_rank'" in str(info.value)


def test_cli_payload_factory_builds_a_dataclass_in_the_parent(engine: tuple[str, Path]) -> None:
    pkg, root = engine
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *sys.path])
    done = subprocess.run(
        [
            SPAWNKIT, "launch", f"{pkg}.scheduler:run_scheduler_process",
            "--payload-factory", f"{pkg}.server_args:make_server_args",
            "--entry-args", "local_rank", "rank", "payload",
            "--nprocs", "2", "--app-dir", str(root), "--timeout", "120", "--json", "-",
        ],
        capture_output=True, text=True, timeout=300, env=env, cwd=root,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout[done.stdout.index("{"):])
    assert document["ok"] is True
    results = [ast.literal_eval(r) for r in document["results"]]  # the JSON holds reprs
    assert [r["gpu_id"] for r in results] == [4, 5]
    assert {r["args_type"] for r in results} == {"ServerArgs"}


def test_cli_payload_factory_that_raises_is_one_line(engine: tuple[str, Path]) -> None:
    pkg, root = engine
    (root / pkg / "bad.py").write_text("def make():\n    raise ValueError('no model path')\n")
    done = subprocess.run(
        [SPAWNKIT, "launch", f"{pkg}.scheduler:run_scheduler_process",
         "--payload-factory", f"{pkg}.bad:make", "--app-dir", str(root)],
        capture_output=True, text=True, timeout=120, cwd=root,
    )
    assert done.returncode == 2
    assert "ValueError: no model path" in done.stderr
    assert done.stderr.count("\n") == 1, textwrap.shorten(done.stderr, 500)
