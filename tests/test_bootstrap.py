"""The bootstrap's report, its errors (typed, located, picklable) and the guard, in workers."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from _bootstrap_helpers import World, child_bootstrap, isolated_imports, make_world, run_child
from spawnkit import errors
from spawnkit.bootstrap import BootstrapReport
from spawnkit.spec import Payload

IMPORTS_TARGET_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def around(original, self):
        return "patched:" + original(self)

    def register():
        import {eng}.sched  # plugin code may import a target: apply still covers it
        NS.hooks.register("{eng}.sched.Scheduler.run", "{mod}:around", HookType.AROUND)
    """

MISSING_TARGET_PLUGIN = """
    from spawnkit.hooks.types import HookType
    from spawnkit.namespace import Namespace
    NS = Namespace("{ns}", "{PREFIX}")

    def register():
        NS.hooks.register("{eng}.sched.NoSuchClass.run", "{mod}:register", HookType.AFTER)
    """

RAISING_PLUGIN = """
    def register():
        raise RuntimeError("plugin callback exploded")
    """


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with isolated_imports():
        yield make_world(tmp_path)


def _bootstrap(world: World, **spec_changes: object) -> tuple[str, object, list[object], str]:
    result: tuple[str, object, list[object], str] = run_child(
        child_bootstrap, world.spec(**spec_changes)
    )
    return result


def _assert_located(err: errors.BootstrapError, stage: str) -> None:
    assert err.stage == stage
    assert err.rank == 0 and isinstance(err.pid, int) and err.host
    assert "Traceback" in err.traceback_text
    # survives another pickle round trip with every field
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is type(err)
    for attr in ("stage", "rank", "pid", "host", "traceback_text"):
        assert getattr(clone, attr) == getattr(err, attr)


# ---------------------------------------------------------------- report
def test_report_reaches_the_entry_with_plugins_hooks_platform_and_timings(world: World) -> None:
    world.add_plugin("p1", dist="p-one", version="1.2")
    status, value, _events, tb = _bootstrap(world, rank=1, world_size=2, run_id="r")
    assert status == "ok", tb
    assert value["rank"] == 1  # current_spec()
    report = BootstrapReport(**value["report"])  # current_report(), plain types only
    assert report.rank == 1 and report.namespace == world.ns.name
    assert report.platform["name"] == "testdev" and report.platform["kind"] == "plugin"
    assert report.platform["dist"] == f"plat-{world.eng[4:]}"
    assert "pinned by the parent" in report.platform["how"]
    assert "set_selection" not in report.platform["how"]  # spawnkit's internals, not the user's
    (plugin,) = report.plugins
    assert (plugin["name"], plugin["dist"], plugin["version"]) == ("p1", "p-one", "1.2")
    hooks = report.hooks[f"{world.eng}.sched.Scheduler.run"]
    assert hooks == [
        {
            "type": "AROUND",
            "hook": f"{world.plugins['p1']}:around",
            "source": "plugin 'p1' (p-one 1.2)",
            "state": "applied",
            "reason": "",
        }
    ]
    assert report.guard["policy"] == "error" and report.guard["armed"] is True
    assert set(report.stage_seconds) == {
        "arm_parent_death",
        "initialize_platform",
        "load_plugins",
        "apply_hooks",
        "materialize_payload",
        "resolve_entry",
    }
    text = report.format()
    assert "p1 = " in text and "AROUND from plugin 'p1'" in text


def test_by_value_entry_runs(world: World) -> None:
    factor = 7
    status, value, _, tb = _bootstrap(
        world, entry="", entry_payload=Payload.capture(lambda: factor * 6)
    )
    assert status == "ok", tb
    assert value == 42


def test_spec_plugins_selection_and_env_are_applied(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.add_plugin("p1")
    world.add_plugin("p2", IMPORTS_TARGET_PLUGIN)
    monkeypatch.setenv(world.ns.config.plugins_var, "p1")  # the parent's frozen choice wins
    status, value, _, tb = _bootstrap(world, plugins=("p2",), env={"EXTRA_FOR_TEST": "1"})
    assert status == "ok", tb
    assert [p["name"] for p in value["report"]["plugins"]] == ["p2"]
    # a target imported by plugin code while loading is allowed and listed
    (allowed,) = value["report"]["guard"]["plugin_imports"]
    assert allowed["module"] == f"{world.eng}.sched" and allowed["plugin"] == "p2"
    assert value["result"] == "patched:orig"


def test_lenient_spec_reports_the_failed_plugin(world: World) -> None:
    world.add_plugin("bad", RAISING_PLUGIN)
    world.add_plugin("p1")
    status, value, _, tb = _bootstrap(world, lenient_plugins=True)
    assert status == "ok", tb
    (failed,) = value["report"]["failed_plugins"]
    assert failed["name"] == "bad" and "exploded" in failed["error"]


# ---------------------------------------------------------------- errors
def test_plugin_failure_is_a_stage_error_carrying_the_plugin_error(world: World) -> None:
    world.add_plugin("bad", RAISING_PLUGIN, dist="bad-dist", version="9.9")
    status, err, events, _ = _bootstrap(world)
    assert status == "error" and isinstance(err, errors.StageError)
    _assert_located(err, "load_plugins")
    assert "plugin 'bad'" in str(err) and "bad-dist 9.9" in str(err)
    assert isinstance(err.cause, errors.PluginError) and err.cause.dist == "bad-dist"
    assert "plugin callback exploded" in err.traceback_text
    assert ("finished", "load_plugins") not in events


def test_platform_failure_names_the_stage(world: World) -> None:
    _status, err, _, _ = _bootstrap(world, platform="nonexistent_device")
    assert isinstance(err, errors.StageError)
    _assert_located(err, "initialize_platform")
    assert isinstance(err.cause, errors.PlatformNotFoundError)
    assert err.cause_type == "spawnkit.errors.PlatformNotFoundError"


def test_hook_apply_failure_names_the_stage(world: World) -> None:
    world.add_plugin("missing", MISSING_TARGET_PLUGIN)
    _status, err, _, _ = _bootstrap(world)
    assert isinstance(err, errors.StageError)
    _assert_located(err, "apply_hooks")
    assert "NoSuchClass" in str(err)


def test_corrupt_payload_is_a_payload_error(world: World) -> None:
    good = world.payload(3)
    bad = Payload(good.data[:-3], good.type_name, good.digest)
    _status, err, _, _ = _bootstrap(world, payload=bad)
    assert isinstance(err, errors.StageError) and err.kind == "payload"
    assert "StageError" in repr(err) and "kind='payload'" in repr(err)
    _assert_located(err, "materialize_payload")
    assert isinstance(err.cause, errors.BootstrapError) and err.cause.kind == "payload"


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("{eng}.worker:mian", "Did you mean 'main'"),
        ("{eng}.worker:NOT_CALLABLE", "not callable"),
        ("{eng}.nowhere:main", "failed to import"),
        ("{eng}.worker:f.<locals>.g", "inside another function"),
    ],
)
def test_entry_resolution_errors(world: World, entry: str, fragment: str) -> None:
    _status, err, _, _ = _bootstrap(world, entry=entry.format(eng=world.eng))
    assert isinstance(err, errors.EntryResolutionError), err
    _assert_located(err, "resolve_entry")
    assert fragment in str(err)


def test_entry_exception_propagates_unchanged(world: World) -> None:
    _status, err, events, _ = _bootstrap(world, entry=f"{world.eng}.worker:boom")
    assert type(err) is KeyError and "entry failed on purpose" in str(err)
    assert events[-1] == ("started", "entry")


@pytest.mark.parametrize(
    "cls",
    [
        errors.StageError,
        errors.EntryResolutionError,
        errors.ImportGuardError,
        errors.BootstrapOrderError,
        errors.LazyProxyError,
    ],
)
def test_every_bootstrap_error_survives_pickling(cls: type[errors.BootstrapError]) -> None:
    err = cls("msg", stage="load_plugins", rank=3, pid=42, host="h", traceback_text="tb")
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is cls and str(clone) == "msg"
    assert (clone.stage, clone.rank, clone.pid, clone.host, clone.traceback_text) == (
        "load_plugins",
        3,
        42,
        "h",
        "tb",
    )


# ------------------------------------------------------------------ guard
def test_target_imported_by_platform_init_fails_with_import_guard_error(world: World) -> None:
    world.add_plugin("p1", dist="p-one", version="1.0")
    env = {f"{world.prefix}_TEST_IMPORT_TARGET_IN_INIT": "1"}  # spec.env applies before stages
    _status, err, _, _ = _bootstrap(world, env=env)
    assert isinstance(err, errors.ImportGuardError), err
    assert isinstance(err, errors.StageError)  # like every other stage failure
    _assert_located(err, "load_plugins")
    (finding,) = err.findings
    assert finding["module"] == f"{world.eng}.sched"
    assert finding["targets"] == [f"{world.eng}.sched.Scheduler.run"]
    assert finding["sources"] == ["plugin 'p1' (p-one 1.0)"]
    assert finding["filename"].endswith(f"{world.plat}/platform.py")
    assert "during the bootstrap stage 'initialize_platform'" in finding["first_import"]
    text = str(err)
    # the fix that applies to a platform, not the launching script's
    assert "the platform's code runs in stage 'initialize_platform', before plugins load" in text
    assert "init_backend() included" in text  # inside a function is no fix there
    assert 'if __name__ == "__main__":' not in text and "spawnkit.lazy" not in text


@pytest.mark.parametrize("how", ["spec", "env"])
def test_guard_policy_warn_lets_the_worker_run_and_reports(
    world: World, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    world.add_plugin("p1")
    env = {f"{world.prefix}_TEST_IMPORT_TARGET_IN_INIT": "1"}
    changes: dict[str, object] = {"env": env}
    if how == "spec":
        monkeypatch.setenv(world.ns.config.guard_var, "error")  # the spec beats the variable
        changes["guard_policy"] = "warn"
    else:
        env[world.ns.config.guard_var] = "warn"
    status, value, _, tb = _bootstrap(world, **changes)
    assert status == "ok", tb
    guard = value["report"]["guard"]
    assert guard["policy"] == "warn"
    assert [v["module"] for v in guard["violations"]] == [f"{world.eng}.sched"]


def test_guard_policy_off(world: World) -> None:
    world.add_plugin("p1")
    env = {f"{world.prefix}_TEST_IMPORT_TARGET_IN_INIT": "1"}
    status, value, _, tb = _bootstrap(world, env=env, guard_policy="off")
    assert status == "ok", tb
    assert value["report"]["guard"]["violations"] == []


# -------------------------------------------- launching scripts (subprocess)
def _launch_script(world: World, tmp_path: Path, top_level: str) -> Path:
    spec_file = tmp_path / "spec.pkl"
    spec_file.write_bytes(pickle.dumps(world.spec()))
    paths = [p for p in sys.path if str(tmp_path) in p] + [str(Path(__file__).parent)]
    script = tmp_path / "launch.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import sys; sys.path[:0] = {paths!r}
            import spawnkit
            {top_level}
            import json, pickle
            from _bootstrap_helpers import child_bootstrap, run_child

            if __name__ == "__main__":
                with open({str(spec_file)!r}, "rb") as f:
                    spec = pickle.load(f)
                status, value, _, tb = run_child(child_bootstrap, spec)
                out = {{"status": status}}
                if status == "ok":
                    out["result"] = value["result"]
                    out["parent_sees"] = Scheduler().run()
                else:
                    out.update(type=type(value).__name__, message=str(value),
                               findings=getattr(value, "findings", None))
                print(json.dumps(out))
            """
        )
    )
    return script


def _run_script(script: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=script.parent,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_script_importing_a_target_at_module_scope_gets_import_guard_error(
    world: World, tmp_path: Path
) -> None:
    world.add_plugin("p1")
    script = _launch_script(world, tmp_path, f"from {world.eng}.sched import Scheduler")
    out = _run_script(script)
    assert out["status"] == "error" and out["type"] == "StageError[ImportGuardError]"
    (finding,) = out["findings"]  # type: ignore[misc]
    assert (finding["filename"], finding["lineno"]) == (str(script), 3)
    assert f"{script}:3" in str(out["message"])
    assert "launching script" in str(out["message"])
    assert "__mp_main__.Scheduler" in finding["stale_bindings"] or finding["stale_bindings"] == []


def test_same_script_with_a_lazy_proxy_runs_the_patched_entry(world: World, tmp_path: Path) -> None:
    world.add_plugin("p1")
    script = _launch_script(
        world, tmp_path, f'Scheduler = spawnkit.lazy("{world.eng}.sched:Scheduler")'
    )
    out = _run_script(script)
    assert out == {"status": "ok", "result": "patched:orig", "parent_sees": "orig"}
