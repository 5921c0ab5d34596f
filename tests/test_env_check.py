"""Issue 21 items 1 and 2: the launcher's look at the environment its workers will see.

Item 1: a misspelled ``<PREFIX>_*`` variable (``MINIENG_PLUGIN``) or another
namespace's variable (``SPAWNKIT_PLATFORM`` while launching ``MINIENG``) is one
``EnvVariableWarning`` per launch, in the parent, with a did-you-mean;
``<PREFIX>_STRICT_ENV=1`` refuses it.  Item 2: ``env=`` counts in platform
selection exactly as if set in the parent: a device visible only through it is
selected, and the parent's ``os.environ`` is restored exactly.  Real
distributions on a private site directory; one real spawned worker.
"""

from __future__ import annotations

import ast
import os
import re
import threading
import uuid
import warnings
from pathlib import Path

import pytest

import spawnkit
from spawnkit import _metadata, spawn_with_plugins
from spawnkit.errors import ConfigError, EnvVariableWarning
from spawnkit.launch import build_spec
from spawnkit.launch._env_check import find_env_problems
from spawnkit.namespace import Namespace, get_namespace
from spawnkit.testing import write_distribution


def _ns(**settings: object) -> Namespace:
    tag = f"ec{uuid.uuid4().hex[:8]}"
    return Namespace(tag, env_prefix=tag.upper(), **settings)


def _env_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, EnvVariableWarning)]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    _metadata.clear_cache()
    yield root
    _metadata.clear_cache()


# ------------------------------------------------------------------- item 1
def test_a_misspelled_variable_warns_once_per_launch_with_did_you_mean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = _ns()
    prefix = ns.env_prefix
    monkeypatch.setenv(f"{prefix}_PLUGIN", "general")  # the S is missing
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        build_spec("os:getpid", namespace=ns)
        build_spec("os:getpid", namespace=ns)
    found = _env_warnings(record)
    assert len(found) == 2, found  # once per launch, not once per process
    assert f"{prefix}_PLUGIN is set" in found[0]
    assert f"did you mean {prefix}_PLUGINS?" in found[0]
    assert f"{prefix}_STRICT_ENV=1" in found[0]  # the knob that refuses it
    assert record[0].filename == __file__  # at the caller's line


def test_a_variable_in_another_case_is_named_with_the_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the prefix was compared case-sensitively, so a lower-case name (a .env file, a
    # manifest) was never read and never named: every plugin loaded, nothing said.
    ns = _ns()
    prefix = ns.env_prefix
    monkeypatch.setenv(f"{prefix.lower()}_plugins", "mine")
    env = {f"{prefix.capitalize()}_Platform": "cpu", f"{prefix.lower()}_plugin": "mine"}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        build_spec("os:getpid", namespace=ns, env=env)
    found = {m.split(" ", 1)[0]: m for m in _env_warnings(record)}
    assert set(found) == {f"{prefix.lower()}_plugins", *env}, found
    assert "variable names are case-sensitive" in found[f"{prefix.lower()}_plugins"]
    assert f"did you mean {prefix}_PLUGINS?" in found[f"{prefix.lower()}_plugins"]
    assert f"did you mean {prefix}_PLATFORM?" in found[f"{prefix.capitalize()}_Platform"]
    # a name a slip away in another case: the did-you-mean of a typo
    assert f"did you mean {prefix}_PLUGINS?" in found[f"{prefix.lower()}_plugin"]
    assert "reads no such variable" in found[f"{prefix.lower()}_plugin"]
    # the right name beside it stays quiet; a lower-case name of no namespace too
    assert find_env_problems(ns, {f"{prefix}_PLUGINS": "mine", "ec_home": "/x"}) == []


def test_an_env_override_counts_and_strict_env_refuses_before_any_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = _ns()
    prefix = ns.env_prefix
    monkeypatch.setenv(f"{prefix}_STRICT_ENV", "1")
    with pytest.raises(ConfigError) as info:
        spawn_with_plugins("os:getpid", namespace=ns, env={f"{prefix}_LENIENT_PLUGIN": "1"})
    assert info.value.setting == f"{prefix}_LENIENT_PLUGIN"
    assert f"did you mean {prefix}_LENIENT_PLUGINS?" in str(info.value)
    assert f"unset {prefix}_STRICT_ENV" in str(info.value)


def test_extra_env_declares_the_engines_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    tag = f"ec{uuid.uuid4().hex[:8]}"
    prefix = tag.upper()
    ns = Namespace(tag, env_prefix=prefix, extra_env=(f"{prefix}_PORT",))
    assert f"{prefix}_PORT" in ns.config.known_env
    env = {f"{prefix}_PORT": "8000", f"{prefix}_PORTS": "1"}
    assert [f.var for f in find_env_problems(ns, env)] == [f"{prefix}_PORTS"]


def test_a_variable_of_another_namespace_is_foreign_and_names_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = _ns()
    monkeypatch.setenv("SPAWNKIT_PLATFORM", "cpu")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        build_spec("os:getpid", namespace=ns)
    (found,) = [m for m in _env_warnings(record) if "SPAWNKIT_PLATFORM" in m]
    assert "variable of namespace 'spawnkit'" in found
    assert f"did you mean {ns.env_prefix}_PLATFORM?" in found


def test_a_longer_prefix_of_another_namespace_is_not_a_typo_of_the_shorter() -> None:
    short = _ns()
    longer = Namespace(f"{short.name}.demo", env_prefix=f"{short.env_prefix}_DEMO")
    env = {
        f"{short.env_prefix}_DEMO_ANYTHING": "1",  # under the demo's prefix: not ours to judge
        f"{short.env_prefix}_DEMO_PLATFORM": "x",  # the demo's own variable: foreign
        f"{short.env_prefix}_PLATFORMS": "x",  # ours, misspelled
    }
    found = {f.var: f.message for f in find_env_problems(short, env)}
    assert set(found) == {f"{short.env_prefix}_DEMO_PLATFORM", f"{short.env_prefix}_PLATFORMS"}
    assert f"namespace {longer.name!r}" in found[f"{short.env_prefix}_DEMO_PLATFORM"]
    # The other way round: the short namespace's variables are foreign to the demo.
    back = {f.var for f in find_env_problems(longer, {f"{short.env_prefix}_PLUGINS": "a"})}
    assert back == {f"{short.env_prefix}_PLUGINS"}


def test_a_namespace_registered_by_an_installed_engine_counts(site: Path) -> None:
    tag = f"ec{uuid.uuid4().hex[:8]}"
    write_distribution(
        site,
        f"{tag}-engine",
        "1.0",
        entry_points={"spawnkit.namespaces": {tag: f"{tag}_engine:NS"}},
        modules={
            f"{tag}_engine": (
                f"import spawnkit\nNS = spawnkit.Namespace({tag!r}, env_prefix='{tag.upper()}E')\n"
            )
        },
    )
    _metadata.clear_cache()
    ours = _ns()
    found = find_env_problems(ours, {f"{tag.upper()}E_PLUGINS": "a"})
    assert [f.var for f in found] == [f"{tag.upper()}E_PLUGINS"]
    assert f"variable of namespace {tag!r}" in found[0].message


# ------------------------------------------------------------------- item 2
def _device_plugin(site: Path, ns: Namespace, visible_var: str) -> None:
    """A real platform plugin whose ``activate()`` sees its device only when ``visible_var=1``
    (the way ``examples/my_platform_plugin`` reads ``MY_DEVICE_VISIBLE``)."""
    pkg = f"{ns.name}_dev"
    write_distribution(
        site,
        f"{pkg}-dist",
        "1.0",
        entry_points={ns.config.platform_group: {"envdev": f"{pkg}:activate"}},
        modules={
            f"{pkg}.__init__": (
                "import os\n\ndef activate():\n"
                f"    if os.environ.get({visible_var!r}) == '1':\n"
                f"        return '{pkg}.platform:EnvDev'\n    return None\n"
            ),
            f"{pkg}.platform": (
                "from spawnkit.platforms.interface import Platform, PlatformEnum\n\n"
                "class EnvDev(Platform):\n    _enum = PlatformEnum.OOT\n"
                "    device_name = 'envdev'\n    device_type = 'envdev'\n"
            ),
        },
    )
    _metadata.clear_cache()


def test_a_device_visible_only_through_env_is_selected_and_environ_restored(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.setenv(ns.config.cpu_engine_var, "1")  # the fallback without the device: cpu
    before = dict(os.environ)
    assert build_spec("os:getpid", namespace=ns).platform == "cpu"
    assert build_spec("os:getpid", namespace=ns, env={visible: "1"}).platform == "envdev"
    assert dict(os.environ) == before  # the override is gone again
    assert build_spec("os:getpid", namespace=ns).platform == "cpu"  # no stale cache
    monkeypatch.setenv(visible, "0")
    before = dict(os.environ)
    assert build_spec("os:getpid", namespace=ns, env={visible: "1"}).platform == "envdev"
    assert dict(os.environ) == before and os.environ[visible] == "0"  # its old value back


def test_each_launch_decides_afresh_with_the_environment_it_finds(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived launcher that changed ``os.environ`` between two launches: the first
    launch's auto decision was kept for the process, so the second's workers ran on the old
    platform, and ``USE_CPU_ENGINE=1`` got a warning blaming the wrong thing."""
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.delenv(ns.config.cpu_engine_var, raising=False)
    own = ns.platforms.select()  # this process's own decision, made before the launches
    assert build_spec("os:getpid", namespace=ns).platform == "base"
    monkeypatch.setenv(ns.config.cpu_engine_var, "1")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert build_spec("os:getpid", namespace=ns).platform == "cpu"
    assert _env_warnings(record) == []
    monkeypatch.setenv(visible, "1")  # the device appears
    assert build_spec("os:getpid", namespace=ns).platform == "envdev"
    assert build_spec("os:getpid", namespace=ns, env={visible: "0"}).platform == "cpu"
    assert ns.platforms.select() is own  # the process's own platform stays what it was
    assert ns.platforms._selections.keys() == {(None, ())}  # nothing kept per launch


@pytest.mark.parametrize("decided_first", [True, False])
def test_explain_in_a_launcher_describes_its_own_platform_not_the_launchs(
    site: Path, monkeypatch: pytest.MonkeyPatch, decided_first: bool
) -> None:
    """A launch with ``env=`` making a device visible decides for its workers; the launcher's
    ``explain_platform()`` then described that decision (the device 'activated', the winner)
    while its own ``current_platform`` was the base platform."""
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.delenv(ns.config.cpu_engine_var, raising=False)
    if decided_first:
        assert type(ns.platforms.current()).__name__ == "Platform"
    assert build_spec("os:getpid", namespace=ns, env={visible: "1"}).platform == "envdev"
    assert ns.platforms.select("cpu").name == "cpu"  # a question, not this process's decision
    expl = ns.platforms.explain()
    assert expl.winner is not None and expl.winner.name == "base", str(expl)
    assert [(c.name, c.outcome) for c in expl.candidates] == [("envdev", "none")]
    assert ns.platforms.decision()["winner"].name == "base"
    assert type(ns.platforms.current()).__name__ == "Platform"
    assert ns.explain_platform().winner.name == "base"


def test_explain_keeps_the_built_platforms_decision_after_the_variable_changed(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``current_platform`` built (the base platform), then the platform variable set and a
    plain ``ns.platforms.select()``, what ``spawnkit doctor``'s "would choose" asks: that
    answer overwrote the record, so ``explain_platform()`` named a winner this process does
    not run on."""
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.delenv(ns.config.cpu_engine_var, raising=False)
    monkeypatch.delenv(visible, raising=False)
    assert type(ns.platforms.current()).__name__ == "Platform"
    monkeypatch.setenv(ns.config.platform_var, "cpu")
    assert ns.platforms.select().name == "cpu"
    expl = ns.explain_platform()
    assert expl.winner is not None and expl.winner.name == "base", str(expl)
    assert ns.platforms.decision()["winner"].name == "base"
    assert ns.platforms.selection().name == "base"


def test_a_second_launchs_workers_run_on_the_device_that_appeared_since_the_first(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.setenv(ns.config.cpu_engine_var, "1")
    seen = []
    for value in ("0", "1"):
        monkeypatch.setenv(visible, value)
        with spawn_with_plugins("os:getpid", namespace=ns, ready_timeout=120) as group:
            (report,) = group.wait_ready(timeout=120)
            group.join(timeout=120)
        seen.append(report.platform["name"])
    assert seen == ["cpu", "envdev"]


def test_the_worker_runs_on_the_device_env_made_visible(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    with spawn_with_plugins(
        "os:getpid", namespace=ns, env={visible: "1"}, ready_timeout=120, join_timeout=120
    ) as group:
        (report,) = group.wait_ready(timeout=120)
        group.join(timeout=120)
    assert report.platform["name"] == "envdev", report.format()


def test_selection_windows_of_concurrent_launches_do_not_leak(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _ns()
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.setenv(ns.config.cpu_engine_var, "1")
    seen: dict[str, set[str]] = {"with": set(), "without": set()}
    errors: list[BaseException] = []

    def launch(kind: str) -> None:
        try:
            for _ in range(20):
                env = {visible: "1"} if kind == "with" else None
                seen[kind].add(build_spec("os:getpid", namespace=ns, env=env).platform)
        except BaseException as exc:  # reported below, never lost
            errors.append(exc)

    threads = [threading.Thread(target=launch, args=(k,)) for k in ("with", "without") * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert seen == {"with": {"envdev"}, "without": {"cpu"}}
    assert visible not in os.environ


def test_the_ray_launcher_checks_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spawn_on_ray`` builds its own template (the actors select): it checks there too."""
    from spawnkit.scaleout.ray import build_template

    ns = _ns()
    prefix = ns.env_prefix
    with pytest.warns(EnvVariableWarning, match=f"did you mean {prefix}_PLUGINS"):
        build_template("os:getpid", namespace=ns, env={f"{prefix}_PLUGIN": "x"})
    monkeypatch.setenv(f"{prefix}_STRICT_ENV", "1")
    with pytest.raises(ConfigError):
        build_template("os:getpid", namespace=ns, env={f"{prefix}_PLUGIN": "x"})


def test_use_cpu_engine_that_the_table_never_reads_is_said_once_in_the_parent(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``<PREFIX>_USE_CPU_ENGINE=1`` decides only when no platform is named and no plugin
    activates: with a device plugin active the workers ran on that device, nothing said."""
    ns = _ns()
    cfg = ns.config
    visible = f"DEV_{ns.env_prefix}_VISIBLE"
    _device_plugin(site, ns, visible)
    monkeypatch.setenv(cfg.cpu_engine_var, "1")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert build_spec("os:getpid", namespace=ns).platform == "cpu"  # read: nothing said
        assert build_spec("os:getpid", namespace=ns, env={visible: "1"}).platform == "envdev"
        env = {visible: "1", cfg.platform_var: "envdev"}
        assert build_spec("os:getpid", namespace=ns, env=env).platform == "envdev"
    said = _env_warnings(record)
    assert len(said) == 2, said
    assert f"{cfg.cpu_engine_var}='1' does not take effect: platform plugin 'envdev' " in said[0]
    assert f"{cfg.platform_var}='envdev' selects the platform" in said[1]
    assert all(f"set {cfg.platform_var}=cpu to run on the CPU" in s for s in said)
    monkeypatch.setenv(cfg.strict_env_var, "1")
    with pytest.raises(ConfigError, match=cfg.cpu_engine_var):
        build_spec("os:getpid", namespace=ns, env={visible: "1"})


@pytest.mark.parametrize("value", ["y", "enabled", "2", "cpu"])
def test_use_cpu_engine_that_is_no_boolean_is_refused_in_the_parent(
    site: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """``<PREFIX>_USE_CPU_ENGINE=y`` was neither true nor an error: the workers ran on the
    GPU (or the base platform) with nothing said, where an invalid ``<PREFIX>_IMPORT_GUARD``
    or ``_LENIENT_PLUGINS`` is a ``ConfigError``.  In any row of the table (a plugin named
    too), from ``env=`` as from the environment."""
    ns = _ns()
    cfg = ns.config
    for env in ({cfg.cpu_engine_var: value}, {cfg.cpu_engine_var: value, cfg.platform_var: "cpu"}):
        with pytest.raises(ConfigError, match=f"{cfg.cpu_engine_var}={value!r} is not a boolean"):
            build_spec("os:getpid", namespace=ns, env=env)
    monkeypatch.setenv(cfg.cpu_engine_var, f" {value.upper()} ")
    with pytest.raises(ConfigError) as info:
        build_spec("os:getpid", namespace=ns)
    assert info.value.setting == cfg.cpu_engine_var and "1/0, true/false" in str(info.value)
    for fine in ("1", "ON", "no", ""):  # controls: what the table reads as a boolean
        monkeypatch.setenv(cfg.cpu_engine_var, fine)
        build_spec("os:getpid", namespace=ns)


def test_a_strict_env_that_is_no_boolean_is_refused_on_a_clean_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``<PREFIX>_STRICT_ENV=maybe`` was read only when a variable was to be reported: every
    clean launch accepted it, and the first with a typo refused instead of warning.  Checked
    on each launch now, as ``_LENIENT_PLUGINS`` and ``_ALLOW_PLUGIN_DRIFT`` are."""
    from spawnkit.scaleout.ray import spawn_on_ray

    ns = _ns()
    var = ns.config.strict_env_var
    with pytest.raises(ConfigError, match=f"{var}='maybe' is not a boolean") as info:
        build_spec("os:getpid", namespace=ns, env={var: "maybe"})
    assert info.value.setting == var
    monkeypatch.setenv(var, "maybe")
    for launch in (
        lambda: build_spec("os:getpid", namespace=ns),
        lambda: spawn_on_ray("os:getpid", nprocs=1, namespace=ns),  # before Ray is asked
    ):
        with pytest.raises(ConfigError, match="1/0, true/false") as info:
            launch()
        assert info.value.setting == var
    for fine in ("1", "off", " TRUE "):  # controls: what parse_bool reads as on or off
        monkeypatch.setenv(var, fine)
        build_spec("os:getpid", namespace=ns)


# ---------------------------------------------------- spawnkit's own process-wide variables
_OWN = re.compile(r"SPAWNKIT_[A-Z0-9_]+")


def _constant(node: ast.AST | None) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if _OWN.fullmatch(node.value) else ""
    return ""


def _names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    return []


def _environ(node: ast.AST) -> bool:
    """An expression of an environment: ``os.environ``, ``environ``, ``os.environb``..."""
    text = ast.unparse(node)
    return text.endswith(("environ", "environb")) or text == "os"


def _read_or_set(node: ast.AST) -> list[str]:
    """The ``SPAWNKIT_*`` names one node reads or sets: a constant named ``*_VAR`` (the form
    every variable of spawnkit's takes), a member of a collection named ``*_ENV``/``*_VARS``,
    or the key of an environment lookup written out."""
    found: list[str] = []
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [n for t in targets for n in _names(t)]
        if any(n.endswith("_VAR") for n in names):
            found.append(_constant(node.value))
        if any(n.endswith(("_ENV", "_VARS")) for n in names) and node.value is not None:
            found.extend(_constant(sub) for sub in ast.walk(node.value))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr in ("get", "pop", "setdefault", "getenv", "putenv", "unsetenv") and (
            _environ(node.func.value)
        ):
            found.append(_constant(node.args[0]))
    elif isinstance(node, ast.Subscript) and _environ(node.value):
        found.append(_constant(node.slice))
    elif isinstance(node, ast.Compare) and any(_environ(c) for c in node.comparators):
        found.append(_constant(node.left))
    return [name for name in found if name]


def _own_variables() -> dict[str, str]:
    """Every ``SPAWNKIT_*`` variable the package reads or sets, with where: every module."""
    src = Path(spawnkit.__file__).parent
    found: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            for name in _read_or_set(node):
                found.setdefault(name, f"{path.relative_to(src)}:{node.lineno}")
    return found


def test_every_variable_spawnkit_reads_or_sets_is_known_to_the_check() -> None:
    """A name spawnkit uses and the check does not know is called one "nothing reads": with
    ``SPAWNKIT_STRICT_ENV=1`` the launch is refused for spawnkit's own setting."""
    found = _own_variables()
    # the scan reads the real package: the warm server's two, the run id, the torchrun rank's
    assert len(found) >= 7, found
    ns = get_namespace(None)
    unknown = {name: where for name, where in found.items() if find_env_problems(ns, {name: "1"})}
    assert not unknown, f"spawnkit's own variables the env check calls unread: {unknown}"


def test_spawnkits_own_variables_pass_strict_env_in_a_real_launch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``SPAWNKIT_WARM_SPARES`` exported (documented, read by every warm server), and the
    ``SPAWNKIT_FAILURE_STORE`` a rank of a multi-node ``spawnkit launch`` inherits, in a
    process that launches workers of its own under ``SPAWNKIT_STRICT_ENV=1``."""
    monkeypatch.setenv("SPAWNKIT_STRICT_ENV", "1")
    monkeypatch.setenv("SPAWNKIT_WARM_SPARES", "0")
    monkeypatch.setenv("SPAWNKIT_FAILURE_STORE", "127.0.0.1:29500")
    monkeypatch.setenv("SPAWNKIT_RESULT_DIR", str(tmp_path))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with spawn_with_plugins("os:getpid", env={"SPAWNKIT_WARM_SPARES": "0"}) as group:
            (pid,) = group.results(timeout=60)
    assert pid != os.getpid()
    assert _env_warnings(record) == []
    # control: a misspelling of one is still refused, and named with the variable meant
    with pytest.raises(ConfigError, match=r"did you mean SPAWNKIT_WARM_SPARES\?"):
        spawn_with_plugins("os:getpid", env={"SPAWNKIT_WARM_SPARE": "0"})
