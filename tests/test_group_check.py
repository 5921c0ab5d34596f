"""A plugin declared in a group one slip from the namespace's is named by the launcher.

``[project.entry-points."eng.plugin"]`` installs fine and is never loaded: no namespace reads
that group.  Real distributions (``*.dist-info`` with ``entry_points.txt``) on ``sys.path``.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import uuid
import zipfile
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


def _folder(root: Path, dist: str, version: str, eps: str) -> str:
    """A ``.dist-info`` written by hand, as an installer leaves it (no scan cache dropped)."""
    folder = f"{dist.replace('-', '_')}-{version}.dist-info"
    (root / folder).mkdir(parents=True)
    (root / folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
    )
    (root / folder / "entry_points.txt").write_text(eps, encoding="utf-8")
    return folder


def test_a_distribution_with_two_metadata_folders_in_one_directory_is_named(
    ns: Namespace, tmp_path: Path
) -> None:
    # Before: importlib.metadata reads the first folder listdir gives, and so did spawnkit,
    # unsaid: that copy's plugins loaded and its version was reported, whichever copy's code
    # was on disk, and what only the other declared never loaded.
    import importlib.metadata as md

    group = ns.config.plugin_group
    old = _folder(tmp_path, "twice-dist", "1.0", f"[{group}]\nold_plug = os:getcwd\n")
    new = _folder(tmp_path, "twice-dist", "2.0", f"[{group}]\nnew_plug = os:getcwd\n")
    read = md.distribution("twice-dist").version  # importlib's pick: listdir order
    kept, kept_plug, lost_plug = (old, "old_plug", "new_plug")
    if read == "2.0":
        kept, kept_plug, lost_plug = (new, "new_plug", "old_plug")
    assert [ep.name for ep in _metadata.entry_points(group)] == [kept_plug]
    (message,) = find_group_problems(ns)
    assert f"distribution twice-dist has 2 metadata folders in {tmp_path}: " in message
    assert f"{old} (version 1.0, entry points 'old_plug')" in message
    assert f"{new} (version 2.0, entry points 'new_plug')" in message
    assert f"Only {kept} is read" in message and f"report version {read}" in message
    assert f"'{lost_plug}' never load" in message
    assert "Remove the stale folder, or reinstall the distribution" in message


def test_one_name_in_two_directories_and_twice_installed_non_plugins_stay_silent(
    ns: Namespace, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Shadowing across sys.path directories is how importlib resolves a name: first wins.
    group = ns.config.plugin_group
    _folder(tmp_path, "shadow-dist", "2.0", f"[{group}]\nfront = os:getcwd\n")
    later = tmp_path_factory.mktemp("later-site")
    _folder(later, "shadow-dist", "1.0", f"[{group}]\nback = os:getcwd\n")
    # A distribution installed twice that declares nothing this namespace reads
    _folder(tmp_path, "tool-dist", "1.0", "[console_scripts]\ntool = os:getcwd\n")
    _folder(tmp_path, "tool-dist", "2.0", "[console_scripts]\ntool = os:getcwd\n")
    sys.path.insert(sys.path.index(str(tmp_path)) + 1, str(later))
    try:
        _metadata.clear_cache()
        assert [ep.name for ep in _metadata.entry_points(group)] == ["front"]
        assert find_group_problems(ns) == []
    finally:
        sys.path.remove(str(later))


def test_a_directory_listed_twice_on_sys_path_is_no_second_copy(
    ns: Namespace, tmp_path: Path
) -> None:
    """The same folder on ``sys.path`` twice (``PYTHONPATH`` and a script's
    ``sys.path.insert`` of it) yields each distribution of it twice: one folder, which was
    named as a broken install of two metadata folders at every launch."""
    group = ns.config.plugin_group
    _folder(tmp_path, "once-dist", "1.0", f"[{group}]\nonce = os:getcwd\n")
    sys.path.insert(sys.path.index(str(tmp_path)) + 1, str(tmp_path))
    try:
        _metadata.clear_cache()
        assert [ep.name for ep in _metadata.entry_points(group)] == ["once"]
        assert _metadata.installed_twice([group]) == []
        assert find_group_problems(ns) == []
    finally:
        sys.path.remove(str(tmp_path))  # one of the two: the fixture removes the other
        _metadata.clear_cache()


def _wheel(out: Path, dist: str, version: str, group: str, module: str) -> Path:
    """A wheel of one plugin module whose ``hello()`` says which version's code it is."""
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    files = {
        f"{module}.py": f"def register():\n    pass\n\ndef hello():\n    return 'v{version}'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[{group}]\n{module} = {module}:register\n",
    }
    record = []
    for name, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        record.append(f"{name},sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = out / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def test_pip_install_target_twice_without_upgrade_is_named_by_the_launcher(
    tmp_path: Path,
) -> None:
    # pip install --target T twice without --upgrade keeps the first version's module and
    # adds the second's .dist-info beside the first's: a broken install, which launched
    # with one version's plugins and report whatever code ran, unsaid.
    pytest.importorskip("pip")
    tag = f"twice{uuid.uuid4().hex[:8]}"
    module = f"{tag}_plug"
    site = tmp_path / "site"
    for version in ("1.0", "2.0"):
        wheel = _wheel(tmp_path, f"{tag}-dist", version, f"{tag}.plugins", module)
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
             "--disable-pip-version-check", "--target", str(site), str(wheel)],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert pip.returncode == 0, pip.stdout + pip.stderr
    folders = sorted(p.name for p in site.glob("*.dist-info"))
    assert folders == [f"{tag}_dist-1.0.dist-info", f"{tag}_dist-2.0.dist-info"]
    script = tmp_path / "launch.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(site)!r})\nimport spawnkit\n"
        f"NS = spawnkit.Namespace({tag!r}, env_prefix={tag.upper()!r})\n"
        "if __name__ == '__main__':\n"
        f"    with spawnkit.spawn_with_plugins({module + ':hello'!r}, namespace=NS, nprocs=1,\n"
        "            ready_timeout=120, join_timeout=120) as group:\n"
        "        print(group.results(timeout=120))\n"
    )
    proc = run_script(script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['v1.0']"  # the first install's code
    (line,) = warned(proc, "PluginSelectionWarning")
    assert f"distribution {tag}-dist has 2 metadata folders in {site}: " in line, line
    assert all(folder in line for folder in folders), line
    assert "(pip install --upgrade, with the same --target)" in line, line
