"""What a plugin changes by hand, outside the hook registry, is listed (issue 19 item 6).

Before, a plugin that patched an engine module itself (``mod.attr = mine``)
or put a stand-in module into ``sys.modules`` left no trace: the report said
"hooks applied: 0 target(s)" and ``spawnkit doctor`` said OK.  These run real
distributions in a real spawned worker, and ``spawnkit doctor`` on a real
distribution whose RECORD ships a ``.pth`` file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _bootstrap_helpers import World, child_bootstrap, isolated_imports, make_world, run_child
from test_cli import _registered, installed, run_cli  # noqa: F401 - the doctor tests' fixture

IMPORTS_EVENTS = """
    import {eng}.events  # imported, not changed: nothing to list

    def register():
        pass
    """

PATCHES_BY_HAND = """
    import sys
    import types

    def register():
        events = sys.modules["{eng}.events"]  # imported before this plugin ran
        events.EVENTS = list(events.EVENTS)   # replaced
        events.flag = "mine"                  # set
        del events.spare                      # deleted
        sys.modules["{mod}_fake_vllm"] = types.ModuleType("{mod}_fake_vllm")  # placed
    """


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with isolated_imports():
        yield make_world(tmp_path)


def test_changes_a_plugin_makes_by_hand_are_listed_in_the_report(world: World) -> None:
    events = world.root / "engine" / world.eng / "events.py"
    events.write_text(events.read_text() + "spare = 1\n")
    world.add_plugin("a_imports", IMPORTS_EVENTS)
    mod = world.add_plugin("b_patches", PATCHES_BY_HAND)
    status, value, _, tb = run_child(child_bootstrap, world.spec())
    assert status == "ok", tb
    report = value["report"]
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["a_imports"]["outside_registry"] == []
    assert sorted(plugins["b_patches"]["outside_registry"]) == sorted(
        [
            f"{world.eng}.events:EVENTS",
            f"{world.eng}.events:flag",
            f"{world.eng}.events:spare",
            f"sys.modules:{mod}_fake_vllm",
        ]
    )
    from spawnkit.bootstrap.report import BootstrapReport

    text = BootstrapReport(**report).format()  # what doctor prints under the plugin
    line = text.split("b_patches = ", 1)[1].splitlines()[1]
    assert "changed outside the hook registry" in line and f"{world.eng}.events:flag" in line


PTH_LINE = "import os; os.environ.setdefault('PTH_RAN', '1')"


def test_doctor_lists_a_plugins_pth_file_that_runs_code_at_start(
    tmp_path: Path, installed: object  # noqa: F811 - the fixture imported above
) -> None:
    ns = _registered(tmp_path, installed)
    installed(  # type: ignore[operator]
        "pth-plugin",
        entry_points={f"{ns}.plugins": {"pth": f"{ns}_pth:register"}},
        modules={f"{ns}_pth": "def register():\n    pass\n"},
    )
    pth = tmp_path / f"{ns}_pth_startup.pth"
    pth.write_text(f"# a comment\n{tmp_path}\n{PTH_LINE}\n")
    record = next(tmp_path.glob("pth_plugin-*.dist-info")) / "RECORD"
    record.write_text(f"{pth.name},,\n{ns}_pth.py,,\n")
    code, out, err = run_cli("doctor", "--namespace", ns, "--no-child")
    assert code == 0, out + err
    section = out.split("start-up code", 1)[1]
    assert str(pth) in section and PTH_LINE in section and "pth-plugin" in section
    assert "a comment" not in section
    code, out, _ = run_cli("doctor", "--namespace", ns, "--no-child", "--json")
    import json

    (found,) = json.loads(out)["startup_code"]
    assert found == {
        "dist": "pth-plugin",
        "plugins": ["pth"],
        "file": str(pth),
        "lines": [PTH_LINE],
    }


PATCHES_THEN_RAISES = """
    import sys

    def register():
        sys.modules["{eng}.events"].flag = "half"
        raise RuntimeError("failed after patching by hand")
    """


def test_a_failing_plugin_says_what_it_changed_by_hand_is_still_in_place(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spawnkit.errors import PluginError
    from spawnkit.spec import _phase

    monkeypatch.delenv(world.ns.config.plugins_var, raising=False)
    monkeypatch.delenv(world.ns.config.lenient_var, raising=False)
    world.ns.platforms.set_selection("testdev")
    world.add_plugin("a_imports", IMPORTS_EVENTS)
    world.add_plugin("b_half", PATCHES_THEN_RAISES)
    try:
        with pytest.raises(PluginError) as info:
            world.ns.plugins.load()
    finally:
        world.ns.hooks.reset()
        _phase.leave_worker()
    text = str(info.value)
    assert "Its hook registrations were discarded" in text
    # (in this test process other threads may change module globals meanwhile: listed too)
    kept = text.split("still in place (spawnkit cannot undo it): ", 1)[1].split(". Fix")[0]
    assert f"{world.eng}.events:flag" in kept.split(", ")
