"""A plugin declared in a group one slip from the namespace's is named by the launcher.

``[project.entry-points."eng.plugin"]`` installs fine and is never loaded: no namespace reads
that group.  Real distributions (``*.dist-info`` with ``entry_points.txt``) on ``sys.path``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit import _metadata
from spawnkit.launch._group_check import find_group_problems
from spawnkit.namespace import Namespace
from spawnkit.testing import write_distribution


@pytest.fixture
def ns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Namespace:
    monkeypatch.syspath_prepend(str(tmp_path))
    _metadata.clear_cache()
    return Namespace(f"g{uuid.uuid4().hex[:8]}", env_prefix="GCHK")


def _declare(root: Path, dist: str, group: str, name: str = "mine") -> None:
    module = dist.replace("-", "_")
    write_distribution(
        root, dist, "2.0", entry_points={group: {name: f"{module}:register"}},
        modules={module: "def register():\n    pass\n"},
    )  # fmt: skip
    _metadata.clear_cache()


@pytest.mark.parametrize(
    "group",
    ["{ns}.plugin", "{ns}-plugins", "{ns}_plugins", "{ns}.Plugins", "{ns}.plgins", "{ns}.platform"],
)
def test_a_group_one_slip_away_is_named_with_the_right_one(
    ns: Namespace, tmp_path: Path, group: str
) -> None:
    _declare(tmp_path, "slip-dist", group.format(ns=ns.name))
    (message,) = find_group_problems(ns)
    want = ns.config.platform_group if "platform" in group else ns.config.plugin_group
    assert "distribution slip-dist 2.0 declares entry point(s) 'mine'" in message
    assert f"in group {group.format(ns=ns.name)!r}, which no namespace reads" in message
    assert f'[project.entry-points."{want}"]' in message


@pytest.mark.parametrize(
    "group",
    [
        "{ns}.general_plugins",  # vLLM's names for its two groups
        "{ns}.platform_plugins",
        "{ns}.general-plugins",
        "{top}.plugins",  # the engine's top package's, for its namespace {top}.srt
        "{top}.platforms",
    ],
)
def test_a_group_an_author_plausibly_meant_is_named_with_the_right_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    # Before: more than one slip away, so never named: the plugin was never loaded, unsaid.
    monkeypatch.syspath_prepend(str(tmp_path))
    top = f"g{uuid.uuid4().hex[:8]}"
    ns = Namespace(f"{top}.srt", env_prefix="GCHK")
    declared = group.format(ns=ns.name, top=top)
    _declare(tmp_path, "meant-dist", declared)
    (message,) = find_group_problems(ns)
    want = ns.config.platform_group if "platform" in group else ns.config.plugin_group
    assert "distribution meant-dist 2.0 declares entry point(s) 'mine'" in message
    assert f"in group {declared!r}, which no namespace reads" in message
    assert f'[project.entry-points."{want}"]' in message


def test_the_top_packages_group_is_left_alone_when_a_namespace_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    top = Namespace(f"g{uuid.uuid4().hex[:8]}", env_prefix="GCHKTOP")
    ns = Namespace(f"{top.name}.srt", env_prefix="GCHK")
    _declare(tmp_path, "top-dist", top.config.plugin_group)
    _declare(tmp_path, "elsewhere-dist", f"{top.name}x.plugins", "other")  # not a prefix
    assert find_group_problems(ns) == []


def test_the_right_groups_and_far_ones_are_left_alone(ns: Namespace, tmp_path: Path) -> None:
    _declare(tmp_path, "right-dist", ns.config.plugin_group)
    _declare(tmp_path, "plat-dist", ns.config.platform_group, "dev")
    _declare(tmp_path, "far-dist", f"{ns.name}x.extensions")
    _declare(tmp_path, "console-dist", "console_scripts")
    other = Namespace(ns.name + "2", env_prefix="GCHK2")  # a namespace that reads its own groups
    _declare(tmp_path, "other-dist", other.config.plugin_group)
    assert find_group_problems(ns) == []


def test_the_launcher_warns_before_any_worker_starts(tmp_path: Path) -> None:
    main = """
if __name__ == "__main__":
    print(launch("plugin:hello", "spawn", nprocs=1))
"""
    plugin = "def register():\n    pass\n\ndef hello():\n    return 'hi'\n"
    app = write_app(tmp_path, "grp", LAUNCH + main, {"p": "plugin:register"}, {"plugin": plugin})
    dist_info = next((tmp_path / "site").glob("*.dist-info"))
    entry_points = dist_info / "entry_points.txt"  # the author's typo: plugin, not plugins
    text = entry_points.read_text(encoding="utf-8").replace(".plugins]", ".plugin]")
    entry_points.write_text(text, encoding="utf-8")
    proc = run_script(app.script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = warned(proc, "PluginSelectionWarning")
    assert f"in group '{app.tag}.plugin', which no namespace reads" in line, line
