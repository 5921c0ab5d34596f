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


# The launching script itself bootstraps (README's pattern 3) and submits its own functions:
# Ray pickles them by value, and its worker does not re-run the script's bootstrap_here().
_SCRIPT = """
import os
import sys

sys.path.insert(0, {site!r})
import spawnkit

from {pkg}.ns import NS

spawnkit.bootstrap_here(NS)
import ray

from {pkg}.target import word as top_word


@ray.remote(max_calls=1)
def imports_inside():
    from {pkg}.target import word
    return word()


@ray.remote(max_calls=1)
def uses_global():
    return top_word()


def helper():
    from {pkg}.target import word
    return word()


@ray.remote(max_calls=1)
def through_helper():
    return helper()


@ray.remote(max_calls=1)
def plain():
    return os.path.basename("/a/none")


@ray.remote(max_calls=1)
def booting():
    import spawnkit
    from {pkg}.ns import NS

    spawnkit.bootstrap_here(NS)
    from {pkg}.target import word
    return word()


@ray.remote
class Words:
    def word(self):
        return top_word()


if __name__ == "__main__":
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             _temp_dir=os.environ["RAYTEST_TEMP"])
    try:
        tasks = {{
            "imports_inside": imports_inside, "uses_global": uses_global,
            "through_helper": through_helper, "plain": plain, "booting": booting,
        }}
        got = {{name: ray.get(task.remote(), timeout=120) for name, task in tasks.items()}}
        actor = Words.remote()
        got["actor"] = ray.get(actor.word.remote(), timeout=120)
        ray.kill(actor)
        print((top_word(), got))
    finally:
        ray.shutdown()
"""


def test_a_launching_scripts_own_ray_task_using_engine_code_is_named(tmp_path: Path) -> None:
    """A ``@ray.remote`` function or class of the script that bootstrapped (``__main__``) was
    never named, only the engine's packages' were: Ray pickled it by value and ran the
    engine's code it uses in a worker without the plugins, unsaid.  One that touches no
    hooked package, or bootstraps first, is not named."""
    modules = {"ns": _NS, "target": _TARGET, "plugin": louder_plugin("target.word")}
    app = write_app(tmp_path, "raymain", _SCRIPT, {"loud": "plugin:register"}, modules)
    path = os.pathsep.join(
        [str(app.script.parent / "site"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    temp = tempfile.mkdtemp(prefix="skrm", dir="/tmp")  # short: Ray's socket paths
    lock = Path(tempfile.gettempdir()) / "spawnkit-ray-plain-children.lock"
    try:
        with file_lock(lock, 600.0):
            proc = run_script(app.script, env={"PYTHONPATH": path, "RAYTEST_TEMP": temp})
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mine, got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert mine == "hi!" and got["booting"] == "hi!", (mine, got)  # hooked where it bootstraps
    assert got["plain"] == "none"
    named = {"imports_inside": "task of", "uses_global": "task of", "through_helper": "task of"}
    for function, kind in {**named, "Words": "actor of class"}.items():
        assert got.get(function, got["actor"]) == "hi", got  # the Ray worker had no hook
        lines = _lines(proc.stderr, f"{kind} __main__.{function} was submitted")
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"{app.script}:"), lines[0]  # the script's .remote() line
        assert f"it uses {app.pkg}.target, which this process hooks" in lines[0], lines[0]
        assert f"plugins of namespace {app.tag!r} (loud)" in lines[0]
    assert len(_lines(proc.stderr, "")) == 4, proc.stderr  # not plain(), not booting()


def _main_function(source: str, **names: Any) -> Any:
    """The last function ``source`` defines, as a script's: its module is ``__main__``."""
    scope: dict[str, Any] = {"__name__": "__main__", **names}
    exec(compile(source, "<script>", "exec"), scope)
    return [
        v for v in scope.values() if callable(v) and getattr(v, "__module__", "") == "__main__"
    ][-1]


@pytest.mark.parametrize(
    ("source", "uses"),
    [
        ("def f():\n    import eng.server\n", "eng.server"),
        ("def f():\n    from eng.target import word\n    return word()\n", "eng.target"),
        ("def f():\n    return word()\n", "eng.target"),  # a global of the engine's
        ("def f():\n    return eng_mod.x\n", "eng.mod"),  # a module global
        ("def g():\n    import eng.a\ndef f():\n    return g()\n", "eng.a"),  # by value too
        ("def f():\n    return len(os.sep)\n", ""),
        ("def f():\n    x = object()\n    return x.eng\n", ""),  # an attribute, not a package
        (
            "def f():\n    import spawnkit\n    spawnkit.bootstrap_here(NS)\n    import eng.a\n",
            "",
        ),
        (
            "def boot():\n    spawnkit.bootstrap_here(NS)\n"
            "def f():\n    boot()\n    import eng.a\n",
            "",
        ),
        ("class f:\n    def m(self):\n        return word()\n", "eng.target"),  # an actor
    ],
)
def test_what_a_scripts_remote_function_reaches(source: str, uses: str) -> None:
    """Read from the bytecode: imports, and the globals the worker must import to unpickle it
    (a ``__main__`` function it calls travels by value and is read too)."""
    import os as os_module
    import types

    from spawnkit.bootstrap import _ray_tasks

    word = types.FunctionType(compile("0", "<e>", "eval"), {"__name__": "eng.target"})
    word.__module__ = "eng.target"
    eng_mod = types.ModuleType("eng.mod")
    code = _main_function(source, word=word, eng_mod=eng_mod, os=os_module)
    assert _ray_tasks._by_value_uses(code, {"eng"}) == uses


def test_an_instance_global_of_the_engines_is_read_off_its_type() -> None:
    """The worker imports its class's module to unpickle it; a proxy is not asked."""
    import types

    from spawnkit.bootstrap import _ray_tasks

    config = type("Config", (), {"__module__": "eng.config"})()
    code = _main_function("def f():\n    return config.size\n", config=config)
    assert _ray_tasks._by_value_uses(code, {"eng"}) == "eng.config"
    assert _ray_tasks._module_of(types) == "types" and _ray_tasks._module_of(None) == ""
