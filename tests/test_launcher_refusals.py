"""What spawn_with_plugins() refuses in the parent, before any worker exists, and how it says so.

Each case used to start workers that then failed one by one (or ran doing the
wrong thing, or waited forever); each is now one typed error naming the
argument, variable or plugin, and no child process is created.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from _launcher_support import Site, assert_group_gone, fault_env, make_site
from spawnkit import _metadata, build_spec, spawn_with_plugins
from spawnkit.errors import (
    BootstrapError,
    BootstrapTimeoutError,
    ChildExitedError,
    ConfigError,
    EntryResolutionError,
    PlatformPluginError,
    PluginError,
    SpawnkitError,
)
from spawnkit.hooks.plugins import PluginSelectionWarning
from spawnkit.testing import write_distribution


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    yield from make_site(tmp_path, monkeypatch)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _refused(site: Site, exc: type[BaseException], entry: str = "", **kwargs: Any) -> Any:
    """Call spawn_with_plugins expecting ``exc``; assert that no process was started."""
    before = _children()
    with pytest.raises(exc) as info:
        spawn_with_plugins(entry or site.entry(), namespace=site.ns, **kwargs)
    assert _children() - before == set(), "a child process was created before the refusal"
    return info.value


# ------------------------------------------------------------------ item 10
def test_entry_whose_top_level_module_does_not_exist_is_refused_in_the_parent(site: Site) -> None:
    err = _refused(site, EntryResolutionError, entry="no_such_module_zq:main", nprocs=2)
    assert "no module named 'no_such_module_zq'" in str(err)
    assert "No worker was started" in str(err)


def test_a_misspelled_top_level_package_gets_a_did_you_mean(site: Site) -> None:
    typo = site.pkg[:-1] + ".entry:run"  # drops the last letter of the package name
    err = _refused(site, EntryResolutionError, entry=typo)
    assert f"Did you mean {site.pkg!r}" in str(err)


def test_entry_check_imports_nothing(site: Site) -> None:
    """Only the top-level name is looked up: the entry's module is not imported in the parent."""
    import sys

    with spawn_with_plugins(site.entry("quick"), namespace=site.ns, ready_timeout=60) as group:
        assert f"{site.pkg}.entry" not in sys.modules
        assert group.join(timeout=60) is True


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("ready_timeout", 0),
        ("ready_timeout", -1),
        ("ready_timeout", math.nan),
        ("ready_timeout", math.inf),
        ("ready_timeout", "30"),
        ("join_timeout", -5),
        ("join_timeout", 0),
        ("join_timeout", math.nan),
        ("join_timeout", math.inf),
        ("grace_period", -1),
        ("grace_period", math.nan),
        ("grace_period", None),
        ("grace_period", "3"),
        ("grace_period", math.inf),
        ("trace", 5),
        ("nprocs", True),
        ("nprocs", 0),
        ("nprocs", 2.0),
    ],
)
def test_bad_launcher_argument_is_a_value_error_naming_it(
    site: Site, argument: str, value: Any
) -> None:
    err = _refused(site, ConfigError, **{argument: value})
    assert isinstance(err, ValueError) and isinstance(err, SpawnkitError)
    assert err.setting == argument
    assert str(err).startswith(f"{argument}=")
    assert "None ()" not in str(err) and "pass None ()" not in str(err)  # None is no choice


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SKT_X": None}, "None would arrive as the text 'None'"),
        ({"SKT_X": True}, "Pass '1' or '0'"),
        ({"SKT_X": 4}, "e.g. '4'"),
        ({"SKT_X": "a\0b"}, "cannot hold a NUL"),
        ({"SKT=X": "1"}, "without '='"),
        ({"": "1"}, "non-empty str"),
        ({1: "1"}, "non-empty str"),
    ],
)
def test_an_env_value_that_is_not_text_is_refused_not_stringified(
    site: Site, env: dict[Any, Any], says: str
) -> None:
    """``str(value)`` used to set ``None`` as the text "None" and ``True`` as "True"."""
    for method in ("spawn", "forkserver"):
        err = _refused(site, ConfigError, env=env, start_method=method)
        assert err.setting == "env" and says in str(err), err
        assert "No worker was started" in str(err)


@pytest.mark.parametrize("run_id", ["", "  ", 5])
def test_a_blank_run_id_is_refused_not_replaced_by_a_random_one(
    tmp_path: Path, run_id: Any
) -> None:
    """``run_id=""`` got a random id, another on each call (the caller's record and
    ``cleanup(run_id)`` never matched the workers); ``"  "`` was kept as the id itself."""
    from spawnkit import write_launch_spec

    for call in (
        lambda: build_spec("json:dumps", run_id=run_id),
        lambda: write_launch_spec(tmp_path / "spec", "json:dumps", key="k" * 32, run_id=run_id),
    ):
        with pytest.raises(ConfigError, match="a run id is non-blank text") as info:
            call()
        assert info.value.setting == "run_id" and "cleanup(run_id)" in str(info.value)
    assert not (tmp_path / "spec").exists()
    assert build_spec("json:dumps", run_id="job-7").run_id == "job-7"  # a given id is kept


@pytest.mark.parametrize(
    ("preload", "says"),
    [
        ("json", "one string, which would be read as its letters"),  # was: preload 'j' failed
        (("json", ""), "'' is not a module name"),
        (("json", 3), "3 is not a module name"),
        (("jsno",), "no module named 'jsno'"),  # was: a server started, then failed
    ],
)
def test_a_preload_the_server_could_not_import_is_refused_in_the_parent(
    site: Site, preload: Any, says: str
) -> None:
    err = _refused(site, ConfigError, start_method="forkserver", preload=preload)
    assert err.setting == "preload" and says in str(err), err
    assert "No worker was started" in str(err)


def test_a_misspelled_preload_gets_a_did_you_mean(site: Site) -> None:
    err = _refused(site, ConfigError, start_method="forkserver", preload=(site.pkg[:-1],))
    assert f"Did you mean {site.pkg!r}" in str(err), err


def test_get_context_refuses_a_preload_string_too() -> None:
    from spawnkit.launch.context import get_context

    with pytest.raises(ConfigError, match=r"get_context\(preload='json'\): one string"):
        get_context("forkserver", preload="json")


@pytest.mark.parametrize(
    ("rank_extra", "says"),
    [
        ({"port": 1}, "must be a function of the rank"),  # was: TypeError, 'dict' not callable
        (lambda rank: None, "rank_extra(0) returned None"),
        (lambda rank: {1: "x"}, "a mapping with str keys"),
    ],
)
def test_a_rank_extra_that_gives_no_mapping_is_a_config_error(
    site: Site, rank_extra: Any, says: str
) -> None:
    err = _refused(site, ConfigError, rank_extra=rank_extra)
    assert err.setting == "rank_extra" and says in str(err), err


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_payload_holding_an_open_file_is_refused_before_any_worker_starts(
    site: Site, tmp_path: Path, method: str
) -> None:
    """``ServerArgs(log=open(path, "a+"))``: plain pickle refuses the file, and the by-value
    fallback (cloudpickle) sent each worker a copy of its contents (an ``io.StringIO``), so
    every worker's writes vanished while the run exited 0."""
    path = tmp_path / "events.log"
    with open(path, "a+") as log:
        payload = {"engine": site.box(log)}
        err = _refused(site, BootstrapError, payload=payload, nprocs=2, start_method=method)
    text = str(err)
    assert err.kind == "payload"
    assert f"payload['engine'].value is an open file ({str(path)!r}, mode 'a+')" in text, text
    assert "io.StringIO" in text and "Pass the path instead" in text
    assert path.read_text() == ""


_SHM_ENTRY = """
def fill(i, t):
    t[i] = 10 + i  # each rank writes its slot of the launcher's buffer
    return float(t.sum())
"""


def _shm_entry(site: Site) -> str:
    (site.root / f"{site.tag}_shm.py").write_text(_SHM_ENTRY)
    return f"{site.tag}_shm:fill"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_shared_memory_tensor_payload_is_refused_not_copied(site: Site, method: str) -> None:
    """``torch.multiprocessing.spawn(fn, args=(t,))`` rewritten as PlainChildWarning advises:
    plain pickle copied the shared tensor into the payload, so the workers' writes never
    reached the launcher's tensor, exit 0."""
    torch = pytest.importorskip("torch")
    t = torch.zeros(2).share_memory_()
    err = _refused(
        site, BootstrapError, entry=_shm_entry(site), payload={"buf": t}, nprocs=2,
        start_method=method, entry_args=("local_rank", "payload"),
    )  # fmt: skip
    text = str(err)
    assert err.kind == "payload" and "payload['buf'] is a torch tensor in shared memory" in text
    assert "rank_extra=lambda rank: {'buf': t}" in text and "t.clone()" in text, text
    assert t.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_shared_tensor_goes_shared_through_rank_extra_and_a_plain_one_in_the_payload(
    site: Site, method: str
) -> None:
    """The controls: the refusal's fix shares the tensor; a tensor not in shared memory (a
    copy is all a payload ever was) still travels in the payload."""
    torch = pytest.importorskip("torch")
    entry, t = _shm_entry(site), torch.zeros(2).share_memory_()
    with spawn_with_plugins(
        entry, namespace=site.ns, nprocs=2, start_method=method, ready_timeout=60,
        rank_extra=lambda rank: {"buf": t}, entry_args=("local_rank", "buf"),
    ) as group:  # fmt: skip
        group.results(timeout=60)
    assert t.tolist() == [10.0, 11.0]
    with spawn_with_plugins(
        entry, torch.ones(2), namespace=site.ns, nprocs=2, start_method=method,
        ready_timeout=60, entry_args=("local_rank", "payload"),
    ) as group:  # fmt: skip
        assert sorted(group.results(timeout=60)) == [11.0, 12.0]


@pytest.mark.parametrize("make", ["Value", "Queue", "Event", "Lock"])
def test_a_multiprocessing_shared_object_in_the_payload_is_a_payload_refusal(
    site: Site, make: str
) -> None:
    """Was a bare ``RuntimeError: ... should only be shared between processes through
    inheritance`` at the launch line, naming neither the payload nor the fix."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    shared = getattr(ctx, make)(*(("i", 0) if make == "Value" else ()))
    err = _refused(site, BootstrapError, payload={"cfg": [1, shared]}, nprocs=2)
    text = str(err)
    assert err.kind == "payload" and isinstance(err.__cause__, RuntimeError), text
    assert "payload['cfg'][1] is a multiprocessing shared object" in text, text
    assert "through inheritance" in text and "rank_extra=lambda rank:" in text


def test_a_multiprocessing_value_goes_through_rank_extra(site: Site) -> None:
    """The control: the refusal's fix works (its value reaches each rank's start)."""
    import multiprocessing

    value = multiprocessing.get_context("spawn").Value("i", 0)
    (site.root / f"{site.tag}_val.py").write_text("def bump(v):\n    v.value += 5\n")
    with spawn_with_plugins(
        f"{site.tag}_val:bump", namespace=site.ns, ready_timeout=60,
        rank_extra=lambda rank: {"v": value}, entry_args=("v",),
    ) as group:  # fmt: skip
        group.results(timeout=60)
    assert value.value == 5


def test_a_by_value_payload_without_files_still_goes(site: Site) -> None:
    """The control: what cloudpickle is there for (a lambda) still travels by value, with a
    logger (sent by name, as plain pickle sends it)."""
    payload = {"scale": lambda x: 3 * x, "log": logging.getLogger("spawnkit.test.payload")}
    with spawn_with_plugins(
        site.entry("scaled"), payload, namespace=site.ns, ready_timeout=60
    ) as group:
        assert group.results(timeout=60) == [(42, "spawnkit.test.payload")]


def test_zero_grace_period_is_allowed(site: Site) -> None:
    with spawn_with_plugins(site.entry("quick"), namespace=site.ns, grace_period=0) as group:
        assert group.join(timeout=60) is True


@pytest.mark.parametrize("method", ["wait_ready", "join", "results"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1, True])
def test_bad_timeout_of_a_wait_is_refused_and_the_group_keeps_running(
    site: Site, method: str, value: Any
) -> None:
    with spawn_with_plugins(site.entry("sleep_forever"), namespace=site.ns) as group:
        with pytest.raises(ConfigError, match=r"timeout=") as info:
            getattr(group, method)(timeout=value)
        assert info.value.setting == "timeout"
        assert group.failure is None and group.exit_codes == [None]
    assert_group_gone(group)


# ------------------------------------------------------------------ item 12
@pytest.mark.parametrize(
    ("entry", "codes"), [("sleep_forever", [-15, -15]), ("exits_on_sigterm", [0, 0])]
)
def test_join_after_terminate_is_false(site: Site, entry: str, codes: list[int]) -> None:
    """Stopped work is not done work: a supervisor must not read a terminate() as success.
    Nor where the entry turns SIGTERM into ``SystemExit`` and ends with code 0 (vLLM's engine
    core): ``join()`` said True and ``results()`` gave ``[None, None]``."""
    with spawn_with_plugins(site.entry(entry), nprocs=2, namespace=site.ns) as group:
        group.wait_ready(timeout=60)
        time.sleep(0.2)  # into the entry: its handler is set
        group.terminate()
        assert group.join(timeout=5) is False
        assert group.join() is False  # at once, every time
        with pytest.raises(ChildExitedError, match=r"terminate\(\)"):
            group.results(timeout=5)
    assert group.exit_codes == codes


def test_join_is_true_when_every_entry_returned_even_after_terminate(site: Site) -> None:
    with spawn_with_plugins(site.entry("quick"), nprocs=2, namespace=site.ns) as group:
        assert group.join(timeout=60) is True
        group.terminate()
        assert group.join(timeout=1) is True


def test_wait_ready_timeout_names_the_timeout_that_expired(site: Site) -> None:
    group = spawn_with_plugins(
        site.entry(),
        namespace=site.ns,
        env=fault_env("load_plugins", "hang"),
        ready_timeout=300,
    )
    with group, pytest.raises(BootstrapTimeoutError) as info:
        group.wait_ready(timeout=1.5)
    text = str(info.value)
    assert "wait_ready(timeout=1.5) expired" in text
    assert "a larger timeout= to wait_ready()" in text
    assert "ready_timeout=300" not in text


def test_ready_timeout_expiring_still_names_ready_timeout(site: Site) -> None:
    group = spawn_with_plugins(
        site.entry(),
        namespace=site.ns,
        env=fault_env("load_plugins", "hang"),
        ready_timeout=1.5,
    )
    with group, pytest.raises(BootstrapTimeoutError) as info:
        group.wait_ready()
    assert "(ready_timeout=1.5)" in str(info.value)
    assert "a larger ready_timeout= to spawn_with_plugins()" in str(info.value)


# ------------------------------------------------------------------- item 4
def test_misspelled_plugin_name_is_refused_in_the_parent(site: Site) -> None:
    var = site.ns.config.plugins_var
    err = _refused(site, PluginError, env={var: "faultplg"}, nprocs=2)
    text = str(err)
    assert "'faultplg' (did you mean 'faultplug'?)" in text
    assert "installed: faultplug" in text
    assert var in text and site.ns.config.lenient_var in text
    assert err.plugin == "faultplg"


def test_misspelled_plugin_name_from_the_launchers_environment_is_refused(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(site.ns.config.plugins_var, "faultplug,tracr")
    err = _refused(site, PluginError)
    assert "'tracr'" in str(err)


def test_lenient_turns_a_misspelled_plugin_into_one_warning_at_the_callers_line(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    env = {site.ns.config.plugins_var: "faultplg", site.ns.config.lenient_var: "1"}
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        group = spawn_with_plugins(site.entry("quick"), namespace=site.ns, env=env)
    with group:
        (report,) = group.wait_ready(timeout=60)
        # the platform's own plugin stays: the allow-list does not leave out its kernels
        assert [p["name"] for p in report.plugins] == ["faultplug"]
    ours = [w for w in seen if issubclass(w.category, PluginSelectionWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert ours[0].filename == __file__  # the user's call, not a spawnkit module
    assert "running without it" in str(ours[0].message)
    assert not [r for r in caplog.records if "faultplg" in r.getMessage()]


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_an_allow_list_naming_only_the_users_plugin_keeps_the_platforms_own(
    site: Site, start_method: str
) -> None:
    """``<PREFIX>_PLUGINS=mine`` with the platform plugin 'faultdev' selected: its distribution's
    general plugin 'faultplug' was frozen out of the spec, so every worker ran the unhooked
    code and nothing said so. Parent and workers now agree that it stays."""
    write_distribution(
        site.root,
        f"{site.tag}-mine",
        "1.0",
        entry_points={site.ns.config.plugin_group: {"mine": f"{site.tag}_mine:register"}},
        modules={f"{site.tag}_mine": "def register():\n    pass\n"},
    )
    _metadata.clear_cache()
    env = {site.ns.config.plugins_var: "mine"}
    assert build_spec(site.entry(), namespace=site.ns, env=env).plugins == ("faultplug", "mine")
    with spawn_with_plugins(
        site.entry(), namespace=site.ns, env=env, start_method=start_method, ready_timeout=60
    ) as group:
        (report,) = group.wait_ready(timeout=60)
        assert [p["name"] for p in report.plugins] == ["faultplug", "mine"]
        (result,) = group.results(timeout=60)
    assert result["hooked"] == "orig+hooked"


@pytest.mark.parametrize("raw", [",", " , "])
def test_an_allow_list_of_only_separators_is_said_at_the_launch_line(site: Site, raw: str) -> None:
    """``<PREFIX>_PLUGINS=${A},${B}`` with both unset is ``','``: the workers ran without the
    user's plugin, and where ``''`` is said, this was not."""
    write_distribution(
        site.root,
        f"{site.tag}-mine",
        "1.0",
        entry_points={site.ns.config.plugin_group: {"mine": f"{site.tag}_mine:register"}},
        modules={f"{site.tag}_mine": "def register():\n    pass\n"},
    )
    _metadata.clear_cache()
    var = site.ns.config.plugins_var
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        group = spawn_with_plugins(site.entry("quick"), namespace=site.ns, env={var: raw})
    with group:
        (report,) = group.wait_ready(timeout=60)
        assert [p["name"] for p in report.plugins] == ["faultplug"]  # the platform's own
    ours = [w for w in seen if issubclass(w.category, PluginSelectionWarning)]
    assert len(ours) == 1 and ours[0].filename == __file__, [str(w.message) for w in ours]
    text = str(ours[0].message)
    assert text.startswith(f"{var}={raw!r} (in env=) is set but blank (only separators")
    assert f"'mine' ({site.tag}-mine 1.0)" in text and "faultplug" not in text


def test_invalid_guard_policy_is_refused_naming_the_variable(site: Site) -> None:
    var = site.ns.config.guard_var
    err = _refused(site, ConfigError, env={var: "warnn"})
    assert err.setting == var
    assert str(err).startswith(f"{var}='warnn' is not an import guard policy")


def test_invalid_lenient_value_is_refused_naming_the_variable(site: Site) -> None:
    var = site.ns.config.lenient_var
    err = _refused(site, ConfigError, env={var: "maybe"})
    assert err.setting == var


def test_plugin_name_of_two_distributions_is_refused_in_the_parent(site: Site) -> None:
    write_distribution(
        site.root,
        f"{site.tag}-copycat",
        "2.0",
        entry_points={site.ns.config.plugin_group: {"faultplug": f"{site.tag}_copycat:register"}},
        modules={f"{site.tag}_copycat": "def register():\n    pass\n"},
    )
    _metadata.clear_cache()
    err = _refused(site, PluginError)
    assert "several distributions" in str(err)
    assert f"{site.tag}-copycat 2.0" in str(err) or f"{site.tag}_copycat 2.0" in str(err)


@pytest.mark.parametrize("platform", ["cpu", "faultdev"])
def test_a_platform_name_of_two_distributions_is_refused_whichever_platform_is_selected(
    site: Site, platform: str
) -> None:
    """chipa and chipb both declare platform 'dup', each with a general plugin, and the launch
    selects another platform: the workers ran one of the two kernels plugins (which one,
    by directory listing order) on that platform, while discover() said the other was
    excluded. Now the parent refuses before any worker starts, naming both distributions."""
    plugins, platforms = site.ns.config.plugin_group, site.ns.config.platform_group
    for chip in ("chipa", "chipb"):
        mod = f"{site.tag}_{chip}"
        write_distribution(
            site.root,
            f"{site.tag}-{chip}",
            "1.0",
            entry_points={
                platforms: {"dup": f"{mod}:activate"},
                plugins: {f"{chip}_kern": f"{mod}:register"},
            },
            modules={mod: "def activate():\n    return None\ndef register():\n    pass\n"},
        )
    _metadata.clear_cache()
    err = _refused(site, PlatformPluginError, env={site.ns.config.platform_var: platform})
    text = str(err)
    assert "2 platform entry points are named 'dup'" in text
    assert f"{site.tag}-chipa 1.0" in text and f"{site.tag}-chipb 1.0" in text
    assert "Uninstall one of the distributions or rename its entry point" in text


# -------------------------------------------------- warm start under a deep TMPDIR
def test_a_temp_dir_too_deep_for_the_servers_socket_is_a_config_error_naming_tmpdir(
    tmp_path: Path,
) -> None:
    """A bare ``OSError: AF_UNIX path too long`` surfaced as an internal error before."""
    deep = tmp_path / ("d" * 110)
    deep.mkdir()
    script = tmp_path / "launch_deep.py"
    script.write_text(
        "from spawnkit import spawn_with_plugins\n"
        "from spawnkit.errors import ConfigError\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        "        spawn_with_plugins('os:getpid', start_method='forkserver', ready_timeout=60)\n"
        "    except ConfigError as exc:\n"
        "        print('REFUSED', exc.setting, str(exc).splitlines()[0])\n"
    )
    env = {**os.environ, "TMPDIR": str(deep)}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED TMPDIR" in proc.stdout and "Set TMPDIR to a short path" in proc.stdout
