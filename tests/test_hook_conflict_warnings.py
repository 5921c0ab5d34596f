"""Issue 21 item 4: hook conflicts are ``spawnkit.HookConflictWarning``s users can filter.

Real launcher processes started with ``-W`` and ``PYTHONWARNINGS``, each
spawning a real worker whose two installed plugins both REPLACE one function:
``ignore`` silences the conflict, ``error`` escalates it to a
``HookConflictError`` in stage ``apply_hooks`` (nothing patched), and so does
``<PREFIX>_HOOK_CONFLICTS=error``.  Python drops a ``-W`` entry naming
``spawnkit.X`` at start-up (spawnkit is not importable yet); importing spawnkit
installs it, in the launcher and in its workers.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _plugin_app import run_script, write_app

_LAUNCHER = """
import sys
sys.path.insert(0, {site!r})
import spawnkit
from spawnkit.errors import ChildRaisedError, ConfigError, ForkServerError, HookConflictError

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

if __name__ == "__main__":
    try:
        with spawnkit.spawn_with_plugins(
            "{pkg}.target:f",
            namespace=NS,
            start_method=sys.argv[1] if len(sys.argv) > 1 else "spawn",
            ready_timeout=120,
            join_timeout=120,
        ) as group:
            print("RESULT", group.results(timeout=120))
    except ChildRaisedError as exc:
        conflict = isinstance(exc.child_exception, HookConflictError)
        print("FAILED", "HookConflictError" if conflict else exc.exc_type, exc.stage, exc.rank)
        print(exc)
    except ConfigError as exc:
        print("REFUSED", exc.setting)
    except ForkServerError as exc:
        print("SERVER", type(exc.cause).__name__, exc.stage)
"""


@pytest.fixture
def app(tmp_path: Path) -> tuple[Path, str]:
    """A launcher script and a real distribution with two plugins REPLACEing ``target.f``."""
    script, tag, _ = write_app(
        tmp_path,
        "hc",
        _LAUNCHER,
        {"one": "one:register", "two": "two:register"},
        {"target": "def f():\n    return 'orig'\n", "one": _plugin("one"), "two": _plugin("two")},
    )
    return script, tag.upper()


def _plugin(name: str) -> str:
    return textwrap.dedent(
        f"""
        import spawnkit

        def replacement():
            return {name!r}

        def register():
            ns = spawnkit.get_namespace({{tag!r}})
            ns.hooks.register("{{pkg}}.target.f", replacement, spawnkit.HookType.REPLACE)
        """
    )


def _run(
    script: Path, *flags: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return run_script(script, *args, flags=flags, env=env)


def test_default_warns_with_the_category_and_runs(app: tuple[Path, str]) -> None:
    script, prefix = app
    proc = _run(script)
    assert "RESULT ['two']" in proc.stdout, proc.stdout + proc.stderr
    assert "HookConflictWarning: target" in proc.stderr and "2 REPLACE hooks" in proc.stderr
    assert f"{prefix}_HOOK_CONFLICTS=error" in proc.stderr  # the knob that refuses it


@pytest.mark.parametrize("how", ["-W", "PYTHONWARNINGS"])
def test_ignore_silences(app: tuple[Path, str], how: str) -> None:
    script, _ = app
    option = "ignore::spawnkit.HookConflictWarning"
    proc = _run(script, "-W", option) if how == "-W" else _run(script, env={how: option})
    assert "RESULT ['two']" in proc.stdout, proc.stdout + proc.stderr
    assert "HookConflictWarning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("how", ["-W", "PYTHONWARNINGS"])
def test_error_escalates_to_a_hook_conflict_error_in_the_worker(
    app: tuple[Path, str], how: str
) -> None:
    script, _ = app
    option = "error::spawnkit.HookConflictWarning"
    proc = _run(script, "-W", option) if how == "-W" else _run(script, env={how: option})
    assert "FAILED HookConflictError apply_hooks 0" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    assert "escalated to an error by the warnings filter" in proc.stdout


def test_the_warm_start_server_gets_the_launchers_w_option_too(app: tuple[Path, str]) -> None:
    """Warm start: the server applies hooks once, under the launcher's -W (its command line)."""
    script, _ = app
    proc = _run(script, "-W", "error::spawnkit.HookConflictWarning", args=("forkserver",))
    assert "SERVER StageError[HookConflictError] apply_hooks" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    proc = _run(script, "-W", "ignore::spawnkit.HookConflictWarning", args=("forkserver",))
    assert "RESULT ['two']" in proc.stdout, proc.stdout + proc.stderr
    assert "HookConflictWarning" not in proc.stderr


def test_the_namespace_variable_refuses_and_a_bad_value_is_refused_in_the_parent(
    app: tuple[Path, str],
) -> None:
    script, prefix = app
    proc = _run(script, env={f"{prefix}_HOOK_CONFLICTS": "error"})
    assert "FAILED HookConflictError apply_hooks 0" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    assert f"refused because {prefix}_HOOK_CONFLICTS=error" in proc.stdout
    assert "HookConflictWarning" not in proc.stderr
    proc = _run(script, env={f"{prefix}_HOOK_CONFLICTS": "eror"})
    assert f"REFUSED {prefix}_HOOK_CONFLICTS" in proc.stdout, proc.stdout + proc.stderr


def test_spawnkit_installs_the_w_options_python_dropped_in_this_process() -> None:
    code = (
        "import warnings, spawnkit\n"
        "try:\n"
        "    warnings.warn('x', spawnkit.HookConflictWarning)\n"
        "except spawnkit.HookConflictWarning:\n"
        "    print('escalated')\n"
        "warnings.warn('y', spawnkit.EnvVariableWarning)\n"
        "print('done')\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "error::spawnkit.HookConflictWarning",
            "-W",
            "ignore::spawnkit.EnvVariableWarning",
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.split() == ["escalated", "done"], proc.stdout + proc.stderr
    assert "EnvVariableWarning" not in proc.stderr
    # A later -W keeps its precedence over an earlier one that names spawnkit.
    proc = subprocess.run(
        [sys.executable, "-W", "error::spawnkit.HookConflictWarning", "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.split() == ["done"], proc.stdout + proc.stderr
