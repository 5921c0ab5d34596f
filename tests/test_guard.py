"""The import guard: where modules were first imported, and which early imports fail a worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from spawnkit.bootstrap import guard

REPO_SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(code: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def _pkg(tmp_path: Path) -> str:
    pkg = f"gd_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "sched.py").write_text(
        "class Scheduler:\n    def run(self):\n        return 1\n"
    )
    (tmp_path / pkg / "cfg.py").write_text("class Cfg:\n    pass\n")
    (tmp_path / pkg / "user.py").write_text(f"from {pkg}.sched import Scheduler\n")
    return pkg


# --------------------------------------------------------------- recording
def test_guard_module_imports_only_the_standard_library(tmp_path: Path) -> None:
    out = _run(
        """
        import json, sys
        before = set(sys.modules)
        import spawnkit.bootstrap.guard
        print(json.dumps(sorted(set(sys.modules) - before)))
        """,
        tmp_path,
    )
    new = json.loads(out.stdout)
    outside = [
        m
        for m in new
        if m.split(".")[0] not in sys.stdlib_module_names
        and m
        not in (
            "spawnkit",
            "spawnkit._exports",
            "spawnkit.errors",
            "spawnkit.bootstrap",
            "spawnkit.bootstrap.guard",
            "spawnkit._steps",
            "spawnkit._plain",  # GuardResult's base: standard library only itself
            "spawnkit._namedtuple",  # ImportSite's base: standard library only itself
            "spawnkit._templates",  # the code its __new__ is made from: standard library only
            "spawnkit._prebuilt",
            "spawnkit._compat",  # TYPE_CHECKING without typing: standard library only itself
            "spawnkit.bootstrap._first_imports",  # the guard's recorder, in its own module
        )
        and not m.startswith("spawnkit.bootstrap.lazy")
    ]
    assert not outside, outside
    assert "torch" not in new


def test_records_first_frame_outside_import_machinery_and_step(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    out = _run(
        f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from spawnkit.bootstrap import guard
        guard.arm(); guard.arm()  # idempotent
        assert sys.meta_path[0] is guard._RECORDER and sys.meta_path.count(guard._RECORDER) == 1
        with guard.step("initialize_platform"):
            import importlib; importlib.import_module("{pkg}.user")
        assert guard.current_step() == "startup"
        sched = guard.first_import("{pkg}.sched")
        user = guard.first_import("{pkg}.user")
        print(json.dumps([sched.filename, sched.lineno, sched.step, user.filename,
                          guard.first_import("json") is None, sched.describe()]))
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    sched_file, sched_line, step, user_file, json_unrecorded, described = json.loads(out.stdout)
    # sched was imported by user.py line 1, not by importlib's frames or the -c program
    assert sched_file == str(tmp_path / pkg / "user.py") and sched_line == 1
    assert step == "initialize_platform"
    assert "during the bootstrap stage 'initialize_platform'" in described
    assert user_file == "<string>"  # import_module frames are skipped: the caller is the -c code
    assert json_unrecorded  # imported before arm(): unknown, not invented


def test_a_hook_finder_import_and_a_reload_keep_the_importers_site(tmp_path: Path) -> None:
    """The on_import finder asks the recorder on the importer's behalf: the site is the
    importer's, not the finder's line; and a reload is no first import (before: both read
    ``spawnkit/hooks/_on_import.py:72``)."""
    pkg = _pkg(tmp_path)
    out = _run(
        f"""
        import importlib, json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from spawnkit.bootstrap import guard
        guard.arm()
        from spawnkit.hooks import HookRegistry
        registry = HookRegistry("gd")
        registry.register("{pkg}.sched.Scheduler.run", lambda r, s: r, on_import=True)
        registry.apply_hooks()
        import {pkg}.user  # first imports {pkg}.sched, which the finder watches
        first = str(guard.first_import("{pkg}.sched"))
        importlib.reload(sys.modules["{pkg}.sched"])
        print(json.dumps([first, str(guard.first_import("{pkg}.sched"))]))
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    user = f"{tmp_path / pkg / 'user.py'}:1"
    assert json.loads(out.stdout) == [user, user]


def test_spawned_child_records_script_reexecution_and_argument_unpickling(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    script = tmp_path / "launch.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import sys
            sys.path.insert(0, {str(tmp_path)!r})
            import {pkg}.sched
            import json
            from spawnkit.bootstrap import guard
            from spawnkit.protocol.popen import spawn_context


            def probe(conn, cfg):
                out = {{}}
                for mod in ("{pkg}.sched", "{pkg}.cfg"):
                    site = guard.first_import(mod)
                    out[mod] = [site.filename, site.lineno, site.describe()] if site else None
                out["armed"] = guard.armed()
                conn.send(out)


            if __name__ == "__main__":
                from {pkg}.cfg import Cfg

                ctx = spawn_context()
                r, w = ctx.Pipe(duplex=False)
                p = ctx.Process(target=probe, args=(w, Cfg()))
                p.start()
                try:
                    print(json.dumps(r.recv() if r.poll(60) else "timeout"))
                finally:
                    p.join(30)
                    if p.is_alive():
                        p.kill()
                        p.join(5)
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["armed"] is True
    fname, line, text = found[f"{pkg}.sched"]
    assert (fname, line) == (str(script), 3)
    assert "launching script" in text
    fname, _, text = found[f"{pkg}.cfg"]
    assert fname.endswith("multiprocessing/spawn.py")
    assert "unpickling the Process object" in text


# ------------------------------------------------------------------ policy
@pytest.mark.parametrize(
    ("default", "env", "override", "expected"),
    [
        ("error", None, None, "error"),
        ("warn", None, None, "warn"),
        ("error", "off", None, "off"),
        ("error", " WARN ", None, "warn"),
        ("error", "", None, "error"),
        ("off", "warn", "error", "error"),
    ],
)
def test_policy_precedence(
    default: str, env: str | None, override: str | None, expected: str
) -> None:
    assert guard.resolve_policy(default, env, override) == expected


def test_invalid_policy_names_its_origin() -> None:
    from spawnkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^SPAWNKIT_IMPORT_GUARD='loud' is not") as info:
        guard.resolve_policy("error", "loud", var="SPAWNKIT_IMPORT_GUARD")
    assert info.value.setting == "SPAWNKIT_IMPORT_GUARD"
    with pytest.raises(ValueError, match=r"ProcessSpec.guard_policy='maybe'"):
        guard.resolve_policy("error", None, "maybe")


# ------------------------------------------------------ two namespaces, one target module
_TWO_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def mark(original, *args, **kwargs):
    return original(*args, **kwargs) + "+{mark}"

def register():
    get_namespace({ns!r}).hooks.register({target!r}, mark, HookType.AROUND)
"""

_TWO_SCRIPT = """
import json, sys
import spawnkit

A = spawnkit.Namespace({a!r}, env_prefix={a!r}.upper())
B = spawnkit.Namespace({b!r}, env_prefix={b!r}.upper())
spawnkit.bootstrap_here(A)
from {mod} import func  # code of the user's between the two calls: rebound by B's sweep
if sys.argv[1] == "tuple":
    HELD = (func,)  # ... or not: a tuple keeps A's hooked function
if sys.argv[1] == "object":
    import argparse
    BOX = argparse.Namespace(fn=func)  # an attribute of another module's class's instance


def main():
    held = func if sys.argv[1] == "local" else None  # a local of a function still running
    try:
        spawnkit.bootstrap_here(B)
    except spawnkit.ImportGuardError as exc:
        print(json.dumps({{"error": str(exc), "findings": exc.findings}}))
    else:
        print(json.dumps({{"ran": func(), "home": sys.modules[{mod!r}].func(),
            "held": held() if held else None,
            "state": [s.state for s in B.hooks.status()]}}))


if sys.argv[1] in ("local", "in-function"):
    main()  # bootstrap_here(B) from a function: its frame outlives B's apply
else:
    try:
        spawnkit.bootstrap_here(B)
    except spawnkit.ImportGuardError as exc:
        print(json.dumps({{"error": str(exc), "findings": exc.findings}}))
    else:
        print(json.dumps({{"ran": func(), "home": sys.modules[{mod!r}].func()}}))
"""


def _two_namespaces(tmp_path: Path, mode: str) -> dict[str, object]:
    """``bootstrap_here(A)`` then ``bootstrap_here(B)`` in one real process, both namespaces'
    plugins (real distributions) hooking the same function."""
    from spawnkit.testing import write_distribution

    tag = uuid.uuid4().hex[:8]
    a, b, mod = f"twa{tag}", f"twb{tag}", f"twt{tag}.mod"
    site = tmp_path / "site"
    write_distribution(site, f"twt{tag}", modules={mod: "def func():\n    return 'orig'\n"})
    for ns, mark in ((a, "A"), (b, "B")):
        plug = f"twp{mark.lower()}{tag}"
        write_distribution(
            site,
            plug,
            entry_points={f"{ns}.plugins": {f"p{mark.lower()}": f"{plug}:register"}},
            modules={plug: _TWO_PLUGIN.format(ns=ns, target=f"{mod}.func", mark=mark)},
        )
    script = tmp_path / "two.py"
    script.write_text(_TWO_SCRIPT.format(a=a, b=b, mod=mod))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    ours = str(Path(guard.__file__).resolve().parents[2])  # the spawnkit under test
    env["PYTHONPATH"] = os.pathsep.join([str(site), ours, env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    found["a"], found["b"] = a, b
    return found


def test_a_second_namespace_hooking_what_the_first_ones_hooks_imported_bootstraps(
    tmp_path: Path,
) -> None:
    """The target module the first namespace's hook application imported is no early import
    of the user's code: before, ``bootstrap_here(B)`` was refused as "too late", the module
    "first imported at unknown"; now B's hooks wrap A's, and both run (quietly, under
    ``-W error``), also through the user's ``from X import func`` made in between."""
    found = _two_namespaces(tmp_path, "plain")
    assert found.get("ran") == found.get("home") == "orig+A+B", found


def test_a_reference_the_second_namespace_cannot_rebind_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    """A tuple made between the two calls keeps A's hooked function, which B's hooks would
    never reach: refused, naming both namespaces, the holder and the fix, never "unknown"."""
    found = _two_namespaces(tmp_path, "tuple")
    message = str(found.get("error"))
    a, b = found["a"], found["b"]
    assert f"bootstrap_here({b!r}) after bootstrap_here({a!r})" in message, message
    assert f"hook application of namespace {a!r}" in message
    assert "__main__.HELD[0] (tuple item)" in message
    assert f"call spawnkit.bootstrap_here({b!r}) right after bootstrap_here({a!r})" in message
    assert "unknown" not in message


def test_a_second_namespace_bootstrapped_from_a_function_stays_quiet(tmp_path: Path) -> None:
    """Control: ``bootstrap_here(B)`` called from a function whose locals hold nothing of A's
    (the references A's own record keeps to its chain are no holder): both run, no warning
    under ``-W error``."""
    found = _two_namespaces(tmp_path, "in-function")
    assert found.get("ran") == found.get("home") == "orig+A+B", found
    assert found.get("state") == ["applied"], found


def test_a_local_the_second_namespace_cannot_see_is_refused_naming_both(tmp_path: Path) -> None:
    """A local of the running function that calls ``bootstrap_here(B)``, bound to A's hooked
    function in between: no sweep or search reads the applying thread's frames, so it ran
    only A's hooks while B's ``status()`` said applied, unsaid.  The count of references to
    A's chain says so: refused, naming both namespaces, the target and the fix."""
    found = _two_namespaces(tmp_path, "local")
    message = str(found.get("error"))
    a, b = found["a"], found["b"]
    assert f"bootstrap_here({b!r}) after bootstrap_here({a!r})" in message, found
    assert f"both hook '{str(a).replace('twa', 'twt')}.mod.func'" in message
    assert f"__main__.main() local held (namespace {a!r}'s hooks only)" in message
    assert f"call spawnkit.bootstrap_here({b!r}) right after bootstrap_here({a!r})" in message
    assert "too late" not in message and "re-export" not in message
    assert "without the hooks" not in message  # A's hooks do run through it: B's do not
    findings = found["findings"]
    assert isinstance(findings, list)
    assert [f["imported_by"] for f in findings] == [a], findings


def test_an_object_the_second_namespace_names_is_refused_as_between(tmp_path: Path) -> None:
    """An object's attribute made between the two calls, named by the reference search
    (``__main__.BOX.cb.func``): the refusal said B "came too late", naming the holder's
    module as a hook target module, and that the target "names a re-export" defined in
    spawnkit's own chain module; now it names both namespaces and the fix."""
    found = _two_namespaces(tmp_path, "object")
    message = str(found.get("error"))
    a, b = found["a"], found["b"]
    assert f"bootstrap_here({b!r}) after bootstrap_here({a!r})" in message, found
    assert "BOX.fn (an object's attribute, which no sweep reads)" in message, message
    assert f"call spawnkit.bootstrap_here({b!r}) right after bootstrap_here({a!r})" in message
    assert "too late" not in message and "re-export" not in message
    assert "spawnkit.hooks._chain" not in message
