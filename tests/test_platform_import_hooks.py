"""Hooks a platform package registers as it is imported apply only where it is the platform.

Auto-discovery imports every installed platform package to ask whether its hardware is
present; a package that registers hooks at its top did so in the launcher whether or not it
was selected, and ``bootstrap_here()`` then applied them there, while a worker (which imports
only its own platform's package) never had them: the engine's own process ran the hooks of a
platform not in use, unsaid.  Two real platform distributions, ``chipa`` (present) and
``chipb`` (absent), each hook one target as imported; the launching script runs in its own
interpreter (the bootstrap is process-wide state).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

from spawnkit.testing import write_distribution

_CHIP = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace
from spawnkit.platforms import Platform, PlatformEnum

class Chip(Platform):
    _enum = PlatformEnum.OOT
    device_name = "{name}"
    device_type = "cpu"

def around(original, *args, **kwargs):
    return original(*args, **kwargs) + "+{name}"

get_namespace({tag!r}).hooks.register("{tag}_target.func", around, HookType.AROUND)

def activate():
    return {answer}
"""

_HEAD = """
import json, os, sys, warnings
import spawnkit

TAG = {tag!r}
NS = spawnkit.Namespace(TAG, env_prefix=TAG.upper())
PLATFORM = TAG.upper() + "_PLATFORM"


def entry():
    from {tag}_target import func
    return func()


def launch(**kwargs):
    with spawnkit.spawn_with_plugins(entry, namespace=NS, ready_timeout=60, **kwargs) as group:
        return group.results(timeout=60)[0]
"""

_AUTO = """
if __name__ == "__main__":
    out = {{}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["worker_first"] = launch()
    out["warned"] = [f"{{w.category.__name__}}: {{w.message}}" for w in caught]
    report = spawnkit.bootstrap_here(NS)
    from {tag}_target import func
    out["here"] = func()
    out["platform"] = report.platform["name"]
    out["sources"] = sorted(str(row.source) for row in NS.hooks.status())
    out["worker"] = launch()
    print(json.dumps(out))
"""

_LATE = """
if __name__ == "__main__":
    out = {{}}
    os.environ[PLATFORM] = "chipa"  # only chipa's package is imported
    spawnkit.bootstrap_here(NS)
    from {tag}_target import func
    out["before"] = [func(), "{tag}_chipb" in sys.modules]
    try:  # this launch's selection imports chipb's package to ask it
        launch(env={{PLATFORM: "chipb"}})
    except spawnkit.PlatformError as exc:
        out["launch"] = type(exc).__name__
    out["after"] = [func(), "{tag}_chipb" in sys.modules]
    print(json.dumps(out))
"""

_DIRECT = """
if __name__ == "__main__":
    out = {{"worker": launch()}}  # its selection imported chipa's and chipb's packages
    NS.hooks.apply_hooks()  # by hand, in a launcher that never bootstrapped
    from {tag}_target import func
    out["here"] = func()
    out["sources"] = sorted(str(row.source) for row in NS.hooks.status())
    print(json.dumps(out))
"""

_NESTED = """
def nested():  # a worker on chipa that launches its own worker
    from {tag}_target import func
    with spawnkit.spawn_with_plugins(entry, namespace=NS, ready_timeout=60) as group:
        return [func(), group.results(timeout=60)[0], "{tag}_chipb" in sys.modules]


if __name__ == "__main__":
    spawnkit.bootstrap_here(NS)  # this process's launches decide afresh: its workers' keep theirs
    with spawnkit.spawn_with_plugins(nested, namespace=NS, ready_timeout=60) as group:
        print(json.dumps({{"worker": group.results(timeout=60)[0]}}))
"""


def _run(tmp_path: Path, body: str) -> dict[str, Any]:
    tag = f"ph{uuid.uuid4().hex[:10]}"
    for name, answer in (("chipa", f"'{tag}_chipa.Chip'"), ("chipb", "None")):
        write_distribution(
            tmp_path,
            f"{tag}-{name}",
            "1.0",
            entry_points={f"{tag}.platforms": {name: f"{tag}_{name}:activate"}},
            modules={f"{tag}_{name}": _CHIP.format(tag=tag, name=name, answer=answer)},
        )
    (tmp_path / f"{tag}_target.py").write_text("def func():\n    return 'orig'\n")
    script = tmp_path / "launch.py"
    source = textwrap.dedent(_HEAD.format(tag=tag)) + textwrap.dedent(body.format(tag=tag))
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    for var in ("PLUGINS", "PLATFORM", "USE_CPU_ENGINE"):
        env.pop(f"{tag.upper()}_{var}", None)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env,
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["tag"] = tag
    return out


def test_bootstrap_here_applies_the_import_hooks_of_the_selected_platform_only(
    tmp_path: Path,
) -> None:
    """Before: this process ran 'orig+chipa+chipb', its workers 'orig+chipa'."""
    out = _run(tmp_path, _AUTO)
    tag = out["tag"]
    assert out["platform"] == "chipa"
    assert out["here"] == "orig+chipa", "the absent platform's hook ran in this process"
    assert out["worker_first"] == out["worker"] == "orig+chipa"  # as before
    assert out["sources"] == [f"platform plugin 'chipa' ({tag}-chipa 1.0)"]
    # Not stray hooks of this launcher: the workers on chipa register them (before: a
    # PluginSelectionWarning said no worker applies them).
    assert not [w for w in out["warned"] if w.startswith("PluginSelectionWarning")], out


def test_a_platform_package_a_later_launch_imports_hooks_nothing_in_a_bootstrapped_process(
    tmp_path: Path,
) -> None:
    """Before: the registration came after this process's hooks were applied, so it was
    applied at once: 'orig+chipa+chipb' here, for a platform the launch did not even get."""
    out = _run(tmp_path, _LATE)
    assert out["before"] == ["orig+chipa", False]
    assert out["launch"] == "PlatformUnavailableError"
    assert out["after"] == ["orig+chipa", True], "the absent platform's hook ran in this process"


def test_apply_hooks_by_hand_applies_the_import_hooks_of_this_processs_platform_only(
    tmp_path: Path,
) -> None:
    """Before: only the bootstrap and apply_plugin_hooks() left the other platforms' out, so
    NS.hooks.apply_hooks() in the launcher ran 'orig+chipb+chipa', its workers 'orig+chipa'."""
    out = _run(tmp_path, _DIRECT)
    tag = out["tag"]
    assert out["worker"] == "orig+chipa"
    assert out["here"] == "orig+chipa", "the absent platform's hook ran in this process"
    assert out["sources"] == [f"platform plugin 'chipa' ({tag}-chipa 1.0)"]


def test_a_workers_own_launch_keeps_the_platform_its_launcher_decided(tmp_path: Path) -> None:
    """The control: a worker's platform is its launcher's decision, pinned, and its own launch
    starts its workers on it without asking every platform package again (only a process
    that bootstrapped itself decides its launches afresh)."""
    out = _run(tmp_path, _NESTED)
    assert out["worker"] == ["orig+chipa", "orig+chipa", False], out
