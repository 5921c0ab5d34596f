"""The ``spawnkit`` command line: bad input, output modes, doctor, launch and bench."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from _cli_support import run_cli
from spawnkit.cli._output import Output
from spawnkit.cli._resolve import check_entry, load_payload_file

SPAWNKIT = str(Path(sys.executable).with_name("spawnkit"))


@pytest.fixture
def entry_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real importable module with a worker function, on sys.path for this test only."""
    name = f"cli_entry_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import os

            def work(payload=None):
                return {"pid": os.getpid(), "payload": payload}

            def fail(payload=None):
                raise ValueError("the entry failed on purpose")

            def exit_three(payload=None):
                raise SystemExit(3)

            def hang(payload=None):
                import time
                time.sleep(600)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    return name


def assert_one_line_usage(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert "Traceback" not in err
    assert "Fix:" in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


# ---------------------------------------------------------------- bad input
def test_unknown_entry_module_is_one_line_exit_2() -> None:
    code, _, err = run_cli("launch", "no_such_module_xyz:main")
    assert_one_line_usage(code, err, "unknown entry", "no_such_module_xyz")


def test_entry_without_colon_is_rejected() -> None:
    code, _, err = run_cli("launch", "just_a_module")
    assert_one_line_usage(code, err, "module:function")


def test_entry_with_missing_function_names_the_module(entry_module: str) -> None:
    code, _, err = run_cli("launch", f"{entry_module}:wrok")
    assert_one_line_usage(code, err, "defines no 'wrok'", "work")


def test_entry_check_accepts_existing_function(entry_module: str) -> None:
    assert check_entry(f"{entry_module}:work") == f"{entry_module}:work"


@pytest.mark.parametrize(
    ("content", "suffix", "needle"),
    [
        (None, ".pkl", "does not exist"),
        (b"", ".pkl", "is empty"),
        (b"hello, not a pickle", ".pkl", "is not a pickle"),
        (pickle.dumps({"a": 1})[:-3], ".pkl", "not a pickle"),
        (pickle.dumps({"a": 1}) + b"junk", ".pkl", "trailing bytes"),
        (b"{not json", ".json", "not valid JSON"),
    ],
)
def test_bad_payload_file(
    tmp_path: Path, entry_module: str, content: bytes | None, suffix: str, needle: str
) -> None:
    path = tmp_path / f"payload{suffix}"
    if content is not None:
        path.write_bytes(content)
    code, _, err = run_cli("launch", f"{entry_module}:work", "--payload-file", str(path))
    assert_one_line_usage(code, err, needle, "payload file")


def test_payload_file_pickle_passes_through_unopened(tmp_path: Path) -> None:
    path = tmp_path / "args.pkl"
    path.write_bytes(pickle.dumps({"lr": 0.1, "steps": [1, 2]}))
    payload = load_payload_file(str(path))
    assert payload.data == path.read_bytes()
    assert payload.materialize() == {"lr": 0.1, "steps": [1, 2]}


def test_payload_file_json_is_captured(tmp_path: Path) -> None:
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"n": 3}))
    assert load_payload_file(str(path)).materialize() == {"n": 3}


def test_unknown_namespace_is_one_line_exit_2() -> None:
    code, _, err = run_cli("doctor", "--namespace", "no.such.engine")
    assert_one_line_usage(code, err, "unknown namespace 'no.such.engine'", "spawnkit.demo")


@pytest.mark.parametrize("command", ["doctor", "launch"])
@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_namespace_is_refused_not_taken_for_the_default(
    command: str, empty: str, entry_module: str
) -> None:
    """``--namespace "$ENGINE_NS"`` with the variable unset ran under spawnkit's default
    namespace: the engine's plugins never loaded, its variables unread, exit 0."""
    argv = ["launch", f"{entry_module}:work"] if command == "launch" else ["doctor"]
    code, out, err = run_cli(*argv, "--namespace", empty, "--timeout", "60")
    assert_one_line_usage(code, err, f"--namespace {empty!r} names no namespace", "leave")
    assert out == ""


def test_namespace_module_attr_must_be_a_namespace() -> None:
    code, _, err = run_cli("doctor", "--namespace", "os:path")
    assert_one_line_usage(code, err, "is not a spawnkit.Namespace")


def test_invalid_start_method_is_one_line_exit_2(entry_module: str) -> None:
    code, _, err = run_cli("launch", f"{entry_module}:work", "--start-method", "fork")
    assert_one_line_usage(code, err, "invalid choice: 'fork'", "spawnkit launch --help")


def test_preload_of_missing_module(entry_module: str) -> None:
    code, _, err = run_cli(
        "launch", f"{entry_module}:work", "--start-method", "forkserver", "--preload", "nope_xyz"
    )
    assert_one_line_usage(code, err, "--preload module 'nope_xyz' cannot be found")


def test_preload_needs_forkserver(entry_module: str) -> None:
    code, _, err = run_cli("launch", f"{entry_module}:work", "--preload", "json")
    assert_one_line_usage(code, err, "--preload needs --start-method forkserver")


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_bad_nprocs(entry_module: str, value: str) -> None:
    code, _, err = run_cli("launch", f"{entry_module}:work", "--nprocs", value)
    assert_one_line_usage(code, err, "--nprocs")


def test_unknown_subcommand() -> None:
    code, _, err = run_cli("lanch")
    assert_one_line_usage(code, err, "invalid choice: 'lanch'")


def test_debug_adds_the_traceback() -> None:
    code, _, err = run_cli("launch", "no_such_module_xyz:main", "--debug")
    assert code == 2
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("spawnkit launch: error: unknown entry")


def test_console_script_bad_input_exit_status() -> None:
    """The installed console script, as a user runs it: exit 2, one line, no traceback."""
    proc = subprocess.run(
        [SPAWNKIT, "launch", "no_such_module_xyz:main"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------- output
def test_plain_table_is_aligned_when_piped() -> None:
    stream = io.StringIO()
    out = Output(stream)
    assert out.rich is False  # StringIO is not a terminal
    out.table(["rank", "stage"], [(0, "load_plugins"), (12, "entry")], title="t")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "t"
    assert lines[1].split() == ["rank", "stage"]
    assert lines[3].index("load_plugins") == lines[1].index("stage")
    assert lines[4].startswith("12")


def test_rich_table_when_forced() -> None:
    stream = io.StringIO()
    Output(stream, rich=True).table(["a", "b"], [("x", 1.5)])
    text = stream.getvalue()
    assert "x" in text and "1.500" in text and "─" in text


# ------------------------------------------------------------------- doctor
@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write real distributions under tmp_path and make this process and its children see them."""
    from spawnkit import _metadata
    from spawnkit.testing import write_distribution

    monkeypatch.syspath_prepend(str(tmp_path))

    def install(name: str, **kwargs: object) -> None:
        write_distribution(tmp_path, name, "1.2", **kwargs)  # type: ignore[arg-type]
        _metadata.clear_cache()

    yield install
    monkeypatch.undo()
    _metadata.clear_cache()


def _uid(tmp_path: Path) -> str:
    return "ns" + "".join(c for c in tmp_path.name if c.isalnum())


def _registered(tmp_path: Path, installed) -> str:
    """A unique namespace whose engine registers it (``spawnkit.namespaces``), as doctor needs."""
    ns = _uid(tmp_path)
    installed(
        f"{ns}-engine",
        entry_points={"spawnkit.namespaces": {ns: f"{ns}_engine:NS"}},
        modules={f"{ns}_engine": f"from spawnkit import Namespace\nNS = Namespace({ns!r})\n"},
    )
    return ns


@pytest.mark.needs_torch
def test_doctor_demo_namespace_json() -> None:
    code, out, err = run_cli("doctor", "--namespace", "spawnkit.demo", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True and data["problems"] == []
    assert {p["name"] for p in data["plugins"]} >= {"batch_timer", "init_banner"}
    result = data["dry_run"]["result"]
    targets = {r["target"] for r in result["registrations"]}
    assert targets >= {
        "spawnkit.demo.scheduler.Scheduler.__init__",
        "spawnkit.demo.scheduler.Scheduler.get_next_batch_to_run",
    }
    report = result["report"]
    assert report["guard"]["armed"] is True and report["guard"]["violations"] == []
    assert report["pid"] != os.getpid()  # it really ran in a spawned child
    assert data["platform"]["selection"]["name"]


def test_doctor_fails_when_a_plugin_would_fail_in_a_worker(tmp_path: Path, installed) -> None:
    ns = _registered(tmp_path, installed)
    installed(
        "exploding-plugin",
        entry_points={f"{ns}.plugins": {"bad": f"{ns}_bad:register"}},
        modules={f"{ns}_bad": "def register():\n    raise RuntimeError('plugin exploded')\n"},
    )
    code, out, err = run_cli("doctor", "--namespace", ns)
    assert code == 1, out + err
    assert "PROBLEM: a worker of this namespace would fail" in out
    problem = out.split("PROBLEM:", 1)[1]
    assert "dry run in a spawned worker failed" in problem
    assert "load_plugins" in problem and "plugin exploded" in problem
    assert "Traceback" not in out  # only with --debug
    code, out, _ = run_cli("doctor", "--namespace", ns, "--debug")
    assert code == 1 and "Traceback" in out


def test_doctor_flags_conflicting_replace_hooks(tmp_path: Path, installed) -> None:
    ns = _registered(tmp_path, installed)
    source = (
        "from spawnkit.namespace import get_namespace\n"
        "from spawnkit.hooks import HookType\n"
        "def one(*a, **k):\n    return 1\n"
        "def two(*a, **k):\n    return 2\n"
        "def register():\n"
        f"    reg = get_namespace({ns!r}).hooks\n"
        "    reg.register('json.dumps', one, HookType.REPLACE)\n"
        "    reg.register('json.dumps', two, HookType.REPLACE)\n"
    )
    installed(
        "replacing-plugin",
        entry_points={f"{ns}.plugins": {"rep": f"{ns}_rep:register"}},
        modules={f"{ns}_rep": source},
    )
    code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 0, out + err  # a conflict is flagged, but the worker would still run
    data = json.loads(out)
    conflicts = data["dry_run"]["result"]["conflicts"]
    assert [c["severity"] for c in conflicts] == ["conflict"]
    assert "2 REPLACE hooks on json.dumps" in conflicts[0]["message"]
    assert any("2 REPLACE hooks" in w for w in data["warnings"])


def test_doctor_issues_hook_conflicts_as_warnings_once_and_escalates(
    tmp_path: Path, installed
) -> None:
    """Issue 21 item 4: doctor knows the hooks (its dry run), so it warns in its own process."""
    import warnings

    from spawnkit.errors import HookConflictWarning

    ns = _registered(tmp_path, installed)
    source = (
        "from spawnkit.namespace import get_namespace\n"
        "from spawnkit.hooks import HookType\n"
        "def one(*a, **k):\n    return 1\n"
        "def two(*a, **k):\n    return 2\n"
        "def register():\n"
        f"    reg = get_namespace({ns!r}).hooks\n"
        "    reg.register('json.dumps', one, HookType.REPLACE)\n"
        "    reg.register('json.dumps', two, HookType.REPLACE)\n"
    )
    installed(
        "replacing-plugin",
        entry_points={f"{ns}.plugins": {"rep": f"{ns}_rep:register"}},
        modules={f"{ns}_rep": source},
    )
    with pytest.warns(HookConflictWarning) as caught:
        code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 0, out + err
    texts = [str(w.message) for w in caught if w.category is HookConflictWarning]
    assert len(texts) == 1 and "2 REPLACE hooks" in texts[0]
    assert f"{ns.upper()}_HOOK_CONFLICTS=error" in texts[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookConflictWarning)
        code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 1, out + err
    assert any("HookConflictError" in p for p in json.loads(out)["problems"])


def test_doctor_warns_of_a_replace_of_the_platform_class(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A general plugin's class REPLACE of the built-in CpuPlatform: the dry run's worker built
    its platform before plugins loaded, so the replacement never ran; doctor said OK, silent."""
    from spawnkit.errors import HookConflictWarning

    ns = _registered(tmp_path, installed)
    source = (
        "from spawnkit.namespace import get_namespace\n"
        "from spawnkit.hooks import HookType\n"
        "from spawnkit.platforms.builtin import CpuPlatform\n"
        "class Tuned(CpuPlatform):\n"
        "    def get_torch_distributed_backend_str(self):\n        return 'mpi'\n"
        "def register():\n"
        f"    get_namespace({ns!r}).hooks.register(\n"
        f"        'spawnkit.platforms.builtin.CpuPlatform', '{ns}_tune:Tuned', HookType.REPLACE)\n"
    )
    installed(
        "tuning-plugin",
        entry_points={f"{ns}.plugins": {"tune": f"{ns}_tune:register"}},
        modules={f"{ns}_tune": source},
    )
    monkeypatch.setenv(f"{ns.upper()}_PLATFORM", "cpu")
    with pytest.warns(HookConflictWarning) as caught:
        code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 0, out + err
    (text,) = [str(w.message) for w in caught if w.category is HookConflictWarning]
    assert "current_platform of namespace" in text and "Tuned's methods" in text
    assert "plugin 'tune' (tuning-plugin 1.2)" in text and f"group '{ns}.platforms'" in text


def test_doctor_lists_unknown_variables_and_strict_env_fails(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 1: doctor shows what a launch would warn about."""
    ns = _registered(tmp_path, installed)
    prefix = ns.upper()
    monkeypatch.setenv(f"{prefix}_PLUGIN", "x")
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 0, out + err
    (found,) = [w for w in json.loads(out)["warnings"] if w.startswith("environment:")]
    assert f"did you mean {prefix}_PLUGINS?" in found
    monkeypatch.setenv(f"{prefix}_STRICT_ENV", "1")
    code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 1, out + err
    problems = json.loads(out)["problems"]
    assert any(f"{prefix}_PLUGIN is set" in p for p in problems)


def test_doctor_lists_a_cpu_engine_variable_a_plugin_overrode(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``<PREFIX>_USE_CPU_ENGINE=1`` while a platform plugin activates: a launch warns that the
    variable is not read, doctor (whose dry run's launch warning it ignored) said nothing."""
    ns = _registered(tmp_path, installed)
    source = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class Chip(Platform):\n    _enum = PlatformEnum.OOT\n"
        "    device_name = 'chip'\n    device_type = 'cpu'\n"
        f"def activate():\n    return '{ns}_chip.Chip'\n"
    )
    installed(
        "chip-platform",
        entry_points={f"{ns}.platforms": {"chip": f"{ns}_chip:activate"}},
        modules={f"{ns}_chip": source},
    )
    prefix = ns.upper()
    monkeypatch.setenv(f"{prefix}_USE_CPU_ENGINE", "1")
    code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 0, out + err
    data = json.loads(out)
    (found,) = [w for w in data["warnings"] if "_USE_CPU_ENGINE" in w]
    assert found.startswith(f"environment: {prefix}_USE_CPU_ENGINE='1' does not take effect")
    assert "platform plugin 'chip' activated" in found and f"{prefix}_PLATFORM=cpu" in found
    monkeypatch.setenv(f"{prefix}_STRICT_ENV", "1")  # a launch refuses it: doctor fails
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 1, out + err
    assert any("_USE_CPU_ENGINE='1' does not take effect" in p for p in json.loads(out)["problems"])
    monkeypatch.setenv(f"{prefix}_PLATFORM", "cpu")  # control: read, and the CPU is chosen
    monkeypatch.delenv(f"{prefix}_STRICT_ENV")
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 0 and not [w for w in json.loads(out)["warnings"] if "CPU_ENGINE" in w]


@pytest.mark.parametrize("raw", ["", ","])
def test_doctor_says_an_allow_list_that_names_no_plugin(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    """``<PREFIX>_PLUGINS=','`` selects none, as ``''`` does; doctor said only the latter."""
    ns = _registered(tmp_path, installed)
    installed(
        "mine-plugin",
        entry_points={f"{ns}.plugins": {"mine": f"{ns}_mine:register"}},
        modules={f"{ns}_mine": "def register():\n    pass\n"},
    )
    var = f"{ns.upper()}_PLUGINS"
    monkeypatch.setenv(var, raw)
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 0, out + err
    (found,) = [w for w in json.loads(out)["warnings"] if "is set but blank" in w]
    assert found.startswith(f"{var}={raw!r} is set but blank") and "'mine' (" in found


def test_doctor_without_a_child_fails_on_a_plugin_name_a_launch_refuses(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``<PREFIX>_PLUGINS=mnie`` (a typo): every launch refuses in its parent (``PluginError``)
    before any worker, from metadata alone, but only doctor's dry run said so: ``--no-child``
    printed "OK" and exited 0.  Lenient mode, where a launch runs without it, stays OK."""
    ns = _registered(tmp_path, installed)
    installed(
        "mine-plugin",
        entry_points={f"{ns}.plugins": {"mine": f"{ns}_mine:register"}},
        modules={f"{ns}_mine": "def register():\n    pass\n"},
    )
    prefix = ns.upper()
    monkeypatch.setenv(f"{prefix}_PLUGINS", "mnie")
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 1, out + err
    (problem,) = json.loads(out)["problems"]
    assert problem.startswith(f"launch refused: PluginError: {prefix}_PLUGINS='mnie' selects")
    code, out, err = run_cli("doctor", "--namespace", ns, "--json")  # said once, not twice
    assert code == 1 and json.loads(out)["problems"] == [problem], out + err
    monkeypatch.setenv(f"{prefix}_LENIENT_PLUGINS", "1")
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 0, out + err
    assert any("Lenient mode" in w for w in json.loads(out)["warnings"])


@pytest.mark.parametrize("suffix", ["IMPORT_GUARD", "HOOK_CONFLICTS"])
def test_doctor_without_a_child_fails_on_a_policy_a_launch_refuses(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """``<PREFIX>_IMPORT_GUARD=strict`` (no such policy): every launch refuses it in its parent
    (``ConfigError``), and ``--no-child`` printed "OK", exit 0."""
    ns = _registered(tmp_path, installed)
    var = f"{ns.upper()}_{suffix}"
    monkeypatch.setenv(var, "strict")
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 1, out + err
    (problem,) = json.loads(out)["problems"]
    assert problem.startswith(f"launch refused: ConfigError: {var}='strict' is not a")
    monkeypatch.setenv(var, "off" if suffix == "IMPORT_GUARD" else "ignore")  # control
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    assert code == 0, out + err


def test_doctor_lists_a_plugin_in_a_misspelt_group_once(tmp_path: Path, installed) -> None:
    """A plugin declared in ``<ns>.plugin`` (no ``s``) is never loaded; a launch warns of it
    (``PluginSelectionWarning``), doctor's report said nothing (``--no-child``: not a word;
    with the dry run only its launch's raw warning on stderr, outside ``--json``)."""
    ns = _registered(tmp_path, installed)
    installed(
        "slip-plugin",
        entry_points={f"{ns}.plugin": {"slip": f"{ns}_slip:register"}},
        modules={f"{ns}_slip": "def register():\n    pass\n"},
    )
    for extra in (["--no-child"], []):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code, out, err = run_cli("doctor", "--namespace", ns, "--json", *extra)
        assert code == 0, out + err
        (found,) = [w for w in json.loads(out)["warnings"] if "slip-plugin" in w]
        assert found.startswith("plugins: distribution slip-plugin 1.2 declares")
        assert f"in group '{ns}.plugin', which no namespace reads" in found
        # said once, in the report: not again by the dry run's launch
        assert not [w for w in caught if "slip-plugin" in str(w.message)], extra


@pytest.mark.parametrize("lenient", [False, True])
def test_doctor_says_a_plugin_selection_warning_once_with_its_dry_run(
    tmp_path: Path, installed, monkeypatch: pytest.MonkeyPatch, lenient: bool
) -> None:
    """A blank allow-list (or a lenient run without a name that matches nothing) is in doctor's
    report; the dry run's launch warned of it again, raw, on stderr."""
    ns = _registered(tmp_path, installed)
    installed(
        "mine-plugin",
        entry_points={f"{ns}.plugins": {"mine": f"{ns}_mine:register"}},
        modules={f"{ns}_mine": "def register():\n    pass\n"},
    )
    monkeypatch.setenv(f"{ns.upper()}_PLUGINS", "mnie" if lenient else "")
    if lenient:
        monkeypatch.setenv(f"{ns.upper()}_LENIENT_PLUGINS", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 0, out + err
    said = "Lenient mode" if lenient else "is set but blank"
    assert [w for w in json.loads(out)["warnings"] if said in w], out
    assert not [w for w in caught if said in str(w.message)]


def test_doctor_timeout_bounds_a_hung_platform_activate(tmp_path: Path, installed) -> None:
    """A platform plugin whose ``activate()`` never returns (a driver query that hangs): doctor
    asks it in its own process, and ``--timeout`` bounded only the dry run, so doctor hung."""
    ns = _registered(tmp_path, installed)
    installed(
        "hang-platform",
        entry_points={f"{ns}.platforms": {"hang": f"{ns}_hang:activate"}},
        modules={f"{ns}_hang": "import time\n\ndef activate():\n    time.sleep(300)\n"},
    )
    import spawnkit

    src = str(Path(spawnkit.__file__).resolve().parents[1])  # the spawnkit under test
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), src])}
    argv = ["doctor", "--namespace", ns, "--timeout", "1", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "spawnkit.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,  # before: doctor waited for the plugin (300 s)
        env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (problem,) = json.loads(done.stdout)["problems"]
    assert problem.startswith("platform: discovery did not finish within --timeout 1 s")
    assert "platform plugin 'hang'" in problem and "hang-platform 1.2" in problem
    assert f"{ns}_hang.py:4" in problem and "activate() has not returned" in problem


def test_doctor_fails_on_ambiguous_platform(tmp_path: Path, installed) -> None:
    ns = _registered(tmp_path, installed)
    source = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class A(Platform):\n    _enum = PlatformEnum.OOT\n"
        "    device_name = 'dev_a'\n    device_type = 'cpu'\n"
        "class B(Platform):\n    _enum = PlatformEnum.OOT\n"
        "    device_name = 'dev_b'\n    device_type = 'cpu'\n"
        f"def act_a():\n    return '{ns}_plat.A'\n"
        f"def act_b():\n    return '{ns}_plat.B'\n"
    )
    installed(
        "two-platforms",
        entry_points={
            f"{ns}.platforms": {"dev_a": f"{ns}_plat:act_a", "dev_b": f"{ns}_plat:act_b"}
        },
        modules={f"{ns}_plat": source},
    )
    code, out, _ = run_cli("doctor", "--namespace", ns, "--no-child")
    assert code == 1
    problem = out.split("PROBLEM:", 1)[1]
    assert "PlatformConflictError" in problem
    assert "activated" in out and "dev_a" in out and "dev_b" in out


# ------------------------------------------------------------------- launch
def test_launch_runs_ranks_and_prints_stage_timings(tmp_path: Path, entry_module: str) -> None:
    payload = tmp_path / "p.json"
    payload.write_text(json.dumps({"x": 1}))
    out_json = tmp_path / "launch.json"
    code, out, err = run_cli(
        "launch",
        f"{entry_module}:work",
        "--nprocs",
        "2",
        "--payload-file",
        str(payload),
        "--timeout",
        "120",
        "--json",
        str(out_json),
    )
    assert code == 0, err
    assert "stage timings (ms)" in out
    for stage in ("initialize_platform", "load_plugins", "apply_hooks", "entry"):
        assert stage in out
    assert "rank 0 returned: {'pid':" in out and "'payload': {'x': 1}" in out
    data = json.loads(out_json.read_text())
    assert data["ok"] is True and len(data["reports"]) == 2
    assert len({r["pid"] for r in data["reports"]}) == 2


def test_launch_timeout_names_the_cli_option(entry_module: str) -> None:
    code, _, err = run_cli("launch", f"{entry_module}:hang", "--timeout", "8")
    assert code == 1
    # The bootstrap had finished: the entry overran (issue 21 item 3).
    assert "EntryTimeoutError" in err and "BootstrapTimeoutError" not in err
    assert "in hang" in err  # where it hangs
    assert "pass a larger --timeout" in err and "join_timeout=" not in err


@pytest.mark.parametrize(("function", "status"), [("fail", 1), ("exit_three", 3)])
def test_launch_exit_status_and_root_cause(entry_module: str, function: str, status: int) -> None:
    code, _, err = run_cli("launch", f"{entry_module}:{function}", "--timeout", "120")
    assert code == status
    first = err.splitlines()[0]
    assert first.startswith("spawnkit: FAILED: ")
    assert "rank 0" in first and "'entry'" in first
    if function == "fail":
        assert "ValueError: the entry failed on purpose" in first
        assert "Child traceback" in err  # the child's traceback reaches the user
    else:
        assert "sys.exit(3)" in first


def test_doctor_shows_each_hooks_state_and_reason(tmp_path: Path, installed) -> None:
    ns = _registered(tmp_path, installed)
    source = (
        "from spawnkit.namespace import get_namespace\n"
        "def after(result, *a, **k):\n    return result\n"
        "def is_hip():\n    return False\n"
        "def register():\n"
        f"    reg = get_namespace({ns!r}).hooks\n"
        "    reg.register('json.dumps', after)\n"
        "    reg.register('vllm_absent_xyz.layers.f', after, optional=True)\n"
        "    reg.register('json.loads', after, condition=is_hip)\n"
        "    reg.register('csv.reader', after, on_import=True)\n"
        "    reg.provide_module('aiter_absent_xyz.ops')\n"
    )
    installed(
        "stateful-plugin",
        entry_points={f"{ns}.plugins": {"st": f"{ns}_st:register"}},
        modules={f"{ns}_st": source},
    )
    code, out, err = run_cli("doctor", "--namespace", ns, "--json")
    assert code == 0, out + err
    rows = json.loads(out)["dry_run"]["result"]["registrations"]
    states = {r["target"]: (r["state"], r["reason"]) for r in rows}
    assert states["json.dumps"] == ("applied", "")
    assert states["vllm_absent_xyz.layers.f"] == (
        "skipped",
        "module 'vllm_absent_xyz' is not installed",
    )
    assert states["json.loads"] == ("skipped", f"condition {ns}_st:is_hip is false")
    assert states["csv.reader"][0] == "pending"
    assert states["aiter_absent_xyz.ops"][0] == "provided"
    code, out, err = run_cli("doctor", "--namespace", ns)
    assert code == 0, out + err
    assert "state" in out and "module 'vllm_absent_xyz' is not installed" in out
