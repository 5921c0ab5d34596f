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


def test_the_watch_sees_each_kind_of_change_however_many_globals_it_holds() -> None:
    """The check after each plugin is one identity pass over every watched global plus each
    module's last key: a value replaced, a key added, deleted or renamed (the last one too,
    with its value kept), in a module watched from the start or one a plugin imported."""
    import sys
    import types
    import uuid

    from spawnkit.hooks._outside import OutsideWatch

    tag = uuid.uuid4().hex[:8]
    names = [f"ow_{tag}_{i}" for i in range(3)]

    def changes(new: list[str]) -> list[str]:  # this test's modules: pytest's own change too
        return sorted(c for c in watch.changes(new) if c.startswith(f"ow_{tag}_"))

    mods = [types.ModuleType(n) for n in names]
    for m in mods:
        m.__spec__ = types.SimpleNamespace(name=m.__name__)
        m.a, m.b, m.last = object(), object(), object()
    try:
        sys.modules.update({m.__name__: m for m in mods[:2]})
        watch = OutsideWatch()
        assert changes([]) == []
        mods[0].b = object()  # replaced
        assert changes([]) == [f"{names[0]}:b"]
        ns = vars(mods[1])
        ns["renamed"] = ns.pop("last")  # the last key renamed, its value kept
        assert changes([]) == [f"{names[1]}:last", f"{names[1]}:renamed"]
        sys.modules[names[2]] = mods[2]  # imported by a plugin: watched from now on
        assert changes([names[2]]) == []
        del mods[2].a  # deleted
        mods[2].c = 1  # added
        assert changes([]) == [f"{names[2]}:a", f"{names[2]}:c"]
        assert changes([]) == []
    finally:
        for n in names:
            sys.modules.pop(n, None)


def test_a_module_under_two_names_is_compared_once_and_its_change_said_under_both() -> None:
    """``__main__`` and ``__mp_main__`` in a spawned worker are one module: the check after
    each plugin looks at its globals once (they were a fifth of a worker's watched values),
    and a change to it is still listed under each name, also once it was placed again."""
    import sys
    import types
    import uuid

    from spawnkit.hooks._outside import OutsideWatch

    tag = uuid.uuid4().hex[:8]
    one, two, other = (f"ow_{tag}_{n}" for n in ("main", "mp_main", "other"))
    mod, third = types.ModuleType(one), types.ModuleType(other)
    for m in (mod, third):
        m.__spec__ = types.SimpleNamespace(name=m.__name__)
        m.a, m.b = object(), object()
    mine = {id(vars(mod)), id(vars(third))}

    def changes(new: list[str]) -> list[str]:
        return sorted(c for c in watch.changes(new) if c.startswith(f"ow_{tag}_"))

    def watched_once() -> bool:  # each namespace's values in the flat snapshot once
        ours = [space for space in watch._spaces if id(space) in mine]
        return len(ours) == len({id(space) for space in ours}) == 2

    try:
        sys.modules.update({one: mod, two: mod, other: third})
        watch = OutsideWatch()
        assert watched_once()
        assert changes([]) == []
        mod.b = object()
        assert changes([]) == [f"{one}:b", f"{two}:b"]
        assert watched_once() and changes([]) == []
        sys.modules[other] = third  # placed again under a name already watched
        assert changes([other]) == []
        del mod.a
        assert changes([]) == [f"{one}:a", f"{two}:a"]
        assert watched_once()
    finally:
        for n in (one, two, other):
            sys.modules.pop(n, None)
