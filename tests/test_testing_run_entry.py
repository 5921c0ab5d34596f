"""run_entry: a real spawned worker, the staged bootstrap, the result or the child's error."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
import uuid
import warnings

import psutil
import pytest

from spawnkit.bootstrap import BootstrapReport, current_spec
from spawnkit.errors import (
    BootstrapTimeoutError,
    ChildRaisedError,
    EntryResolutionError,
    EntryTimeoutError,
    PluginError,
    StageError,
)
from spawnkit.testing import ChildTraceback, EntryRun, run_entry
from spawnkit.testing._run import by_reference_name

TIMEOUT = 60


def describe_worker(payload=None):
    spec = current_spec()
    return {"pid": os.getpid(), "rank": spec.rank, "payload": payload, "entry": spec.entry}


def raise_value_error(payload):
    raise ValueError(f"bad payload {payload!r}")


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("this exception refuses to be pickled")


def raise_unpicklable():
    raise Unpicklable("cannot travel")


def read_env():
    return {k: os.environ.get(k) for k in ("SK_TEST_VAR", "SK_OTHER")}


def sleep_forever():
    time.sleep(600)


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid):
            return True
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_module_level_entry_runs_by_reference_in_a_spawned_worker():
    run = run_entry(describe_worker, {"n": 3}, timeout=TIMEOUT)
    assert isinstance(run, EntryRun)
    assert run.result["payload"] == {"n": 3}
    assert run.result["rank"] == 0
    assert run.result["pid"] == run.pid != os.getpid()
    assert run.result["entry"] == f"{__name__}:describe_worker"
    assert isinstance(run.report, BootstrapReport)
    assert run.report.pid == run.pid and run.report.namespace == "spawnkit"
    assert run.exit_code == 0
    result, report = run
    assert result == run.result and report is run.report
    assert _gone(run.pid)


def test_string_entry_and_no_payload():
    run = run_entry(f"{__name__}:describe_worker", timeout=TIMEOUT)
    assert run.result["payload"] is None


def test_nested_function_and_lambda_travel_by_value():
    secret = uuid.uuid4().hex

    def closure():
        return secret, current_spec().entry

    assert by_reference_name(closure) is None
    run = run_entry(closure, timeout=TIMEOUT)
    assert run.result == (secret, "")
    assert run_entry(lambda p: p * 2, 21, timeout=TIMEOUT).result == 42


def test_child_exception_is_reraised_with_its_type_and_traceback():
    with pytest.raises(ValueError, match="bad payload 7") as info:
        run_entry(raise_value_error, 7, timeout=TIMEOUT)
    cause = info.value.__cause__
    assert isinstance(cause, ChildTraceback)
    assert "raise_value_error" in cause.text
    assert f'File "{__file__}"' in cause.text
    assert "ValueError: bad payload 7" in cause.text
    assert "spawned worker (rank 0, pid" in str(cause) and "stage entry" in str(cause)


class CodedError(Exception):
    """A message built from the arguments, matched whole in the test."""

    def __init__(self, code: int) -> None:
        super().__init__(f"failed with code {code}")
        self.code = code


def raise_coded(code: int) -> None:
    raise CodedError(code)


def test_an_anchored_match_of_the_exact_message_holds_for_a_reraised_exception() -> None:
    """``pytest.raises(match=)`` reads the exception's notes as well: a note of run_entry's
    (where it was raised) made an anchored pattern of the exact message fail."""
    with pytest.raises(CodedError, match=r"^failed with code 7$") as info:
        run_entry(raise_coded, 7, timeout=TIMEOUT)
    assert info.value.code == 7
    assert not getattr(info.value, "__notes__", [])


def test_unpicklable_child_exception_arrives_as_child_raised_error():
    with pytest.raises(ChildRaisedError) as info:
        run_entry(raise_unpicklable, timeout=TIMEOUT)
    err = info.value
    assert err.child_exception is None
    assert err.exc_type.endswith("Unpicklable")
    assert "cannot travel" in err.traceback_text
    assert err.rank == 0


class CustomBase(BaseException):
    pass


def raise_keyboard_interrupt():
    raise KeyboardInterrupt("pressed in the entry")


def raise_generator_exit():
    raise GeneratorExit("closed in the entry")


def raise_custom_base():
    raise CustomBase("a BaseException of its own")


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        (raise_keyboard_interrupt, KeyboardInterrupt),
        (raise_generator_exit, GeneratorExit),
        (raise_custom_base, CustomBase),
    ],
)
def test_a_base_exception_of_the_entry_arrives_inside_child_raised_error(entry, kind):
    raised: BaseException | None = None
    try:  # not pytest.raises: a KeyboardInterrupt raised as itself would end this session
        run_entry(entry, timeout=TIMEOUT)
    except BaseException as exc:
        raised = exc
    assert type(raised) is ChildRaisedError, repr(raised)
    child = raised.child_exception
    assert type(child) is kind and raised.__cause__ is child
    assert isinstance(child.__cause__, ChildTraceback) and entry.__name__ in child.__cause__.text
    message = str(raised)
    assert f"the entry's {kind.__name__} is a BaseException that is no Exception" in message
    assert "would not fail this test but stop the test run" in message


BASE_EXCEPTION_SUITE = """
from spawnkit.testing import run_entry


def interrupt():
    raise KeyboardInterrupt("pressed in the entry")


def test_interrupted_entry():
    run_entry(interrupt, timeout=60)


def test_after():
    pass
"""


def test_an_entry_raising_keyboard_interrupt_fails_its_test_and_the_session_goes_on(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_base_exception_suite=BASE_EXCEPTION_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    result.assert_outcomes(failed=1, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "ChildRaisedError" in result.stdout.str()


def test_env_reaches_only_the_child(monkeypatch):
    monkeypatch.delenv("SK_TEST_VAR", raising=False)
    run = run_entry(read_env, env={"SK_TEST_VAR": "yes"}, timeout=TIMEOUT)
    assert run.result == {"SK_TEST_VAR": "yes", "SK_OTHER": None}
    assert "SK_TEST_VAR" not in os.environ


def test_an_entry_that_does_not_resolve_is_the_workers_entry_resolution_error():
    missing = f"no_such_module_{uuid.uuid4().hex[:6]}"
    with pytest.raises(EntryResolutionError) as info:
        run_entry(f"{missing}:main", timeout=TIMEOUT)
    assert info.value.stage == "resolve_entry"
    assert missing in str(info.value)
    with pytest.raises(EntryResolutionError, match="missing_function"):
        run_entry(f"{__name__}:missing_function", timeout=TIMEOUT)


def test_a_failing_plugin_is_the_workers_plugin_error(plugin_dist, spawnkit_namespace):
    ns = spawnkit_namespace
    mod = f"failing_{uuid.uuid4().hex[:6]}"
    plugin_dist(
        "failing-plugin",
        "0.3.1",
        entry_points={ns.config.plugin_group: {"failer": f"{mod}:register"}},
        modules={mod: "def register():\n    raise RuntimeError('plugin exploded')\n"},
    )
    with pytest.raises(StageError) as info:
        run_entry(describe_worker, namespace=ns, timeout=TIMEOUT)
    # What a real worker raises: the load_plugins stage failed because of a PluginError.
    stage_err = info.value
    assert stage_err.stage == "load_plugins" and stage_err.rank == 0
    err = stage_err.__cause__
    assert isinstance(err, PluginError) and err is stage_err.cause
    assert (err.plugin, err.dist, err.version) == ("failer", "failing-plugin", "0.3.1")
    assert "plugin exploded" in str(err) and "failing-plugin 0.3.1" in str(stage_err)
    assert isinstance(err.__cause__, ChildTraceback)
    assert "RuntimeError: plugin exploded" in err.__cause__.text
    # The stage error is also a PluginError, so `except PluginError` catches it with both
    # the plugin's and the stage's fields on one object.
    assert isinstance(stage_err, PluginError)
    assert (stage_err.plugin, stage_err.dist, stage_err.stage) == (
        "failer",
        "failing-plugin",
        "load_plugins",
    )


def test_an_invalid_entry_point_spec_is_the_workers_plugin_error(plugin_dist, spawnkit_namespace):
    ns = spawnkit_namespace
    plugin_dist(
        "malformed-plugin",
        "1.0",
        entry_points={ns.config.plugin_group: {"bad": "not a module:at all"}},
    )
    with pytest.raises(StageError) as info:
        run_entry(describe_worker, namespace=ns, timeout=TIMEOUT)
    err = info.value.__cause__
    assert isinstance(err, PluginError)
    assert (err.plugin, err.dist, err.value) == ("bad", "malformed-plugin", "not a module:at all")
    assert "not a module:at all" in str(info.value)


def test_plugins_argument_selects_plugins(plugin_dist, spawnkit_namespace):
    ns = spawnkit_namespace
    mod = f"sel_{uuid.uuid4().hex[:6]}"
    plugin_dist(
        "selectable",
        entry_points={
            ns.config.plugin_group: {"good": f"{mod}:good", "bad": f"{mod}:bad"},
        },
        modules={mod: "def good():\n    pass\n\ndef bad():\n    raise RuntimeError('bad')\n"},
    )
    run = run_entry(describe_worker, namespace=ns, plugins=["good"], timeout=TIMEOUT)
    assert [p["name"] for p in run.report.plugins] == ["good"]
    assert ns.config.plugins_var not in os.environ
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plugins=[] says none in so many words: no warning
        run = run_entry(describe_worker, namespace=ns, plugins=[], timeout=TIMEOUT)
    assert run.report.plugins == []
    with pytest.raises(TypeError, match="not a string"):
        run_entry(describe_worker, namespace=ns, plugins="good", timeout=TIMEOUT)


def test_non_callable_entry_is_an_entry_resolution_error_before_spawning():
    with pytest.raises(EntryResolutionError, match=r"\(type int\) is not callable"):
        run_entry(42, timeout=TIMEOUT)


def _unrun_entries():
    async def serve(payload=None):
        return 1

    def stream(payload=None):
        yield 1

    return serve, stream


@pytest.mark.parametrize("kind", ["an `async def` function", "a generator function"])
def test_an_unrun_entry_is_the_launchers_entry_resolution_error_before_spawning(kind):
    """Sent by value inside run_entry's wrapper, an ``async def`` (or generator) entry passed the
    launcher's check: a worker ran, and the test got ``ChildRaisedError`` where
    ``spawn_with_plugins`` raises ``EntryResolutionError`` before any worker starts."""
    entry = _unrun_entries()[kind.startswith("a gen")]
    with pytest.raises(EntryResolutionError, match=f"is {kind}") as info:
        run_entry(entry, timeout=TIMEOUT)
    assert info.value.stage == "resolve_entry"


def test_entry_past_the_timeout_is_a_timeout_and_leaves_no_worker():
    start = time.monotonic()
    with pytest.raises(EntryTimeoutError) as info:
        run_entry(sleep_forever, timeout=3)
    assert time.monotonic() - start < 30
    assert info.value.stage == "entry"
    assert not [p for p in psutil.Process().children(recursive=True) if _live_and_named(p)]


def _live_and_named(proc: psutil.Process) -> bool:
    """A live (not zombie, not gone) process running ``sleep_forever``.

    A zombie's command line cannot be read (psutil raises), and a zombie
    child (an exited guardian the launcher has yet to reap) runs nothing.
    """
    try:
        return proc.status() != psutil.STATUS_ZOMBIE and "sleep_forever" in " ".join(
            proc.cmdline()
        )
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return False


def _slow_to_materialize() -> str:
    time.sleep(2.0)
    return "materialized"


class SlowPayload:
    """Unpickling it in the worker (the materialize_payload stage) takes 2 s of bootstrap."""

    def __reduce__(self):
        return (_slow_to_materialize, ())


def sleep_two_seconds(payload):
    time.sleep(2.0)
    return payload


def test_timeout_bounds_the_bootstrap_and_the_entry_separately():
    # 2 s of bootstrap plus 2 s of entry: each within timeout=3.5, together past it.
    run = run_entry(sleep_two_seconds, SlowPayload(), timeout=3.5)
    assert run.result == "materialized"


def test_entry_timeout_names_run_entrys_timeout_and_shows_where_it_hangs():
    with pytest.raises(EntryTimeoutError) as info:
        run_entry(sleep_forever, timeout=3)
    message = str(info.value)
    assert "Raise run_entry(timeout=)" in message and "join_timeout" not in message
    assert info.value.setting == "run_entry(timeout=)" and "sleep_forever" in info.value.stacks[0]
    assert "in sleep_forever" in message
    assert "did not return within 3 s" in message and "returned, but" not in message


def return_held_by_an_exit_handler():
    import atexit

    atexit.register(time.sleep, 600)
    return "returned"


def return_leaving_a_non_daemon_thread():
    import threading

    threading.Thread(target=time.sleep, args=(600,), name="left-running").start()
    return "returned"


@pytest.mark.parametrize(
    ("entry", "holder"),
    [
        (return_held_by_an_exit_handler, "an exit handler (atexit) holds it"),
        (return_leaving_a_non_daemon_thread, "a non-daemon thread holds it"),
    ],
)
def test_an_entry_that_returned_in_a_worker_that_does_not_exit_is_not_said_to_hang(
    entry, holder
):
    with pytest.raises(EntryTimeoutError) as info:
        run_entry(entry, timeout=3)
    message = str(info.value)
    assert f"{entry.__name__} returned, but its worker had not exited 3 s after" in message
    assert holder in message and "did not return" not in message
    assert "join the threads the entry starts" in message
    assert info.value.setting == "run_entry(timeout=)" and info.value.stage == "entry"
    assert info.value.stacks[0].rstrip() in message


def _stuck_in_materialize() -> None:
    time.sleep(600)


class StuckPayload:
    def __reduce__(self):
        return (_stuck_in_materialize, ())


def test_bootstrap_timeout_names_run_entrys_timeout():
    with pytest.raises(BootstrapTimeoutError) as info:
        run_entry(sleep_two_seconds, StuckPayload(), timeout=2)
    message = str(info.value)
    assert info.value.stage == "materialize_payload"
    assert "pass a larger run_entry(timeout=)" in message and "ready_timeout" not in message


def test_module_not_importable_by_name_travels_by_value(tmp_path):
    """What ``--import-mode=importlib`` does: the module is in sys.modules under a name
    no fresh interpreter can import."""
    name = f"unimportable_{uuid.uuid4().hex[:6]}"
    path = tmp_path / "elsewhere" / "helper_mod.py"
    path.parent.mkdir()
    path.write_text(
        "import os\n\nclass Box:\n    def __init__(self, v):\n        self.v = v\n\n"
        "def entry(box):\n    return ('by value', box.v, os.getpid())\n"
    )
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        assert by_reference_name(module.entry) is None
        run = run_entry(module.entry, module.Box(5), timeout=TIMEOUT)
        assert run.result[:2] == ("by value", 5)
        assert name not in sys.modules or sys.modules[name] is module
    finally:
        sys.modules.pop(name, None)


def test_run_entry_under_each_launch_mode(launch_mode):
    run = run_entry(describe_worker, "mode", timeout=TIMEOUT, **launch_mode.kwargs())
    assert run.result["payload"] == "mode"
    assert run.result["pid"] != os.getpid()


def test_the_tests_filters_for_spawnkits_warnings_become_the_workers_entries() -> None:
    import re

    from spawnkit.errors import HookConflictWarning, PlainChildWarning
    from spawnkit.testing._warnfilters import forwarded

    with warnings.catch_warnings():
        warnings.resetwarnings()
        assert forwarded() == []  # nothing said about spawnkit's categories: nothing sent
        warnings.filterwarnings("always", category=DeprecationWarning)  # not spawnkit's
        warnings.filterwarnings("ignore", ".*vendored", UserWarning)  # broad, a pattern: not
        assert forwarded() == []
        warnings.filterwarnings("error")  # every category: each of spawnkit's, narrowed
        warnings.filterwarnings("ignore", category=PlainChildWarning)
        warnings.filterwarnings("default", re.escape("target 'eng.step'"), HookConflictWarning)
        entries = forwarded()
    assert "error::spawnkit.HookConflictWarning" in entries
    assert "error::spawnkit.CustomOpWarning" in entries
    assert "error::spawnkit.ImportGuardWarning" in entries  # a RuntimeWarning, the worker's too
    assert "error::spawnkit.PlainChildWarning" not in entries  # the ignore above shadows it
    assert "ignore::spawnkit.PlainChildWarning" in entries
    assert not any("EnvVariableWarning" in e for e in entries)  # the launch's own: filtered here
    # the later entry wins in the worker: the message-specific one comes after the catch-all
    assert entries.index("default:target 'eng.step':spawnkit.HookConflictWarning") > (
        entries.index("error::spawnkit.HookConflictWarning")
    )


@pytest.mark.parametrize(
    ("kwargs", "variable", "value"),
    [
        pytest.param({"plugins": ["alpha"]}, "SPAWNKIT_PLUGINS", "beta", id="plugins"),
        pytest.param({"platform": "cpu"}, "SPAWNKIT_PLATFORM", "base", id="platform"),
    ],
)
def test_an_argument_and_env_that_disagree_are_refused(kwargs, variable, value) -> None:
    from spawnkit.errors import ConfigError

    (argument,) = kwargs
    before = os.environ.get(variable)
    with pytest.raises(ConfigError, match=f"both choose the worker's {argument}") as info:
        run_entry(describe_worker, env={variable: value}, timeout=TIMEOUT, **kwargs)
    assert info.value.setting == argument
    assert f"{variable}={value!r}" in str(info.value) and "Fix: pass one of them" in str(info.value)
    assert os.environ.get(variable) == before  # refused before anything was set for the call


def test_an_argument_and_env_that_agree_run() -> None:
    run = run_entry(
        describe_worker,
        platform="cpu",
        plugins=[],
        env={"SPAWNKIT_PLATFORM": " cpu", "SPAWNKIT_PLUGINS": " "},
        timeout=TIMEOUT,
    )
    assert run.report.platform["name"] == "cpu"
    assert run.report.plugins == []


def call_tokenize(module_name):
    import importlib

    return importlib.import_module(module_name).tokenize("a")


def _guard_warning_site(plugin_dist, ns):
    """An engine module and a plugin hooking it; the engine's object in ``rank_extra=``, which
    the worker unpickles before plugins load: the sweep rebinds it, an ``ImportGuardWarning``."""
    eng, plug = f"igw_eng_{uuid.uuid4().hex[:6]}", f"igw_plug_{uuid.uuid4().hex[:6]}"
    plugin_dist(eng.replace("_", "-"), modules={
        f"{eng}.ops": "class Tok:\n    pass\n\ndef tokenize(x):\n    return ['tok', x]\n",
    })  # fmt: skip
    plugin_dist(
        plug.replace("_", "-"),
        entry_points={ns.config.plugin_group: {"igw": f"{plug}:register"}},
        modules={
            plug: (
                "def register():\n"
                f"    from spawnkit.hooks import HookType\n"
                f"    from spawnkit.namespace import get_namespace\n"
                f"    get_namespace({ns.name!r}).hooks.register(\n"
                f"        '{eng}.ops.tokenize', '{plug}:hook', HookType.AFTER)\n"
                "def hook(result, *a, **k):\n    return result + ['hooked']\n"
            )
        },
    )
    tok = importlib.import_module(f"{eng}.ops").Tok()
    return f"{eng}.ops", tok


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(
            "named", marks=pytest.mark.filterwarnings("error::spawnkit.ImportGuardWarning")
        ),
        pytest.param("error", marks=pytest.mark.filterwarnings("error")),
    ],
)
def test_the_tests_error_filter_for_import_guard_warnings_stops_the_worker(
    how, plugin_dist, spawnkit_namespace
) -> None:
    """As ``python -W error launcher.py`` stops the production worker: the test's filter
    reached the worker (it used to pass, the warning on its captured stderr)."""
    module, tok = _guard_warning_site(plugin_dist, spawnkit_namespace)
    with pytest.raises(StageError, match="ImportGuardWarning") as info:
        run_entry(
            call_tokenize,
            module,
            namespace=spawnkit_namespace,
            rank_extra=lambda rank: {"tok": tok},
            timeout=TIMEOUT,
        )
    assert module in str(info.value)


def test_without_a_filter_the_import_guard_warning_lets_the_worker_run(
    plugin_dist, spawnkit_namespace
) -> None:
    module, tok = _guard_warning_site(plugin_dist, spawnkit_namespace)
    run = run_entry(
        call_tokenize,
        module,
        namespace=spawnkit_namespace,
        rank_extra=lambda rank: {"tok": tok},
        timeout=TIMEOUT,
    )
    assert run.result == ["tok", "a", "hooked"]
