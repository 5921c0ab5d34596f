"""Imports point one way, down the order written in docs/architecture.md, and close no circle.

Every module of ``src/spawnkit`` is read with ``ast`` at every scope (a
function-local import, a class body, an ``if TYPE_CHECKING:`` block) and a
string that names a spawnkit module for loading (a lazy-export table,
``import_module``, ``"module:attr"``) counts as an import (see
``tests/_layercheck.py``).  A lazy import still runs against the order when
it runs, and a type-level one still ties the modules together, so there is
no exception list.  The order is read from the document, so the two cannot
drift apart.
"""

from __future__ import annotations

import importlib
import re
import textwrap
from pathlib import Path

import pytest

import spawnkit
from _layercheck import cycles, global_writes, layer_order, read_graph, violations

SRC = Path(spawnkit.__file__).parent
ROOT = SRC.parents[1]
ORDER = layer_order((ROOT / "docs" / "architecture.md").read_text())


def _graph():  # type: ignore[no-untyped-def]
    graph = read_graph(SRC.parent, "spawnkit")
    assert len(graph.modules) > 100 and len(graph.edges) > 500  # it read the real package
    return graph


def test_the_order_names_every_layer_of_the_issue() -> None:
    assert ORDER == [
        ["cli"],
        ["spawnkit", "ray", "run"],
        ["bench", "testing", "scaleout", "demo"],
        ["launch"],
        ["protocol"],
        ["bootstrap"],
        ["namespace"],
        ["hooks", "platforms"],
        ["spec", "errors", "_*"],
    ]


def test_no_module_imports_a_layer_above_its_own() -> None:
    found = violations(_graph(), "spawnkit", ORDER)
    assert not found, "imports against the layer order:\n" + "\n".join(found)


def test_no_import_circle_between_modules() -> None:
    found = cycles(_graph())
    assert not found, "import circles:\n" + "\n\n".join(" -> ".join(c) for c in found)


def test_no_module_writes_the_globals_of_another_package() -> None:
    """#22 item 2: a package's state is changed through its own functions (``_phase.restore``),
    never by another package assigning to its module (the warm server once wrote a callback
    into ``hooks.plugins``)."""
    found = global_writes(SRC.parent, "spawnkit")
    assert not found, "writes into another package's module:\n" + "\n".join(found)


def test_nothing_outside_protocol_imports_its_private_modules() -> None:
    """#22 item 2: the protocol's private parts stay behind its public modules."""
    found = [
        e.where
        for e in _graph().edges
        if e.target.startswith("spawnkit.protocol.")
        and e.target.rpartition(".")[2].startswith("_")
        and not e.source.startswith("spawnkit.protocol")
    ]
    assert not found, "\n".join(found)


def test_the_write_checker_finds_planted_writes(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/state.py": "flag = False\n",
            "pkg/a/own.py": "from pkg.a import state\nstate.flag = True\n",
            "pkg/b/__init__.py": "",
            "pkg/b/w1.py": "from pkg.a import state\n\ndef f():\n    state.flag = True\n",
            "pkg/b/w2.py": "def f():\n    import pkg.a.state\n    pkg.a.state.flag += 1\n",
            "pkg/b/w3.py": "from ..a import state as s\nsetattr(s, 'flag', 1)\n",
            "pkg/b/w4.py": "import pkg.a.state as s\ndel s.flag\n",
            "pkg/b/reads.py": "from pkg.a import state\nx = state.flag\nstate.obj.attr = 1\n",
        },
    )
    found = global_writes(tmp_path, "pkg")
    assert sorted(found) == [
        "pkg/b/w1.py:4 writes pkg.a.state.flag",
        "pkg/b/w2.py:3 writes pkg.a.state.flag",
        "pkg/b/w3.py:2 writes pkg.a.state.setattr",
        "pkg/b/w4.py:2 writes pkg.a.state.flag",
    ]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checker_finds_a_planted_up_import_and_a_planted_circle(tmp_path: Path) -> None:
    """The check itself, on a package with one of each kind of load, so it cannot pass vacuously."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": '"""pkg.low (this docstring names it) is no load."""\n',
            "pkg/top.py": "from pkg import low\n",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from pkg.top import X
                """,
            "pkg/low/b.py": """\
                import importlib, logging
                _log = logging.getLogger("pkg.top")
                def f():
                    return importlib.import_module("pkg.low.c")
                """,
            "pkg/low/c.py": """\
                TABLE = {"name": "pkg.low.d"}
                """,
            "pkg/low/d.py": """\
                def g():
                    from . import b
                """,
            "pkg/low/e.py": 'REF = "pkg.top:run"\n',
        },
    )
    order = layer_order("layers: top -> low")
    graph = read_graph(tmp_path, "pkg")
    assert sorted(violations(graph, "pkg", order)) == [
        "pkg/low/a.py:3 imports pkg.top (up from layer 1 to layer 0)",
        "pkg/low/e.py:1 names pkg.top (up from layer 1 to layer 0)",
    ]
    [circle] = cycles(graph)
    assert circle[:3] == [
        "pkg/low/b.py:4 names pkg.low.c",
        "pkg/low/c.py:1 names pkg.low.d",
        "pkg/low/d.py:2 imports pkg.low.b",
    ]


def test_a_module_outside_every_layer_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/stray.py": "import pkg.low\n", "pkg/low.py": ""})
    with pytest.raises(AssertionError, match=r"pkg\.stray is in 0 layers"):
        violations(read_graph(tmp_path, "pkg"), "pkg", layer_order("layers: low"))


def _promised_imports() -> list[tuple[str, str]]:
    """Every ``from spawnkit... import a, b`` that README.md and docs/ show, as (module, name)."""
    found = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for module, names in re.findall(r"from (spawnkit[\w.]*) import ([\w, ]+)", doc.read_text()):
            found.update((module, n.strip()) for n in names.split(",") if n.strip())
    return sorted(found)


def test_every_import_the_docs_show_works() -> None:
    """The layering moved names between modules; each one the docs promise still imports."""
    promised = _promised_imports()
    assert ("spawnkit.platforms", "current_platform") in promised  # the scan reads the docs
    missing = []
    for module, name in promised:
        if name in ("current_platform", "Engine"):  # resolved on access: checked below
            continue
        if not hasattr(importlib.import_module(module), name):
            missing.append(f"from {module} import {name}")
    assert not missing, missing
    # and the names the layering moved, which the docs call by attribute
    moved = [
        ("spawnkit", "get_context"),
        ("spawnkit", "bootstrap_here"),
        ("spawnkit", "load_plugins"),
        ("spawnkit.hooks", "apply_plugin_hooks"),
        ("spawnkit.hooks.plugins", "load_plugins"),
        ("spawnkit.platforms", "explain_platform"),
        ("spawnkit.platforms", "initialize_current_platform"),
        ("spawnkit.launch", "spawn_with_plugins"),
        ("spawnkit.launch", "WorkerGroup"),
    ]
    for module, name in moved:
        assert callable(getattr(importlib.import_module(module), name)), (module, name)


def test_the_module_level_api_acts_on_the_default_namespaces_own_state() -> None:
    """Owned by the lower layers, shared with the facade: one manager, never two."""
    import spawnkit.hooks
    import spawnkit.hooks.plugins
    import spawnkit.platforms
    from spawnkit.hooks.plugins import PluginManager
    from spawnkit.platforms.discovery import PlatformManager

    ns = spawnkit.default_namespace()
    assert ns.platforms is PlatformManager.default()
    assert ns.plugins is PluginManager.default()
    assert spawnkit.hooks.load_plugins is spawnkit.hooks.plugins.load_plugins
    assert spawnkit.load_plugins is spawnkit.hooks.plugins.load_plugins
    assert str(spawnkit.platforms.explain_platform()) == str(ns.explain_platform())


def test_naming_spawnkits_own_platform_base_is_the_default_config() -> None:
    """``platform_base`` defaults to ``""`` now that the spec may not name a platforms module."""
    from spawnkit.namespace import Namespace
    from spawnkit.platforms import Platform

    explicit = Namespace("layers_pb_probe", platform_base=Platform)
    assert explicit is Namespace("layers_pb_probe")
    assert explicit.config.platform_base == ""
