"""``bootstrap_here()`` and a plugin selection changed after it, in a real process.

Plugins load and hooks apply once per process, so a ``<PREFIX>_PLUGINS`` (or
``<PREFIX>_PLATFORM``) set or changed in ``os.environ`` after the first ``bootstrap_here()``
cannot take effect there: a second ``bootstrap_here()`` returned the first report and a fork
context's children inherited the first plugin set while the context's spec named the new one,
both unsaid.  Likewise ``spawn_with_plugins(bootstrap_parent=True, env={...})`` bootstrapped
the launcher from ``os.environ`` and its workers with ``env=``'s selection.  Two real plugin
distributions hook one target; the launching script runs in its own interpreter (the bootstrap
is process-wide state).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest

from spawnkit.testing import write_distribution

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def around(original, *args, **kwargs):
    return original(*args, **kwargs) + "+{name}"

def register():
    get_namespace({tag!r}).hooks.register("{tag}_target.func", around, HookType.AROUND)
"""

_SCRIPT = """
import json, os, sys
import spawnkit

TAG = {tag!r}
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())
PLUGINS, PLATFORM = TAG.upper() + "_PLUGINS", TAG.upper() + "_PLATFORM"


def entry():
    from {tag}_target import func
    return func()


def refused(call):
    try:
        call()
    except spawnkit.ConfigError as exc:
        return {{"setting": exc.setting, "message": str(exc)}}
    return None


if __name__ == "__main__":
    out = {{}}
    os.environ[PLUGINS] = "alpha"
    first = spawnkit.bootstrap_here(NS)
    from {tag}_target import func
    out["first"] = func()
    out["again"] = spawnkit.bootstrap_here(NS) is first
    os.environ[PLUGINS] = " alpha, "  # the same selection, spelt otherwise
    out["respelt"] = spawnkit.bootstrap_here(NS) is first
    os.environ[PLUGINS] = "beta"
    out["second"] = refused(lambda: spawnkit.bootstrap_here(NS))
    out["fork"] = refused(lambda: spawnkit.get_context("fork", namespace=NS))
    out["spawn_ctx"] = refused(lambda: spawnkit.get_context("spawn", namespace=NS))
    out["here_now"] = func()
    with spawnkit.spawn_with_plugins(entry, namespace=NS, ready_timeout=60) as group:
        out["worker"] = group.results(timeout=60)[0]
    os.environ[PLUGINS] = "alpha"
    out["back"] = spawnkit.bootstrap_here(NS) is first
    os.environ[PLATFORM] = "cpu"
    out["platform"] = refused(lambda: spawnkit.bootstrap_here(NS))
    print(json.dumps(out))
"""


def _run(
    tmp_path_factory: pytest.TempPathFactory,
    source: str,
    argv: tuple[str, ...] = (),
    **exported: str,
) -> dict[str, Any]:
    """``source`` run as its own launching script over two plugins, ``alpha`` and ``beta``;
    ``exported``: the selection variables it starts with (``PLUGINS="alpha"``)."""
    root = tmp_path_factory.mktemp("here_selection")
    tag = f"hs{uuid.uuid4().hex[:10]}"
    for name in ("alpha", "beta"):
        write_distribution(
            root,
            f"{tag}-{name}",
            "1.0",
            entry_points={f"{tag}.plugins": {name: f"{tag}_{name}:register"}},
            modules={f"{tag}_{name}": _PLUGIN.format(tag=tag, name=name)},
        )
    (root / f"{tag}_target.py").write_text("def func():\n    return 'orig'\n")
    script = root / "launch.py"
    script.write_text(textwrap.dedent(source.format(tag=tag)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]))
    for var in ("PLUGINS", "PLATFORM", "USE_CPU_ENGINE"):
        env.pop(f"{tag.upper()}_{var}", None)
    env.update({f"{tag.upper()}_{var}": value for var, value in exported.items()})
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=240, env=env,
        cwd=root, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["var"] = f"{tag.upper()}_PLUGINS"
    out["platform_var"] = f"{tag.upper()}_PLATFORM"
    return out


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, _SCRIPT)


def test_a_repeated_bootstrap_here_with_the_same_selection_returns_the_same_report(
    ran: dict[str, Any],
) -> None:
    assert ran["first"] == "orig+alpha"
    assert ran["again"] is True and ran["respelt"] is True and ran["back"] is True


def test_a_second_bootstrap_here_after_the_plugin_selection_changed_is_refused(
    ran: dict[str, Any],
) -> None:
    """Before: it returned the first report, this process kept alpha's hook, nothing said."""
    err = ran["second"]
    assert err is not None, "bootstrap_here() with another selection returned the old report"
    var, text = ran["var"], err["message"]
    assert err["setting"] == var
    assert f"{var} ('alpha' then, 'beta' now)" in text, text
    assert "applied plugins ['alpha']" in text and "now is plugins ['beta']" in text, text
    assert f"set {var} before the first bootstrap_here()" in text, text
    assert "new process" in text and "env=" in text, text
    assert ran["here_now"] == "orig+alpha"  # this process's hooks are as they were


def test_a_fork_context_after_the_plugin_selection_changed_is_refused(
    ran: dict[str, Any],
) -> None:
    """Before: its children inherited alpha's hook while the context's spec said beta."""
    err = ran["fork"]
    assert err is not None, "get_context('fork') took the new selection its children lack"
    assert err["setting"] == ran["var"]
    text = err["message"]
    assert "applied plugins ['alpha']" in text and "now is plugins ['beta']" in text, text
    assert "get_context('spawn')" in text and "get_context('forkserver')" in text, text


def test_spawned_workers_follow_the_launchs_own_selection(ran: dict[str, Any]) -> None:
    assert ran["spawn_ctx"] is None  # a spawn context loads its own selection
    assert ran["worker"] == "orig+beta"


_OWN_HOOK_SCRIPT = """
import json, os, warnings
import spawnkit
from spawnkit.hooks.types import HookType

TAG = {tag!r}
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())
OTHER = spawnkit.Namespace(TAG + "_other", env_prefix=TAG.upper() + "_OTHER")


def own(result, *args, **kwargs):
    return result + "+own"


if __name__ == "__main__":
    warnings.simplefilter("error", spawnkit.PluginSelectionWarning)  # as -W error would
    os.environ[TAG.upper() + "_PLUGINS"] = "alpha"
    NS.hooks.register(TAG + "_target.func", own, HookType.AFTER)  # the script's own hook
    spawnkit.bootstrap_here(NS)  # applies it here beside alpha's
    from {tag}_target import func
    out = {{"here": func()}}
    # a context's workers apply only their plugins': a hook of no plugin is said there
    OTHER.hooks.register(TAG + "_target.func", own, HookType.AFTER)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        spawnkit.get_context("spawn", namespace=OTHER)
    out["context"] = [
        str(w.message) for w in seen if issubclass(w.category, spawnkit.PluginSelectionWarning)
    ]
    print(json.dumps(out))
"""


def test_bootstrap_here_applies_the_scripts_own_hooks_without_calling_them_stray(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A hook the script registered on the namespace before ``bootstrap_here()``: the call
    applied it, yet warned (PluginSelectionWarning) that it was "never applied here" and
    "never runs", an error under ``-W error`` for a hook that ran."""
    ran = _run(tmp_path_factory, _OWN_HOOK_SCRIPT)
    assert ran["here"] in ("orig+alpha+own", "orig+own+alpha"), ran
    (message,) = ran["context"]  # a context of another namespace: its workers never apply it
    assert "were never applied here, and no worker applies them" in message, message


def test_a_second_bootstrap_here_after_the_platform_variable_changed_is_refused(
    ran: dict[str, Any],
) -> None:
    err = ran["platform"]
    assert err is not None, "bootstrap_here() after <PREFIX>_PLATFORM changed returned"
    var, text = ran["platform_var"], err["message"]
    assert err["setting"] == var
    assert f"{var} (unset then, 'cpu' now)" in text, text
    assert "on platform 'base'" in text and "now is platform 'cpu'" in text, text


# ------------------------------------------------- spawn_with_plugins(bootstrap_parent=True, env=)
_PARENT_SCRIPT = """
import json, os, sys
import spawnkit

TAG = {tag!r}
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())
PLUGINS, PLATFORM = TAG.upper() + "_PLUGINS", TAG.upper() + "_PLATFORM"
MARKS = os.path.join(os.getcwd(), "marks")


def entry():
    from {tag}_target import func
    open(os.path.join(MARKS, str(os.getpid())), "w").close()  # a worker ran
    return func()


def launch(env):
    try:
        with spawnkit.spawn_with_plugins(entry, namespace=NS, bootstrap_parent=True, env=env,
                                         ready_timeout=60) as group:
            return {{"worker": group.results(timeout=60)[0]}}
    except spawnkit.ConfigError as exc:
        return {{"setting": exc.setting, "message": str(exc), "marks": os.listdir(MARKS)}}


if __name__ == "__main__":
    os.makedirs(MARKS)
    out = {{}}
    for name in sys.argv[1:]:
        env = {{"plugins": {{PLUGINS: "alpha"}}, "platform": {{PLATFORM: "cpu"}},
               "other": {{TAG.upper() + "_UNRELATED": "1"}}}}[name]
        out[name] = launch(env)
    from {tag}_target import func
    out["launcher"] = func()
    print(json.dumps(out))
"""


def _hooks(result: str) -> list[str]:
    """The plugins whose hooks ran, from ``orig+alpha+beta`` (their order is not the point)."""
    return sorted(result.split("+")[1:])


def test_bootstrap_parent_with_a_plugin_selection_only_in_env_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: the workers loaded alpha only while the launcher's own bootstrap applied alpha's
    and beta's hooks (env= counted for the workers alone), nothing said."""
    out = _run_parent(tmp_path_factory, "plugins", "other")
    err = out["plugins"]
    assert "worker" not in err, f"launcher and workers ran other plugins: {out}"
    var, text = out["var"], err["message"]
    assert err["setting"] == var
    assert err["marks"] == []  # no worker started
    assert f"env= setting {var}='alpha'" in text and f"where {var} is unset" in text, text
    assert "applied plugins ['alpha', 'beta']" in text, text
    assert "would load plugins ['alpha']" in text, text
    assert f"export {var}='alpha'" in text and "drop it from env=" in text, text
    assert "bootstrap_parent=False" in text, text
    # the control: an env= that selects nothing else launches as before, hooks alike
    assert _hooks(out["other"]["worker"]) == _hooks(out["launcher"]) == ["alpha", "beta"]


def test_bootstrap_parent_with_a_platform_only_in_env_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: the workers ran on cpu, the launcher on the platform it detected itself."""
    out = _run_parent(tmp_path_factory, "platform")
    err = out["platform"]
    assert "worker" not in err, f"launcher and workers ran on other platforms: {out}"
    assert err["setting"] == out["platform_var"]
    assert err["marks"] == []
    text = err["message"]
    assert "would load plugins ['alpha', 'beta'] on platform 'cpu'" in text, text
    assert f"export {out['platform_var']}='cpu'" in text, text


def test_bootstrap_parent_with_the_selection_exported_as_in_env_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The fix the refusal names: exported, launcher and workers load alpha alike."""
    out = _run_parent(tmp_path_factory, "plugins", PLUGINS="alpha")
    assert _hooks(out["plugins"]["worker"]) == _hooks(out["launcher"]) == ["alpha"], out


def _run_parent(
    tmp_path_factory: pytest.TempPathFactory, *cases: str, **exported: str
) -> dict[str, Any]:
    return _run(tmp_path_factory, _PARENT_SCRIPT, argv=cases, **exported)


# ------------------------------------- a launch after bootstrap_here() with the platform changed
_FOLLOW_SCRIPT = """
import json, os, sys
import spawnkit

TAG = {tag!r}
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())
PLATFORM, CPU = TAG.upper() + "_PLATFORM", TAG.upper() + "_USE_CPU_ENGINE"


def platform():
    return NS.platforms.selection().name


def nested():  # a worker that launches its own worker: it runs on the worker's platform
    with spawnkit.spawn_with_plugins(platform, namespace=NS, ready_timeout=60) as group:
        return [platform(), os.environ.get(PLATFORM), group.results(timeout=60)[0]]


def launch(entry, **kwargs):
    try:
        with spawnkit.spawn_with_plugins(entry, namespace=NS, ready_timeout=60, **kwargs) as group:
            return group.results(timeout=60)[0]
    except spawnkit.ConfigError as exc:
        return {{"setting": exc.setting, "message": str(exc)}}


def refused(call):
    try:
        call()
    except spawnkit.ConfigError as exc:
        return {{"setting": exc.setting, "message": str(exc)}}
    return None


if __name__ == "__main__":
    out = {{"boot": spawnkit.bootstrap_here(NS).platform["name"]}}
    if sys.argv[1] == "platform":
        os.environ[PLATFORM] = "cpu"
        out["workers"] = launch(nested)
        out["spawn_ctx"] = spawnkit.get_context("spawn", namespace=NS).spec.platform
        out["fork"] = refused(lambda: spawnkit.get_context("fork", namespace=NS))
        os.environ[PLATFORM] = "base"  # back to this process's own: runs as before
        out["fork_back"] = refused(lambda: spawnkit.get_context("fork", namespace=NS))
        out["back"] = launch(platform)
    else:  # what the decision table reads with no platform named
        os.environ[CPU] = "1"
        out["worker"] = launch(platform)
        out["parent"] = launch(platform, bootstrap_parent=True)
    out["here"] = platform()
    out["explained"] = NS.explain_platform().winner.name
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def followed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, _FOLLOW_SCRIPT, argv=("platform",))


def test_a_launch_after_bootstrap_here_follows_a_platform_variable_set_since(
    followed: dict[str, Any],
) -> None:
    """Before: bootstrap_here() pinned this process's platform and every later launch took the
    pin: the workers ran on 'base' while their own environment said cpu (env= worked)."""
    out = followed
    assert out["boot"] == "base"
    worker, its_env, nested = out["workers"]
    assert worker == "cpu", f"the launch's workers ran on this process's pinned platform: {out}"
    assert its_env == "cpu" and nested == "cpu"  # a worker's own launch keeps its platform
    assert out["spawn_ctx"] == "cpu"  # a spawn context decides as a launch does
    # this process stays on its own platform, and says so
    assert out["here"] == out["explained"] == "base"
    assert out["back"] == "base" and out["fork_back"] is None


def test_a_fork_context_after_the_platform_variable_changed_is_refused(
    followed: dict[str, Any],
) -> None:
    """Before: its children inherited this process's 'base' while the variable said cpu."""
    out = followed
    err = out["fork"]
    assert err is not None, "get_context('fork') after the platform variable changed ran"
    var, text = out["platform_var"], err["message"]
    assert err["setting"] == var
    assert f"{var} (unset then, 'cpu' now)" in text, text
    assert "on platform 'base'" in text and "now is platform 'cpu'" in text, text
    assert "get_context('spawn')" in text, text


def test_a_launch_after_bootstrap_here_follows_the_cpu_engine_switch_set_since(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: the workers ran on the pinned 'base' with <PREFIX>_USE_CPU_ENGINE=1 set; with
    bootstrap_parent=True launcher and workers now cannot run on two platforms."""
    out = _run(tmp_path_factory, _FOLLOW_SCRIPT, argv=("cpu",))
    assert out["boot"] == "base" and out["here"] == out["explained"] == "base"
    assert out["worker"] == "cpu", f"the workers ignored the switch set since: {out}"
    err = out["parent"]
    assert isinstance(err, dict), f"bootstrap_parent=True ran launcher and workers apart: {out}"
    var, text = out["platform_var"].replace("_PLATFORM", "_USE_CPU_ENGINE"), err["message"]
    assert err["setting"] == var
    assert f"{var} (unset then, '1' now)" in text, text
    assert "on platform 'base'" in text and "now is platform 'cpu'" in text, text
    assert "No worker was started" in text and "bootstrap_parent=False" in text, text


# ------------------- a second bootstrap_here() after what an automatic decision reads changed
_DECIDED_SCRIPT = """
import json, os, sys
import spawnkit
from spawnkit.platforms import _probes

TAG = {tag!r}
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())
CPU = TAG.upper() + "_USE_CPU_ENGINE"
# No GPU on the test machine: one NVIDIA GPU stands in for NVML's count, its visibility read
# from CUDA_VISIBLE_DEVICES as the real probe reads it.
NS.platforms._probes["cuda"] = lambda: _probes.Probe(
    _probes._visible_limit("CUDA_VISIBLE_DEVICES") != 0, "test: 1 GPU"
)
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # none visible at the first bootstrap_here()


def refused(call):
    try:
        call()
    except spawnkit.ConfigError as exc:
        return {{"setting": exc.setting, "message": str(exc)}}
    return None


if __name__ == "__main__":
    var, same, other = sys.argv[1:]
    var = {{"CPU": CPU, "PLATFORM": TAG.upper() + "_PLATFORM"}}.get(var, var)
    first = spawnkit.bootstrap_here(NS)
    out = {{"boot": first.platform["name"], "changed": var}}
    os.environ[var] = same  # changed, and the decision with it unchanged
    out["same"] = spawnkit.bootstrap_here(NS) is first
    os.environ[var] = other
    out["other"] = refused(lambda: spawnkit.bootstrap_here(NS))
    out["here"] = NS.platforms.selection().name
    print(json.dumps(out))
"""


def _assert_refused(
    out: dict[str, Any], then: str, now: str, platform: str, applied: str = "base"
) -> None:
    err, var = out["other"], out["changed"]
    assert err is not None, f"bootstrap_here() returned the first report after {var}: {out}"
    text = err["message"]
    assert err["setting"] == var
    assert f"{var} ({then} then, {now!r} now)" in text, text
    assert f"on platform {applied!r}" in text and f"now is platform {platform!r}" in text, text
    assert f"set {var} before the first bootstrap_here()" in text and "new process" in text, text
    assert out["here"] == applied  # this process stays on what it applied, and says so


def test_a_second_bootstrap_here_after_the_cpu_engine_switch_set_since_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: the decision had been automatic ('base'); with <PREFIX>_USE_CPU_ENGINE=1 set
    since, a fresh one (a launch's) picks 'cpu', yet bootstrap_here() returned the first report
    and the process stayed on 'base', nothing said."""
    out = _run(tmp_path_factory, _DECIDED_SCRIPT, argv=("CPU", "0", "1"))
    assert out["boot"] == "base"
    assert out["same"] is True  # the control: set to '0', the decision is still 'base'
    _assert_refused(out, "unset", "1", "cpu")


def test_a_second_bootstrap_here_after_a_device_was_made_visible_since_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: CUDA_VISIBLE_DEVICES='' at the first call ('base'), '0' since: a fresh decision
    finds the GPU ('cuda'), yet bootstrap_here() returned the first report, nothing said."""
    out = _run(tmp_path_factory, _DECIDED_SCRIPT, argv=("CUDA_VISIBLE_DEVICES", "-1", "0"))
    assert out["boot"] == "base"
    assert out["same"] is True  # the control: '-1' still hides every device
    _assert_refused(out, "''", "0", "cuda")


def test_a_second_bootstrap_here_after_the_platform_variable_was_cleared_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: <PREFIX>_PLATFORM='cpu' at the first call, blank since: an automatic decision
    picks 'base', yet bootstrap_here() returned the first report ('cpu'), nothing said."""
    out = _run(tmp_path_factory, _DECIDED_SCRIPT, argv=("PLATFORM", "CPU", ""), PLATFORM="cpu")
    assert out["boot"] == "cpu"
    assert out["same"] is True  # the control: 'CPU' names the same built-in
    _assert_refused(out, "'cpu'", "", "base", applied="cpu")
