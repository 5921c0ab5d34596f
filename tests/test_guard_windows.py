"""Hook targets reached before hooks exist, in real spawned workers launched by real scripts.

Three silent-wrong paths of issue 12, each run through ``spawn_with_plugins``
from a launching script (spawn re-executes it in the worker) with real
plugin distributions:

* a lazy proxy used while a worker starts (the script's module scope, the
  arguments being unpickled, a forkserver preload) is refused with a
  ``LazyProxyError`` naming the user's line, whatever the guard policy;
* a hook target stored in a module-level container by an engine module is
  rebound (dict values, list items) or reported (tuple items, defaults);
* a target imported by argument unpickling is blamed on the ``rank_extra``
  key that carried it, with a fix that applies there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _bootstrap_helpers import World, child_bootstrap, isolated_imports, make_world, run_child
from spawnkit import errors
from spawnkit.testing import write_distribution

REPLACE_CLASS_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        NS.hooks.register("{eng}.sched.Scheduler", "{mod}_fast:FastScheduler", HookType.REPLACE)
    """

FAST_SCHEDULER = """
    from {eng}.sched import Scheduler

    class FastScheduler(Scheduler):
        def run(self):
            return "fast"
    """


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with isolated_imports():
        yield make_world(tmp_path)


def _extra_dist(world: World, modules: dict[str, str]) -> str:
    """Another engine package ``<eng>x`` next to the world's engine; returns its name."""
    pkg = f"{world.eng}x"
    root = world.root / "engine_x"
    write_distribution(
        root,
        f"{pkg.replace('_', '-')}",
        "0.1",
        modules={k.format(x=pkg): world.fmt(v, x=pkg) for k, v in modules.items()},
    )
    sys.path.insert(0, str(root))
    return pkg


def _run_script(
    world: World,
    tmp_path: Path,
    top_level: str = "",
    *,
    launch: str = "",
    env: dict[str, str] | None = None,
    entry: str = "",
    python: str = sys.executable,
) -> tuple[dict[str, Any], str, Path]:
    """Write and run a launching script; returns its JSON outcome, its stderr and its path."""
    paths = [p for p in sys.path if str(tmp_path) in p] + [str(Path(__file__).parent)]
    script = tmp_path / "launch.py"
    script.write_text(
        f"import sys; sys.path[:0] = {paths!r}\n"
        "import spawnkit\n"
        + textwrap.dedent(top_level)
        + textwrap.dedent(
            f"""
            import json


            if __name__ == "__main__":
                from spawnkit import spawn_with_plugins
                from spawnkit.namespace import Namespace

                out = {{}}
                try:
                    with spawn_with_plugins(
                        "{entry or world.eng + '.worker:main'}",
                        namespace=Namespace({world.ns.name!r}, {world.prefix!r}),
                        ready_timeout=60,
                        join_timeout=90,
                        env={env or {}!r},
                        {launch}
                    ) as group:
                        out["results"] = group.results(timeout=90)
                except Exception as exc:
                    out["error"] = type(exc).__name__
                    out["kind"] = getattr(exc, "kind", "")
                    out["exc_type"] = getattr(exc, "exc_type", "")
                    out["message"] = str(exc)
                    child = getattr(exc, "child_exception", None)
                    out["child"] = str(child) if child is not None else ""
                print(json.dumps(out, default=str))
            """
        )
    )
    proc = subprocess.run(
        [python, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr, script


def _line_of(script: Path, text: str) -> int:
    lines = script.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _summary(message: str) -> str:
    """The parent's error without the child traceback it quotes."""
    return message.split("Child traceback", 1)[0]


# ------------------------------------------------- item 2: lazy proxy windows
@pytest.mark.parametrize("policy", ["error", "off"])
def test_lazy_proxy_at_script_module_scope_is_refused_naming_the_script_line(
    world: World, tmp_path: Path, policy: str
) -> None:
    world.add_plugin("fast", REPLACE_CLASS_PLUGIN, extra_modules={"{mod}_fast": FAST_SCHEDULER})
    out, _, script = _run_script(
        world,
        tmp_path,
        f'Sched = spawnkit.lazy("{world.eng}.sched:Scheduler")\nNAME = Sched.__name__\n',
        env={world.ns.config.guard_var: policy},
    )
    # Before: guard on, an ImportGuardError blaming spawnkit/bootstrap/lazy.py; guard off,
    # the run succeeded with the proxy bound to the unpatched class.
    assert out.get("error") == "ChildRaisedError", out
    assert out["exc_type"].endswith("LazyProxyError")
    summary = _summary(out["message"])
    line = _line_of(script, "NAME = Sched.__name__")
    assert f"{script}:{line}" in summary
    assert "module scope of the launching script" in summary
    assert "lazy.py" not in summary


def test_lazy_proxy_touched_while_unpickling_arguments_is_refused(
    world: World, tmp_path: Path
) -> None:
    world.add_plugin("fast", REPLACE_CLASS_PLUGIN, extra_modules={"{mod}_fast": FAST_SCHEDULER})
    pkg = _extra_dist(
        world,
        {
            "{x}.probe": """
                import spawnkit

                class Probe:
                    def __setstate__(self, state):
                        self.name = spawnkit.lazy("{eng}.sched:Scheduler").__name__
                """
        },
    )
    out, _, _ = _run_script(
        world,
        tmp_path,
        f"def rank_extra(rank):\n    from {pkg}.probe import Probe\n"
        "    p = Probe()\n    p.x = 1\n    return {'probe': p}\n",
        launch="rank_extra=rank_extra,",
    )
    assert out.get("error") == "ChildRaisedError", out
    assert out["exc_type"].endswith("LazyProxyError")
    summary = _summary(out["message"])
    probe_file = world.root / "engine_x" / pkg / "probe.py"
    assert f"{probe_file}:6 (in __setstate__)" in summary
    assert "unpickled its Process arguments" in summary


@pytest.mark.parametrize("mode", ["server", "worker"])
def test_lazy_proxy_used_by_a_preloaded_module(world: World, tmp_path: Path, mode: str) -> None:
    """A pre-bootstrapped server preloads after hooks (the proxy binds the patched class);
    where each worker bootstraps itself, the preload runs before hooks and is refused."""
    world.add_plugin("fast", REPLACE_CLASS_PLUGIN, extra_modules={"{mod}_fast": FAST_SCHEDULER})
    pkg = _extra_dist(
        world,
        {
            "{x}.warm": """
                import spawnkit
                NAME = spawnkit.lazy("{eng}.sched:Scheduler").__name__
                """
        },
    )
    out, _, _ = _run_script(
        world,
        tmp_path,
        f"import os; os.environ['SPAWNKIT_WARM_BOOTSTRAP'] = {mode!r}\n",
        launch=f"start_method='forkserver', preload=({pkg + '.warm'!r},),",
    )
    if mode == "server":
        (result,) = out["results"]
        assert result["result"] == "fast", out  # the REPLACE class, not the original
        return
    assert out.get("error") == "ForkServerError" and out["kind"] == "preload", out
    warm_file = world.root / "engine_x" / pkg / "warm.py"
    assert "LazyProxyError" in out["message"]
    assert f"{warm_file}:3" in out["message"]
    assert "preload" in out["message"]


# ------------------------------------ item 11: what argument carried the target
@pytest.mark.parametrize("policy", ["error", "warn"])
def test_target_carried_by_a_rank_extra_value_names_the_key_and_a_fix_that_applies(
    world: World, tmp_path: Path, policy: str
) -> None:
    world.add_plugin("p1")
    out, stderr, _ = _run_script(
        world,
        tmp_path,
        f"def rank_extra(rank):\n    from {world.eng}.sched import Scheduler\n"
        "    return {'sched_cls': Scheduler}\n",
        launch="rank_extra=rank_extra,",
        env={world.ns.config.guard_var: policy},
    )
    if policy == "error":
        assert out.get("error") == "ChildRaisedError", out
        assert "ImportGuardError" in out["exc_type"]  # StageError[ImportGuardError]
        text = out["child"]
        assert "set " + world.ns.config.guard_var + "=warn" in text
    else:
        (result,) = out["results"]
        assert result["result"] == "patched:orig"  # the entry imports after hooks: patched
        (violation,) = result["report"]["guard"]["violations"]
        assert violation["carriers"] == ["sched_cls"]
        text = stderr[stderr.index("ImportGuardWarning") :]
        assert text.count("import guard (") == 1  # once, not also as a log line
        assert "The worker continues" in text and "WITHOUT these hooks" in text
        assert "To only warn" not in text and "=warn" not in text
    assert "spec.extra['sched_cls']" in text and "rank_extra" in text
    assert "spawnkit.Payload" in text and "'module:Name' string" in text
    # the fixes for a script's module scope do not apply to an argument
    assert "__main__" not in text and "spawnkit.lazy" not in text


# ------------------------------ item 3: originals stored in module containers
ENGINE_X = {
    "{x}.ops": """
        from {x}.registry import register

        @register("tok")
        def tokenize(text):
            return "orig:" + text
        """,
    "{x}.registry": """
        OPS = {{}}

        def register(name):
            def deco(fn):
                OPS[name] = fn
                return fn
            return deco

        class Marker:
            pass
        """,
    "{x}.tables": """
        from {x} import ops

        TABLE = {{"tok": ops.tokenize}}
        HANDLERS = [str, ops.tokenize]
        """,
    "{x}.frozen": """
        import functools
        from {x} import ops

        PAIRS = (ops.tokenize,)
        LATER = functools.partial(ops.tokenize, "x")

        def run(text, fn=ops.tokenize):
            return fn(text)
        """,
    "{x}.worker": """
        def main():
            from spawnkit.bootstrap import current_report
            from {x} import ops, registry, tables
            calls = {{
                "direct": ops.tokenize("a"),
                "table": tables.TABLE["tok"]("a"),
                "list": tables.HANDLERS[1]("a"),
                "registry": registry.OPS["tok"]("a"),
            }}
            return {{"calls": calls, "guard": current_report().to_dict()["guard"]}}
        """,
}

#: The engine's own patch, made by its entry module's import: after the hooks were applied.
ENGINE_X_PATCHING = {
    **ENGINE_X,
    "{x}.patch": """
        from {x} import ops

        def fast_tokenize(text):
            return "fast:" + text

        ops.tokenize = fast_tokenize
        """,
    "{x}.patched_worker": """
        from {x} import ops, patch  # noqa: F401  (the patch runs at this import)

        def main():
            from spawnkit.bootstrap import current_report
            report = current_report().to_dict()
            return {{"call": ops.tokenize("a"), "guard": report["guard"], "hooks": report["hooks"]}}
        """,
}

LOADER_PLUGIN = """
    def register():
        import {x}.{tables}  # an engine module imported by plugin code while it loads
    """

HOOK_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def replacement(text):
        return "patched:" + text

    def around(original, text):
        return "around:" + original(text)

    def register():
        NS.hooks.register("{x}.ops.tokenize", "{mod}:{hook}", HookType.{kind})
    """


def _container_world(world: World, tables: str, kind: str) -> str:
    pkg = _extra_dist(world, ENGINE_X)
    world.add_plugin("aload", world.fmt(LOADER_PLUGIN, x=pkg, tables=tables))
    hook = "replacement" if kind == "REPLACE" else "around"
    world.add_plugin("hook", world.fmt(HOOK_PLUGIN, x=pkg, hook=hook, kind=kind, mod="{mod}"))
    return pkg


@pytest.mark.parametrize("kind", ["REPLACE", "AROUND"])
def test_originals_in_module_dicts_and_lists_are_rebound(world: World, kind: str) -> None:
    pkg = _container_world(world, "tables", kind)
    import importlib

    marker = importlib.import_module(f"{pkg}.registry").Marker()
    # the registry module arrives with the spec's arguments: imported before plugins load
    status, value, _, tb = run_child(
        child_bootstrap, world.spec(entry=f"{pkg}.worker:main", extra={"m": marker})
    )
    assert status == "ok", tb
    expected = "patched:a" if kind == "REPLACE" else "around:orig:a"
    # Before: only "direct" was hooked; the three containers kept the original, 0 violations.
    assert value["calls"] == dict.fromkeys(("direct", "table", "list", "registry"), expected)
    assert value["guard"]["violations"] == [] and value["guard"]["stale_holders"] == []


def test_originals_in_tuples_and_defaults_fail_the_worker_under_policy_error(
    world: World,
) -> None:
    pkg = _container_world(world, "frozen", "REPLACE")
    status, err, _, tb = run_child(child_bootstrap, world.spec(entry=f"{pkg}.worker:main"))
    assert status == "error", tb
    assert isinstance(err, errors.ImportGuardError), tb
    assert err.stage == "apply_hooks"
    text = str(err)
    assert f"{pkg}.frozen.PAIRS[0] (tuple item)" in text
    assert f"{pkg}.frozen.run() default of 'fn' (default argument)" in text
    assert f"{pkg}.frozen.LATER (functools.partial)" in text
    assert "make a functools.partial after the hooks are applied" in text  # its own fix
    assert f"'{pkg}.ops.tokenize'" in text and "=warn" in text
    assert {(f["module"], f["name"]) for f in err.findings} == {
        (f"{pkg}.frozen", "PAIRS[0]"),
        (f"{pkg}.frozen", "run() default of 'fn'"),
        (f"{pkg}.frozen", "LATER"),
    }


def test_originals_in_tuples_and_defaults_are_reported_under_policy_warn(world: World) -> None:
    pkg = _container_world(world, "frozen", "REPLACE")
    status, value, _, tb = run_child(
        child_bootstrap, world.spec(entry=f"{pkg}.worker:main", guard_policy="warn")
    )
    assert status == "ok", tb
    assert value["calls"]["direct"] == "patched:a"
    holders = value["guard"]["stale_holders"]
    assert sorted(h["name"] for h in holders) == ["LATER", "PAIRS[0]", "run() default of 'fn'"]
    assert all(h["target"] == f"{pkg}.ops.tokenize" for h in holders)


def test_lazy_proxy_used_by_plugin_code_while_it_loads_names_the_plugin_line(
    world: World,
) -> None:
    world.add_plugin(
        "early",
        """
        import spawnkit
        NAME = spawnkit.lazy("{eng}.sched:Scheduler").__name__

        def register():
            pass
        """,
    )
    status, err, _, tb = run_child(child_bootstrap, world.spec())
    assert status == "error", tb
    assert isinstance(err, errors.PluginError), tb
    plugin_file = world.root / "d_early" / f"{world.plugins['early']}.py"
    text = str(err)
    assert "LazyProxyError" in text and f"{plugin_file}:3 (in <module>)" in text, text
    assert "by the code of early while it loaded" in text, text


# ------------------------------ issue 19 item 5: originals held by class attributes
ENGINE_CLASSES = {
    **ENGINE_X,
    "{x}.engine": """
        from {x} import ops
        from {x}.ops import tokenize

        class Engine:
            tokfn = staticmethod(tokenize)
            plain = ops.tokenize

            def run(self, text):
                return self.tokfn(text)
        """,
    "{x}.worker": """
        def main():
            from spawnkit.bootstrap import current_report
            from {x}.engine import Engine
            report = current_report().to_dict()
            return {{
                "calls": {{"static": Engine().run("a"), "plain": Engine.plain("a")}},
                "guard": report["guard"],
                "hooks": report["hooks"],
                "text": current_report().format(),
            }}
        """,
}


def _class_world(world: World, modules: dict[str, str]) -> str:
    pkg = _extra_dist(world, modules)
    world.add_plugin("aload", world.fmt(LOADER_PLUGIN, x=pkg, tables="engine"))
    hook = world.fmt(HOOK_PLUGIN, x=pkg, hook="replacement", kind="REPLACE", mod="{mod}")
    world.add_plugin("hook", hook)
    return pkg


def test_originals_in_class_attributes_are_rebound_in_a_worker(world: World) -> None:
    """``class Engine: tokfn = staticmethod(tokenize)`` ran the original while "applied"."""
    pkg = _class_world(world, ENGINE_CLASSES)
    status, value, _, tb = run_child(child_bootstrap, world.spec(entry=f"{pkg}.worker:main"))
    assert status == "ok", tb
    assert value["calls"] == {"static": "patched:a", "plain": "patched:a"}
    assert value["guard"]["stale_holders"] == []
    (entry,) = value["hooks"][f"{pkg}.ops.tokenize"]
    assert entry.get("state") != "partial" and "PARTIAL" not in value["text"]


def test_a_hook_bypassed_by_a_known_holder_is_reported_partial_not_applied(
    world: World,
) -> None:
    engine = ENGINE_CLASSES["{x}.engine"] + "\n        PAIRS = (tokenize,)\n"
    pkg = _class_world(world, {**ENGINE_CLASSES, "{x}.engine": engine})
    status, value, _, tb = run_child(
        child_bootstrap, world.spec(entry=f"{pkg}.worker:main", guard_policy="warn")
    )
    assert status == "ok", tb
    (entry,) = value["hooks"][f"{pkg}.ops.tokenize"]
    assert entry["state"] == "partial", entry
    assert entry["unrebound"] == [f"{pkg}.engine.PAIRS[0] (tuple item)"]
    assert "still call the original" in entry["reason"]
    assert f"PARTIAL: {entry['reason']}" in value["text"]


# ------------------------------ issue 19 item 7: a precise guard
MAIN_HOLDERS = """
    from {x}.ops import tokenize  # a hook target, imported at the script's module scope
    ALIAS = {{"t": tokenize}}
    """

MAIN_WORKER = """
    def main():
        import sys
        from {x} import ops
        script = sys.modules["__mp_main__"]
        return {{"direct": ops.tokenize("a"), "global": script.tokenize("a"),
                 "dict": script.ALIAS["t"]("a")}}
    """


def _main_world(world: World) -> str:
    pkg = _extra_dist(world, {**ENGINE_X, "{x}.main_worker": MAIN_WORKER})
    hook = world.fmt(HOOK_PLUGIN, x=pkg, hook="replacement", kind="REPLACE", mod="{mod}")
    world.add_plugin("hook", hook)
    return pkg


def test_an_early_target_whose_every_holder_the_sweep_rebinds_is_a_warning(
    world: World, tmp_path: Path
) -> None:
    pkg = _main_world(world)
    out, stderr, script = _run_script(
        world, tmp_path, world.fmt(MAIN_HOLDERS, x=pkg), entry=f"{pkg}.main_worker:main"
    )
    assert "error" not in out, out  # before: ImportGuardError, though nothing stayed unhooked
    assert out["results"] == [dict.fromkeys(("direct", "global", "dict"), "patched:a")]
    text = stderr[stderr.index("ImportGuardWarning") :]
    assert "is rebound when the hooks are applied, so the worker continues" in text
    rebound = text.split("references rebound: ", 1)[1].splitlines()[0]
    # the script's module is both __main__ and __mp_main__ in a spawned worker
    assert "__mp_main__.tokenize" in rebound and "ALIAS['t']" in rebound
    assert f"{script}:{_line_of(script, 'from ' + pkg)}" in text


def test_an_early_target_held_where_the_sweep_cannot_rebind_still_fails(
    world: World, tmp_path: Path
) -> None:
    pkg = _main_world(world)
    top = world.fmt(MAIN_HOLDERS, x=pkg) + "PAIR = (tokenize,)\n"
    out, _, script = _run_script(world, tmp_path, top, entry=f"{pkg}.main_worker:main")
    assert "ImportGuardError" in out.get("exc_type", ""), out
    message = out["message"]
    # the chain names spawn's re-import of the launching script as the first import
    assert f"{pkg}.ops <- {script}:{_line_of(script, 'from ' + pkg)}" in message
    assert f"{script} <- spawn's re-import of the launching script" in message


PLACED = """
    import sys
    import types

    _fake = types.ModuleType("{eng}.sched")
    sys.modules["{eng}.sched"] = _fake  # placed, never imported
    """


def test_a_module_placed_in_sys_modules_is_described_as_placed_with_its_line(
    world: World, tmp_path: Path
) -> None:
    world.add_plugin("p1")
    out, _, script = _run_script(world, tmp_path, world.fmt(PLACED))
    assert "ImportGuardError" in out.get("exc_type", ""), out
    message = _summary(out["message"])
    line = _line_of(script, "sys.modules[")
    assert f"module '{world.eng}.sched', placed in sys.modules by {script}:{line}" in message
    assert "interpreter start-up" not in message and "before the import guard" not in message


def _venv_with_startup_pth(tmp_path: Path, world: World, pth_code: str) -> tuple[str, Path]:
    """A throw-away venv whose site-packages run ``pth_code`` at every interpreter start."""
    import site

    import spawnkit

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = venv.glob("lib/python*/site-packages")
    paths = [str(Path(spawnkit.__file__).parents[1]), *site.getsitepackages()]
    paths += [p for p in sys.path if str(tmp_path) in p]
    (purelib / "aaa_paths.pth").write_text("\n".join(paths) + "\n")
    pth = purelib / "zzz_startup_hack.pth"
    pth.write_text(pth_code + "\n")
    return str(venv / "bin" / "python"), pth


def test_a_target_imported_by_pth_start_up_code_names_that_pth_line(
    world: World, tmp_path: Path
) -> None:
    world.add_plugin("p1")
    code = f"import {world.eng}.sched"
    python, pth = _venv_with_startup_pth(tmp_path, world, code)
    out, _, _ = _run_script(world, tmp_path, python=python)
    assert "ImportGuardError" in out.get("exc_type", ""), out
    message = _summary(out["message"])
    assert f"first imported at interpreter start-up, by the .pth start-up code {pth}:1" in message
    assert f"{world.eng}.sched <- {pth}:1 ({code}), run by site at interpreter start-up" in message
    assert f"remove that import line from {pth}" in message


def test_a_target_the_entry_module_replaces_fails_the_worker_naming_the_replacement(
    world: World,
) -> None:
    """The engine's entry imported its own patch over a hooked target: every call skipped the
    plugin's hook while the report said applied.  Now the worker stops in resolve_entry."""
    pkg = _extra_dist(world, ENGINE_X_PATCHING)
    hook = world.fmt(HOOK_PLUGIN, x=pkg, hook="replacement", kind="REPLACE", mod="{mod}")
    world.add_plugin("hook", hook)
    spec = world.spec(entry=f"{pkg}.patched_worker:main")
    status, err, _, tb = run_child(child_bootstrap, spec)
    assert status == "error", tb
    assert isinstance(err, errors.ImportGuardError) and err.stage == "resolve_entry", tb
    text = str(err)
    assert f"'{pkg}.ops.tokenize' at {pkg}.ops.tokenize: replaced after apply_hooks()" in text
    assert f"now {pkg}.patch:fast_tokenize (" in text and "patch.py:" in text
    assert "skip the hooks" in text and "Fix: hook what replaces it" in text
    # under warn it runs, and its report says the hook is not in effect there
    warned = world.spec(entry=spec.entry, guard_policy="warn")
    status, value, _, tb = run_child(child_bootstrap, warned)
    assert status == "ok", tb
    assert value["call"] == "fast:a"
    (holder,) = value["guard"]["stale_holders"]
    assert holder["target"] == f"{pkg}.ops.tokenize" and holder["name"] == "tokenize"
    (hook,) = value["hooks"][f"{pkg}.ops.tokenize"]
    assert hook["state"] == "partial" and "replaced after apply_hooks()" in hook["reason"]


ENGINE_SUBCLASSED = {
    "{x}.sched": """
        class Scheduler:
            def step(self):
                return "base"
        """,
    "{x}.gpu": """
        from {x}.sched import Scheduler

        class GpuScheduler(Scheduler):  # what the engine runs: never calls Scheduler.step
            def step(self):
                return "gpu"
        """,
    "{x}.sub_worker": """
        from {x} import gpu

        def main():
            return gpu.GpuScheduler().step()
        """,
}

STEP_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        NS.hooks.register("{x}.sched.Scheduler.step", lambda r, s: r + "+hooked", HookType.AFTER)
    """


def test_a_hooked_method_the_entrys_subclass_overrides_without_calling_it_is_a_conflict(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin hooked Scheduler.step; the engine runs GpuScheduler, whose step never calls
    it: the hook never ran and nothing said so."""
    pkg = _extra_dist(world, ENGINE_SUBCLASSED)
    world.add_plugin("step", world.fmt(STEP_PLUGIN, x=pkg))
    spec = world.spec(entry=f"{pkg}.sub_worker:main")
    monkeypatch.setenv(f"{world.prefix}_HOOK_CONFLICTS", "error")
    status, err, _, tb = run_child(child_bootstrap, spec)
    assert status == "error", tb
    assert isinstance(err, errors.HookConflictError) and err.stage == "resolve_entry", tb
    text = str(err)
    assert f"target '{pkg}.sched.Scheduler.step'" in text
    assert f"{pkg}.gpu.GpuScheduler.step" in text and "skip the hook" in text
    assert "Fix: hook the override the engine runs" in text
    monkeypatch.setenv(f"{world.prefix}_HOOK_CONFLICTS", "ignore")
    status, value, _, tb = run_child(child_bootstrap, spec)
    assert (status, value) == ("ok", "gpu"), tb
