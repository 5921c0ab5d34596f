"""A Python child a bootstrapped worker starts through subprocess runs without its plugins: said.

An engine's worker that relaunches a server or router as ``[sys.executable, "-m",
"eng.server"]`` (or a script of the engine's) gives that child a fresh interpreter with no
plugin and no hook, where the hook runs in the worker.  Real launchers, a real installed
plugin, real workers and real grandchildren.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, louder_plugin, run_script, warned, write_app

_MAIN = """
if __name__ == "__main__":
    import sys
    print(launch("engine:schedule", sys.argv[2], nprocs=1, payload=sys.argv[1]))
"""

_ENGINE = """
import asyncio
import os
import subprocess
import sys

from {pkg}.target import word

_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
_HERE = os.path.dirname(os.path.abspath(__file__))
_HERE_CODE = (
    "import spawnkit; spawnkit.bootstrap_here(spawnkit.Namespace({tag!r}, "
    "env_prefix={tag!r}.upper())); from {pkg}.target import word; print(word())"
)


def _argv(how):
    python = sys.executable
    return {{
        "m": [python, "-m", "{pkg}.child"],
        "nofds": [python, "-m", "{pkg}.child"],  # close_fds=False: subprocess's posix_spawn
        "flags": [python, "-u", "-X", "dev", "-m", "{pkg}.child"],
        "script": [python, os.path.join(_HERE, "child.py")],
        "here": [python, "-m", "{pkg}.child_here"],
        "outside": [python, "-m", "json.tool", os.path.join(_HERE, "data.json")],
        "code": [python, "-c", "from {pkg}.target import word; print(word())"],
        "code-main": [python, "-c", "import sys, {pkg}.child_main as c; c.main(sys.argv[1])", "x"],
        "code-here": [python, "-c", _HERE_CODE],
        "code-boots": [python, "-c", "import {pkg}.child_here"],  # its module bootstraps
        "code-def": [python, "-c", "def f():\\n    import {pkg}.child\\nprint('hi')"],
        "code-other": [python, "-c", "import json; print(json.dumps('hi'))"],
        "other": ["cat", os.path.join(_HERE, "data.json")],
    }}[how]


def _os_started(how, argv):
    # the child's stdout: started by os.posix_spawn(p), or forked and exec'd (os.exec*)
    r, w = os.pipe()
    python = argv[0]
    if how.startswith("posix_spawn"):
        spawn = getattr(os, how)
        pid = spawn(python, argv, _ENV, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    else:
        pid = os.fork()
        if pid == 0:  # the child: said (never raised) here, then the exec
            try:
                os.dup2(w, 1)
                if how == "execv":
                    os.environ["PYTHONPATH"] = _ENV["PYTHONPATH"]
                    os.execv(python, argv)
                elif how == "execlp":
                    os.execlpe(python, *argv, _ENV)
                os.execve(python, argv, _ENV)
            finally:
                os._exit(127)  # the exec failed: no copy of the worker may run on
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


async def _started(argv):
    child = await asyncio.create_subprocess_exec(*argv, env=_ENV, stdout=subprocess.PIPE)
    out, _ = await child.communicate()
    return out.decode()


def schedule(how):
    if how == "chain":  # what the stand-in calls on: subprocess's own, not the warm server's
        init = subprocess.Popen.__init__.__wrapped__
        return word(), init.__module__ + "." + init.__qualname__
    if how == "async":
        return word(), asyncio.run(_started(_argv("m"))).strip()
    if how.partition(":")[0] in ("posix_spawn", "posix_spawnp", "execv", "execve", "execlp"):
        call, _, child = how.partition(":")
        outs = [_os_started(call, _argv(child or "m")) for _ in range(2)]
        return word(), outs[0].strip()
    outs = [subprocess.run(_argv(how), env=_ENV, capture_output=True, text=True, timeout=120,
                           close_fds=how != "nofds")
            for _ in range(2)]  # the second start of the same module is not named again
    return word(), outs[0].stdout.strip() or outs[0].stderr[-500:]
"""

_TARGET = """
def word():
    return "hi"
"""

_CHILD = """
from {pkg}.target import word

print(word())
"""

_CHILD_MAIN = """
def main(arg):
    from {pkg}.target import word

    print(word())
"""

_CHILD_HERE = """
import spawnkit

spawnkit.bootstrap_here(spawnkit.Namespace({tag!r}, env_prefix={tag!r}.upper()))

from {pkg}.target import word

print(word())
"""


@pytest.fixture
def app(tmp_path):  # type: ignore[no-untyped-def]
    modules = {
        "engine": _ENGINE,
        "target": _TARGET,
        "child": _CHILD,
        "child_here": _CHILD_HERE,
        "child_main": _CHILD_MAIN,
        "plugin": louder_plugin("target.word"),
    }
    app = write_app(tmp_path, "pychild", LAUNCH + _MAIN, {"loud": "plugin:register"}, modules)
    (tmp_path / "site" / app.pkg / "data.json").write_text('{"a": 1}')
    return app


@pytest.mark.parametrize(
    ("how", "worker_start"),
    [
        ("m", "spawn"),
        ("m", "forkserver"),
        ("flags", "spawn"),
        ("script", "spawn"),
        ("nofds", "spawn"),
    ],
)
def test_a_python_child_running_the_engines_module_is_named_with_the_fix(  # type: ignore[no-untyped-def]
    app, how: str, worker_start: str
) -> None:
    proc = run_script(app.script, how, worker_start)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The hook runs in the worker and not in its Python child: before, with nothing said.
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr  # two starts of it, named once
    line = lines[0]
    assert "was started through subprocess" in line, line
    assert line.startswith(str(app.script.parent / "site" / app.pkg / "engine.py")), line
    if how == "script":
        assert f"script {app.script.parent / 'site' / app.pkg / 'child.py'}" in line
        assert f"({app.pkg}.child, package {app.pkg!r}" in line, line
    else:
        assert f"module {app.pkg}.child (package {app.pkg!r}" in line, line
    assert f"plugins of namespace {app.tag!r} (loud)" in line
    assert f"spawnkit.bootstrap_here(<namespace {app.tag!r}>) first in that module" in line
    assert f"spawnkit.get_context('spawn', namespace={app.tag!r})" in line
    assert "-W ignore::spawnkit.PlainChildWarning" in line


@pytest.mark.parametrize(("how", "module"), [("code", "target"), ("code-main", "child_main")])
def test_a_python_child_whose_c_code_imports_the_engines_module_is_named(  # type: ignore[no-untyped-def]
    app, how: str, module: str
) -> None:
    """``[sys.executable, "-c", "import eng.server; eng.server.main()"]``: a top-level import
    of the engine's hooked package runs its code in the child without the plugins; ``-c`` code
    was never read, so nothing was said."""
    proc = run_script(app.script, how, "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout  # no hook
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1, proc.stderr  # two starts of it, named once
    line = lines[0]
    assert line.startswith(str(app.script.parent / "site" / app.pkg / "engine.py")), line
    assert f"code importing {app.pkg}.{module} (package {app.pkg!r}" in line, line
    assert f"spawnkit.bootstrap_here(<namespace {app.tag!r}>) first in that code" in line
    assert f"spawnkit.get_context('spawn', namespace={app.tag!r})" in line


def test_an_asyncio_subprocess_is_named_at_the_line_that_started_it(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, "async", "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    lines = warned(proc, "PlainChildWarning")
    assert len(lines) == 1 and f"module {app.pkg}.child " in lines[0], proc.stderr
    assert lines[0].startswith(str(app.script.parent / "site" / app.pkg / "engine.py")), lines


@pytest.mark.parametrize(
    ("how", "call"),
    [
        ("posix_spawn", "os.posix_spawn"),
        ("posix_spawnp:script", "os.posix_spawnp"),
        ("execv", "os.execv"),  # forked first: said in the child, before its exec
        ("execlp:code", "os.execve"),  # execlpe -> execvpe -> execve
    ],
)
def test_a_python_child_started_through_os_is_named_too(  # type: ignore[no-untyped-def]
    app, how: str, call: str
) -> None:
    """``os.posix_spawn([sys.executable, "-m", "eng.child"])``, or a fork that execs it
    (``os.execv``): the child ran the engine's module with no plugin and no hook, unsaid,
    since only ``subprocess.Popen`` was looked at."""
    proc = run_script(app.script, how, "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout  # no hook
    lines = warned(proc, "PlainChildWarning")
    # two starts of it, named once; a forked child's exec in that child, which tells no one
    assert len(lines) == (2 if how.startswith("exec") else 1), proc.stderr
    line = lines[0]
    assert line.startswith(str(app.script.parent / "site" / app.pkg / "engine.py")), line
    assert f"was started through {call}" in line, line
    assert f"package {app.pkg!r}, which this process hooks" in line, line
    assert f"plugins of namespace {app.tag!r} (loud)" in line
    assert f"spawnkit.bootstrap_here(<namespace {app.tag!r}>) first in that" in line


@pytest.mark.parametrize("how", ["posix_spawn", "execv"])
def test_under_w_error_a_posix_spawn_raises_and_a_forked_exec_still_execs(  # type: ignore[no-untyped-def]
    app, how: str
) -> None:
    """``-W error::spawnkit.PlainChildWarning``: ``os.posix_spawn`` raises in the worker, as a
    ``Popen`` does; a forked child between its fork and its exec never raises (a copy of the
    worker would run on in it): it says so on stderr and execs."""
    flags = ("-W", "error::spawnkit.PlainChildWarning")
    env = {"PYTHONWARNINGS": "error::spawnkit.PlainChildWarning"}
    proc = run_script(app.script, how, "spawn", flags=flags, env=env)
    if how == "posix_spawn":
        assert proc.returncode != 0, proc.stdout + proc.stderr
        assert "PlainChildWarning: a Python child" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout
    assert len(warned(proc, "PlainChildWarning: a Python child")) == 2, proc.stderr  # 2 forks


@pytest.mark.parametrize(
    ("how", "child"),
    [
        ("posix_spawn:here", "hi!"),  # it calls bootstrap_here() first: hooked
        ("execv:outside", '"a": 1'),  # json.tool: no hook of this process is in json
        ("here", "hi!"),  # it calls bootstrap_here() first: hooked, nothing to say
        ("outside", '"a": 1'),  # json.tool: no hook of this process is in json
        ("code-here", "hi!"),  # -c code that calls bootstrap_here() first: hooked
        ("code-boots", "hi!"),  # -c importing a module that calls bootstrap_here() first
        ("code-def", "hi"),  # the engine's import only in a function it never calls
        ("code-other", "hi"),  # -c importing no hooked package
        ("other", '{"a": 1}'),  # not Python
    ],
)
def test_children_that_bootstrap_or_run_no_hooked_module_are_not_named(  # type: ignore[no-untyped-def]
    app, how: str, child: str
) -> None:
    proc = run_script(app.script, how, "spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert child in proc.stdout.strip().splitlines()[-1], proc.stdout
    assert "'hi!'" in proc.stdout.strip().splitlines()[-1], proc.stdout
    assert not warned(proc, "PlainChildWarning"), proc.stderr


# A library (its own top-level package, one function of it hooked) that starts a helper of
# its own through subprocess, as torch's inductor starts its compile workers: the engine could
# neither bootstrap that helper nor hand it a context.
_LIB_MAIN = """
if __name__ == "__main__":
    import sys
    print(launch("libuser:schedule", "spawn", nprocs=1, payload=sys.argv[1]))
"""

_LIB_USER = """
import importlib
import os
import subprocess
import sys

_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
_LIB = {tag!r} + "lib"


def schedule(how):
    word = importlib.import_module(_LIB + ".target").word
    if how == "library":  # the library's own code starts its helper
        out = importlib.import_module(_LIB + ".pool").start(_ENV)
    elif how == "probe":  # the engine's code probing the library: -c code, not the engine's
        argv = [sys.executable, "-c", "import " + _LIB + ".helper"]
        out = subprocess.run(argv, env=_ENV, capture_output=True, text=True, timeout=120).stdout
    else:  # the engine's code starts the library's module itself: named
        argv = [sys.executable, "-m", _LIB + ".helper"]
        out = subprocess.run(argv, env=_ENV, capture_output=True, text=True, timeout=120).stdout
    return word(), out.strip()
"""

_LIB_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def louder(result):
    return result + "!"

def register():
    get_namespace({tag!r}).hooks.register({tag!r} + "lib.target.word", louder, HookType.AFTER)
"""

_LIB_FILES = {
    "__init__.py": "",
    "target.py": "def word():\n    return 'hi'\n",
    "helper.py": "from {lib}.target import word\n\nprint(word())\n",
    "pool.py": (
        "import subprocess, sys\n\n"
        "def start(env):\n"
        "    argv = [sys.executable, '-m', '{lib}.helper']\n"
        "    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)\n"
        "    return done.stdout\n"
    ),
}


@pytest.mark.parametrize(("how", "named"), [("library", False), ("probe", False), ("engine", True)])
def test_a_librarys_own_helper_is_not_named_the_engines_start_of_it_is(  # type: ignore[no-untyped-def]
    tmp_path, how: str, named: bool
) -> None:
    """A hook on a library's function made every Python child of that library's package a
    "child of the engine's": torch's own compile workers (started by torch's code, from
    torch's script) were named, with a fix no engine can apply, and stopped the worker under
    ``-W error``.  The engine's own code starting that module is still named; its ``-c``
    code importing the library's module (a probe) is not: only the engine's own are read."""
    modules = {"libuser": _LIB_USER, "libplugin": _LIB_PLUGIN}
    app = write_app(
        tmp_path, "pylib", LAUNCH + _LIB_MAIN, {"libloud": "libplugin:register"}, modules
    )
    lib = tmp_path / "site" / f"{app.tag}lib"
    lib.mkdir()
    for name, text in _LIB_FILES.items():
        (lib / name).write_text(text.replace("{lib}", lib.name))
    proc = run_script(app.script, how, flags=("-W", "error::spawnkit.PlainChildWarning"))
    if named:
        assert proc.returncode != 0 and "PlainChildWarning" in proc.stderr, proc.stdout
        assert f"module {lib.name}.helper (package {lib.name!r}" in proc.stderr, proc.stderr
        assert "first in that module" not in proc.stderr  # a library's: not the engine's to edit
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'hi')]", proc.stdout


def test_the_stand_in_calls_past_the_warm_servers_own(app) -> None:  # type: ignore[no-untyped-def]
    """The warm server stands in for ``Popen.__init__`` while it bootstraps, and the hooks
    (with this stand-in) apply inside that: a forked worker calls subprocess's own through it,
    not the server's note-taker."""
    proc = run_script(app.script, "chain", "forkserver")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[('hi!', 'subprocess.Popen.__init__')]"


@pytest.mark.parametrize(
    ("options", "runs"),
    [
        (["-m", "eng.server", "--port", "1"], "-m eng.server"),
        (["-um", "eng.server"], "-m eng.server"),
        (["-meng.server"], "-m eng.server"),
        (["-W", "ignore", "-X", "dev", "-B", "-m", "eng.server"], "-m eng.server"),
        (["-Wignore", "-Xdev", "-m", "eng.server"], "-m eng.server"),
        (["--check-hash-based-pycs", "never", "serve.py", "-m", "x"], "serve.py"),
        (["-u", "--", "-m"], "-m"),  # a script named -m
        (["-c", "import eng.server"], "-c import eng.server"),
        (["-uc", "import eng.server", "x"], "-c import eng.server"),
        (["-cimport eng"], "-c import eng"),
        (["-c", ""], None),
        (["-"], None),
        (["--version"], None),
        (["-i"], None),
    ],
)
def test_what_an_interpreters_command_line_runs(options: list[str], runs: str | None) -> None:
    """Read as CPython reads its options: a cluster of flags, an option's value attached or
    next, ``-c`` and stdin (not looked into)."""
    from spawnkit.bootstrap import _python_child_check

    assert _python_child_check._runs(options) == runs


@pytest.mark.parametrize(
    ("program", "python"),
    [
        (sys.executable, True),
        ("python3", True),
        ("/usr/bin/python3.11", True),
        ("python3.13t", True),
        ("ninja", False),
        ("/bin/ls", False),
        ("pythonista", False),
    ],
)
def test_which_programs_are_python(program: str, python: bool) -> None:
    from spawnkit.bootstrap import _python_child_check

    assert _python_child_check._is_python(program) is python


@pytest.mark.parametrize(
    ("code", "imports"),
    [
        ("import eng.server; eng.server.main()", "eng.server"),
        ("import eng.server as s\ns.main()", "eng.server"),
        ("from eng import server", "eng.server"),
        ("from eng.server import main; main()", "eng.server"),
        ("import os, eng", "eng"),
        ("if os.environ.get('X'):\n    import eng.server", None),  # may never run
        ("try:\n    import eng.server\nexcept ImportError:\n    pass", None),
        ("def f():\n    import eng.server", None),
        ("import spawnkit; spawnkit.bootstrap_here(NS); import eng.server", None),
        ("import json; print(json.dumps(1))", None),
        ("import eng.missing", None),  # the child fails to import it too
        ("import eng.server +", None),  # a syntax error: the child runs nothing
    ],
)
def test_which_engine_modules_c_code_surely_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, imports: str | None
) -> None:
    """Only a top-level import is read (a statement that surely runs), of the engine's own
    hooked package, found as this process would find it, without importing it."""
    from spawnkit.bootstrap import _python_child_check

    eng = f"eng{tmp_path.name.replace('-', '_')[-12:]}"
    (tmp_path / eng).mkdir()
    (tmp_path / eng / "__init__.py").write_text("")
    (tmp_path / eng / "server.py").write_text("def main():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = _python_child_check._code(code.replace("eng", eng), {eng})
    if imports is None:
        assert found is None, found
        return
    assert found is not None
    assert found[0].startswith(f"code importing {imports.replace('eng', eng)} ("), found[0]
    assert found[2] == eng and eng not in sys.modules  # located, not imported
