"""A Ray rank whose raylet's environment selects plugins the driver did not.

The cluster of this module is started with ``SKRN_PLUGINS=one`` in its raylet's
environment (as ``SKRN_PLUGINS=one ray start ...`` on a node), and the driver has no
selection: before, each rank loaded only ``one`` while the driver recorded "every plugin"
as the set all ranks run, so the plugin-set check agreed, exit 0, nothing said.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _ray_support import local_ray_cluster
from spawnkit.errors import ChildRaisedError
from spawnkit.spec import NamespaceConfig
from spawnkit.testing import write_distribution

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')

import spawnkit.scaleout.ray as skray  # noqa: E402

pytestmark = pytest.mark.xdist_group("spawnkit-ray")

APP = """
def main(payload=None):
    from spawnkit.bootstrap import current_report
    return sorted(p["name"] for p in current_report().plugins)
"""


def _site(root: Path) -> Path:
    write_distribution(root, "skrn-app", "1.0", modules={"skrn_app": APP})
    for name in ("one", "two"):
        write_distribution(
            root,
            f"skrn-{name}",
            "1.0",
            entry_points={"skrn.plugins": {name: f"skrn_{name}:register"}},
            modules={f"skrn_{name}": "def register():\n    pass\n"},
        )
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = _site(tmp_path_factory.mktemp("skrn") / "site")
    os.environ["SKRN_PLUGINS"] = "one"  # the raylet's environment, not the driver's
    try:
        with local_ray_cluster(tmp_path_factory, "skrn-", 600.0):
            os.environ.pop("SKRN_PLUGINS", None)
            yield root
    finally:
        os.environ.pop("SKRN_PLUGINS", None)


def _run(root: Path, env: dict[str, str] | None = None) -> list[Any]:
    import spawnkit

    path = os.pathsep.join([str(root), str(Path(spawnkit.__file__).parent.parent)])
    with skray.spawn_on_ray(
        "skrn_app:main",
        nprocs=1,
        namespace=NamespaceConfig.build("skrn", "SKRN"),
        env={"PYTHONPATH": path, **(env or {})},
        ready_timeout=90,
        join_timeout=60,
    ) as group:
        return group.results()


def test_a_rank_whose_raylet_selects_other_plugins_refuses(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(site))  # the driver's installation: one and two
    with pytest.raises(ChildRaisedError) as info:
        _run(site)
    err = info.value
    assert err.exc_type == "spawnkit.errors.PluginDriftError"
    assert err.stage == "plugin_check"
    text = str(err)
    assert "SKRN_PLUGINS='one' in its own environment" in text, text
    assert "the driver selected one, two for every rank" in text, text
    assert "its node's selection" in text and "SKRN_ALLOW_PLUGIN_DRIFT=1" in text, text


def test_allowed_it_runs_its_nodes_selection_with_a_warning(
    site: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(site))
    assert _run(site, {"SKRN_ALLOW_PLUGIN_DRIFT": "1"}) == [["one"]]
    err = capfd.readouterr().err
    assert "SKRN_PLUGINS='one' in its own environment" in err, err
    assert "SKRN_ALLOW_PLUGIN_DRIFT=1 allows this" in err, err


def test_the_drivers_own_selection_runs_quietly(
    site: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The control: a selection the driver makes travels in env= and is what every rank
    loads, whatever the raylet's environment says."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SKRN_PLUGINS", "one,two")
    assert _run(site) == [["one", "two"]]
    monkeypatch.delenv("SKRN_PLUGINS")
    assert _run(site, {"SKRN_PLUGINS": "two"}) == [["two"]]
    assert "own environment" not in capfd.readouterr().err
