"""A Ray task or actor submitted from a bootstrapped worker runs without its plugins: said.

An engine's process whose hooks are applied that calls ``ray.init()`` and submits a task or
creates an actor (vLLM's Ray executor: its engine-core process creates its worker actors)
has that work run in a Ray worker process, a raylet's child that loads no plugin.  A real
launcher, a real installed plugin, a real spawned worker starting a real local Ray.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from _plugin_app import LAUNCH, App, louder_plugin, run_script, write_app
from _ray_support import file_lock

pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spawnkit-ray")]

_MAIN = """
if __name__ == "__main__":
    import sys
    print(launch("raywork:schedule", "spawn", nprocs=1, payload=sys.argv[1]))
"""

# Imports nothing of the engine at its top: Ray imports it in its worker to find a function,
# before that function can call bootstrap_here().
_RAYWORK = """
import os
import sys

import ray


def setup():  # the user's own worker_process_setup_hook: bootstraps each Ray worker
    import spawnkit
    from {pkg}.ns import NS

    spawnkit.bootstrap_here(NS)


@ray.remote(max_calls=1)
def engine_task():
    from {pkg}.target import word
    return word()


@ray.remote(max_calls=1)
def booting_task():
    import spawnkit
    from {pkg}.ns import NS

    spawnkit.bootstrap_here(NS)
    from {pkg}.target import word
    return word()


@ray.remote(max_calls=1)
def set_up_task():
    from {pkg}.target import word
    return word()


@ray.remote
class Tokenizer:
    def word(self):
        from {pkg}.target import word
        return word()


def _ray(**options):
    temp = os.environ["RAYTEST_TEMP"]
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, _temp_dir=temp,
             **options)


def schedule(how):
    from {pkg}.target import word
    from {tag}_other import load

    mine = word()
    if how == "setup":
        _ray(runtime_env={{"worker_process_setup_hook": "{pkg}.raywork.setup"}})
        try:
            return mine, ray.get(set_up_task.remote(), timeout=120)
        finally:
            ray.shutdown()
    _ray()
    try:
        got = {{"task": ray.get(engine_task.remote(), timeout=120)}}
        got["again"] = ray.get(engine_task.remote(), timeout=120)  # named once
        actor = Tokenizer.remote()
        got["actor"] = ray.get(actor.word.remote(), timeout=120)
        ray.kill(actor)
        got["other"] = ray.get(ray.remote(max_calls=1)(load).remote(), timeout=120)
        got["booting"] = ray.get(booting_task.remote(), timeout=120)
        return mine, got
    finally:
        ray.shutdown()
"""

_NS = """
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={tag!r}.upper())
"""

_TARGET = """
def word():
    return "hi"
"""

_OTHER = """
def load():  # a data-loading library's task: nothing of this package is hooked
    return "data"
"""


def _run(tmp_path: Path, how: str) -> tuple[App, Any, str]:
    modules = {
        "raywork": _RAYWORK, "ns": _NS, "target": _TARGET, "plugin": louder_plugin("target.word"),
    }  # fmt: skip
    app = write_app(tmp_path, "rayplain", LAUNCH + _MAIN, {"loud": "plugin:register"}, modules)
    site = app.script.parent / "site"
    (site / f"{app.tag}_other.py").write_text(_OTHER)
    # Ray's workers are the raylet's children: they find the site (and this spawnkit) here
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    temp = tempfile.mkdtemp(prefix="skrp", dir="/tmp")  # short: Ray's socket paths
    lock = Path(tempfile.gettempdir()) / "spawnkit-ray-plain-children.lock"
    try:
        with file_lock(lock, 600.0):
            proc = run_script(app.script, how, env={"PYTHONPATH": path, "RAYTEST_TEMP": temp})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [(mine, got)] = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert mine == "hi!", mine  # the hook runs in the worker itself
    return app, got, proc.stderr


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[App, Any, str]:
    """One worker, one local Ray: a task, an actor, another library's task, a task that
    bootstraps itself."""
    return _run(tmp_path_factory.mktemp("rayplain"), "submit")


def _lines(stderr: str, what: str) -> list[str]:
    return [line for line in stderr.splitlines() if "PlainChildWarning" in line and what in line]


def test_a_ray_task_of_engine_code_runs_unhooked_and_is_named_with_the_fix(submitted) -> None:  # type: ignore[no-untyped-def]
    app, got, stderr = submitted
    assert got["task"] == got["again"] == "hi"  # the Ray worker ran it without the hook
    lines = _lines(stderr, f"task of {app.pkg}.raywork.engine_task")
    assert len(lines) == 1, stderr  # once per function, not per call
    line = lines[0]
    assert re.search(r"raywork\.py:\d+: PlainChildWarning", line), line  # the user's line
    assert "(engine_task.remote())" in line
    assert f"plugins of namespace {app.tag!r} (loud)" in line, line
    assert "unless it bootstraps itself" in line
    assert f"spawnkit.ray.spawn_on_ray(entry, payload, nprocs=N, namespace={app.tag!r})" in line
    assert f"spawnkit.bootstrap_here(<namespace {app.tag!r}>) first in the remote function" in line
    assert "-W ignore::spawnkit.PlainChildWarning" in line


def test_a_ray_actor_of_engine_code_is_named(submitted) -> None:  # type: ignore[no-untyped-def]
    app, got, stderr = submitted
    assert got["actor"] == "hi"
    lines = _lines(stderr, f"actor of class {app.pkg}.raywork.Tokenizer")
    assert len(lines) == 1, stderr
    assert "(Tokenizer.remote())" in lines[0]
    assert "first in the actor class's __init__" in lines[0], lines[0]


def test_a_task_outside_the_hooked_packages_is_not_named(submitted) -> None:  # type: ignore[no-untyped-def]
    app, got, stderr = submitted
    assert got["other"] == "data"
    assert not _lines(stderr, f"{app.tag}_other"), stderr


def test_a_task_that_calls_bootstrap_here_first_is_hooked_and_not_named(submitted) -> None:  # type: ignore[no-untyped-def]
    """The fix the warning gives works in a Ray worker, and its code says it bootstraps."""
    _, got, stderr = submitted
    assert got["booting"] == "hi!"
    assert not _lines(stderr, "booting_task"), stderr
    assert len(_lines(stderr, "")) == 2, stderr  # the engine's task and actor only


def test_a_job_with_a_worker_process_setup_hook_is_not_named(tmp_path: Path) -> None:
    """The user bootstraps Ray's workers themselves (``runtime_env``'s setup hook)."""
    _, got, stderr = _run(tmp_path, "setup")
    assert got == "hi!"
    assert "PlainChildWarning" not in stderr, stderr
