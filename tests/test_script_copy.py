"""A hook target module that is also the launching script (``python -m pkg.serve``): the
hooks patch the module imported under its name, and the script's own copy of the file runs
without them.  Said per guard policy where spawnkit can see it: a worker whose entry came by
value from the script, and the engine's own process after ``bootstrap_here()``.

Before, both ran the unhooked copy without a word (the worker test's launcher printed
``['plain']``).  Real ``python -m`` launches of a real installed plugin, real workers.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from _plugin_app import App, louder_plugin, write_app

_PLUGIN = louder_plugin("serve.handle")

# Run as `python -m <pkg>.serve HOW METHOD`: the hook target's module is the script itself.
_SERVE = """
import sys
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={tag!r}.upper())

def handle():
    return "plain"

def work():
    return handle()

if __name__ == "__main__":
    how, method = sys.argv[1:]
    if how == "here":
        spawnkit.bootstrap_here(NS)
        print([handle()])
    elif how == "context":
        proc = spawnkit.get_context(method, namespace=NS).Process(target=work)
        proc.start()
        proc.join(120)
        print([proc.exitcode])
    else:
        entry = work if how == "callable" else "{pkg}.serve:work"
        with spawnkit.spawn_with_plugins(
            entry, namespace=NS, start_method=method, ready_timeout=120, join_timeout=120
        ) as group:
            print(group.results(timeout=120))
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    root = tmp_path_factory.mktemp("script_copy")
    return write_app(root, "scopy", "", {"louder": "plugin:register"},
                     {"plugin": _PLUGIN, "serve": _SERVE})  # fmt: skip


def _run(app: App, how: str, method: str, guard: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join([str(app.script.parent / "site"), *sys.path])
    if guard:
        env[f"{app.tag.upper()}_IMPORT_GUARD"] = guard
    return subprocess.run(
        [sys.executable, "-m", f"{app.pkg}.serve", how, method],
        capture_output=True, text=True, timeout=300, cwd=app.script.parent, env=env,
    )  # fmt: skip


def _result(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got: list[str] = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    return got


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_entry_sent_by_value_from_the_hooked_script_fails_the_worker(
    app: App, method: str
) -> None:
    proc = _run(app, "callable", method)
    assert proc.returncode != 0
    err = proc.stderr
    assert "ImportGuardError" in err and "resolve_entry" in err and "rank 0" in err, err
    assert f"hook target module '{app.pkg}.serve'" in err
    assert f"'{app.pkg}.serve.handle' (the script's copy is unhooked)" in err
    assert f"Fix: pass '{app.pkg}.serve:work'" in err
    assert f"`from {app.pkg}.serve import work` and pass that function" in err
    assert f"{app.tag.upper()}_IMPORT_GUARD=warn" in err


def test_under_warn_it_runs_and_says_the_consequence(app: App) -> None:
    proc = _run(app, "callable", "spawn", guard="warn")
    assert _result(proc) == ["plain"]  # the script's copy, as the warning says
    assert "ImportGuardWarning" in proc.stderr and "guard policy 'warn'" in proc.stderr


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_entry_by_name_runs_hooked_and_says_nothing(app: App, method: str) -> None:
    proc = _run(app, "name", method)
    assert _result(proc) == ["plain!"]
    assert "ImportGuard" not in proc.stderr, proc.stderr


def test_bootstrap_here_in_the_hooked_script_fails_naming_the_fix(app: App) -> None:
    proc = _run(app, "here", "-")
    assert proc.returncode != 0
    err = proc.stderr
    assert "ImportGuardError" in err and "bootstrap_here() fails" in err, err
    assert f"runs the file of hook target module '{app.pkg}.serve' as its __main__" in err
    assert f"'{app.pkg}.serve.handle' (the script's copy is unhooked)" in err
    assert f"import {app.pkg}.serve" in err  # start it through a module that imports it
    warned = _run(app, "here", "-", guard="warn")
    assert _result(warned) == ["plain"]
    assert "ImportGuardWarning" in warned.stderr


def test_a_context_process_whose_target_is_the_scripts_own_does_not_run_it(app: App) -> None:
    proc = _run(app, "context", "spawn")
    assert _result(proc) == [70]  # BOOTSTRAP_FAILED_EXIT: the target did not run
    assert "did not run its target" in proc.stderr and "ImportGuardError" in proc.stderr
    assert "the target 'work' comes from the launching script" in proc.stderr, proc.stderr
