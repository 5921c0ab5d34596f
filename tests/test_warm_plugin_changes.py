"""What a plugin changes in its process as it loads holds in a warm worker as in a spawned one.

A spawned worker runs multiprocessing's ``prepare()`` (the launcher's ``sys.path`` and working
directory) and then its stages, so a plugin's change to ``sys.path``, the directory or
``os.environ`` lasts.  A warm worker's server loaded the plugins first; the worker's own
``prepare()`` then put the launcher's path and directory back, and its ``env=`` entries were
applied again over what the plugin set: the plugin's vendored tree was off the path, its
variable had the launcher's value.  Real launchers, a real installed plugin, real workers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from _plugin_app import LAUNCH, printed, write_app
from spawnkit.protocol import _fork_prepare

_MAIN = """
if __name__ == "__main__":
    import os
    sys.path.append({gone!r})  # only here: a worker's re-run of this script does not add it
    os.chdir({start!r})
    env = {{"XVAR": "launcher", "ZVAR": "launcher", "KEEP": "launcher"}}
    print([launch("plugin:show", m, nprocs=2, env=env) for m in ("spawn", "forkserver")])
"""

_PLUGIN = """
import os, sys

def register():
    sys.path.insert(0, {front!r})  # a vendored tree, first
    sys.path.insert(sys.path.index({site!r}) + 1, {after!r})  # right after a given entry
    sys.path.append({back!r})
    sys.path.remove({gone!r})
    os.chdir({moved!r})
    sys.argv.append("--plugin-flag")
    os.environ["XVAR"] = "plugin"  # over the launcher's env= value
    del os.environ["ZVAR"]

def show():
    import vendored_only  # found only on the plugin's vendored tree

    wanted = [{front!r}, {site!r}, {after!r}, {back!r}, {gone!r}]
    order = list(dict.fromkeys(p for p in sys.path if p in wanted))
    env = [os.environ.get(k) for k in ("XVAR", "ZVAR", "KEEP")]
    return order, os.getcwd(), env, vendored_only.HERE, sys.argv[-1]
"""


def test_a_plugins_path_directory_and_variables_hold_in_warm_workers(tmp_path: Path) -> None:
    dirs = {k: tmp_path / k for k in ("front", "after", "back", "gone", "start", "moved")}
    for d in dirs.values():
        d.mkdir()
    (dirs["front"] / "vendored_only.py").write_text("HERE = 'vendored'\n", encoding="utf-8")
    names = {k: str(d) for k, d in dirs.items()}
    site = str(tmp_path / "site")
    plugin = _PLUGIN.replace("{site!r}", repr(site))
    for k, v in names.items():
        plugin = plugin.replace("{" + k + "!r}", repr(v))
    main = _MAIN.replace("{gone!r}", repr(names["gone"])).replace("{start!r}", repr(names["start"]))
    app = write_app(tmp_path, "chg", LAUNCH + main, {"chg": "plugin:register"}, {"plugin": plugin})
    spawned, warm = printed(app.script)
    expected = (
        [names["front"], site, names["after"], names["back"]],
        os.path.realpath(names["moved"]),
        ["plugin", None, "launcher"],
        "vendored",
        "--plugin-flag",
    )
    for rank in spawned:
        assert (rank[0], os.path.realpath(rank[1]), *rank[2:]) == expected, spawned
    # Before: the vendored import failed; then the order lacked the plugin's entries, the
    # directory was the launcher's and XVAR/ZVAR had the launcher's values.
    for rank in warm:
        assert (rank[0], os.path.realpath(rank[1]), *rank[2:]) == expected, warm


_entries = st.lists(st.text("abcdef", min_size=1, max_size=3), unique=True, max_size=6)


@given(
    start=_entries,
    ops=st.lists(
        st.tuples(st.sampled_from(["insert", "append", "remove"]), st.integers(0, 9), _entries),
        max_size=5,
    ),
)
def test_the_replay_rebuilds_the_servers_path_from_the_launchers(
    start: list[str], ops: list[tuple[str, int, list[str]]]
) -> None:
    """Whatever a bootstrap inserts, appends and removes, a worker whose prepare() set the
    launcher's path ends with the server's."""
    launcher = [f"/L/{e}" for e in start]
    saved, saved_state = list(sys.path), (_fork_prepare._before, _fork_prepare._replay)
    try:
        sys.path[:] = launcher
        _fork_prepare._before, _fork_prepare._replay = None, None
        _fork_prepare.before()
        for op, at, names in ops:  # what plugins do to it as they load
            for name in names:
                entry = f"/P/{name}"
                if op == "remove" and sys.path:
                    sys.path.pop(at % len(sys.path))
                elif entry not in sys.path:
                    if op == "insert":
                        sys.path.insert(at, entry)
                    else:
                        sys.path.append(entry)
        server = list(sys.path)
        _fork_prepare.settle()

        def prepare(_data: dict[str, object]) -> None:
            sys.path[:] = launcher  # multiprocessing's, in the worker

        _fork_prepare.wrap(prepare)({})
        assert sys.path == server
    finally:
        sys.path[:] = saved
        _fork_prepare._before, _fork_prepare._replay = saved_state
