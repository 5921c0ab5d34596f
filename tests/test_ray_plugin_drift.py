"""A Ray rank whose node has another version of a plugin refuses before loading plugins.

A real ``ray.cluster_utils.Cluster``: the head has no CPUs; node A is started
with the launcher's plugin version on its ``PYTHONPATH``, node B with another
version (a node's raylet environment is what its workers see).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _ray_support import file_lock
from spawnkit.errors import ChildRaisedError
from spawnkit.spec import NamespaceConfig
from spawnkit.testing import write_distribution

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')

import spawnkit.scaleout.ray as skray  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spawnkit-ray")]

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
PLUGIN = """
from spawnkit.hooks import HookType

def register():
    from spawnkit.namespace import get_namespace
    get_namespace("skdrift").hooks.register("skdrift_app:greet", _around, HookType.AROUND)

def _around(original, *args, **kwargs):
    return original(*args, **kwargs) + " (patched by VERSION)"
"""
APP = """
def greet():
    return "hello"

def main(payload=None):
    import skdrift_app
    return skdrift_app.greet()
"""


def _site(root: Path, version: str) -> Path:
    write_distribution(root, "skdrift-app", "1.0", modules={"skdrift_app": APP})
    write_distribution(
        root,
        "skdrift-plugin",
        version,
        entry_points={"skdrift.plugins": {"patcher": "skdrift_plugin:register"}},
        modules={"skdrift_plugin": PLUGIN.replace("VERSION", version)},
    )
    return root


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    from ray.cluster_utils import Cluster

    base = tmp_path_factory.mktemp("drift")
    v1, v2 = _site(base / "v1", "1.0"), _site(base / "v2", "2.0")
    lock = tmp_path_factory.getbasetemp().parent / "spawnkit-ray-cluster.lock"
    with file_lock(lock, 600.0):
        temp_dir = tempfile.mkdtemp(prefix="skdr-", dir="/tmp" if os.path.isdir("/tmp") else None)
        saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_TMPDIR", "PYTHONPATH")}
        os.environ.pop("RAY_ADDRESS", None)
        os.environ["RAY_TMPDIR"] = temp_dir
        cluster = None
        nodes: list[str] = []
        try:
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 0, "object_store_memory": NODE["object_store_memory"]})
            import spawnkit

            under_test = str(Path(spawnkit.__file__).parent.parent)  # not the venv's install
            for site in (v1, v2):  # each raylet (and its workers) sees its own version
                os.environ["PYTHONPATH"] = os.pathsep.join([str(site), under_test])
                nodes.append(cluster.add_node(**NODE).node_id)
            os.environ.pop("PYTHONPATH")
            ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # pragma: no cover - environment-dependent
            if cluster is not None:
                cluster.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
            pytest.skip(f"cannot start a multi-node Ray cluster here: {type(exc).__name__}: {exc}")
        finally:
            _restore(saved, ("RAY_ADDRESS", "PYTHONPATH"))
        try:
            yield v1, nodes
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
            _restore(saved, ("RAY_TMPDIR",))


def _restore(saved: dict[str, str | None], keys: tuple[str, ...]) -> None:
    for key in keys:
        value = saved[key]
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _launch(env: dict[str, str] | None = None) -> Any:
    """Two ranks, one per node; no PYTHONPATH: each node's own installation is used."""
    return skray.spawn_on_ray(
        "skdrift_app:main",
        nprocs=2,
        namespace=NamespaceConfig.build("skdrift", "SKDRIFT"),
        env=env or {},
        strategy="STRICT_SPREAD",
        ready_timeout=120,
        join_timeout=120,
    )


def test_a_node_with_another_plugin_version_refuses(
    two_versions: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, nodes = two_versions
    monkeypatch.syspath_prepend(str(v1))  # the launcher's own installation: version 1.0
    with _launch() as group, pytest.raises(ChildRaisedError) as info:
        group.results()
    err = info.value
    assert err.exc_type == "spawnkit.errors.PluginDriftError"
    assert err.rank in (0, 1) and err.stage == "plugin_check"
    text = str(err)
    assert "skdrift-plugin: launcher 1.0, node 2.0" in text
    assert nodes[1] in text  # node B, by its Ray node id
    assert "refuses to load plugins" in text and "SKDRIFT_ALLOW_PLUGIN_DRIFT=1" in text
    assert "'plugin_check'" in text.splitlines()[0]


def test_allow_plugin_drift_runs_with_a_warning(
    two_versions: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    v1, _ = two_versions
    monkeypatch.syspath_prepend(str(v1))
    with _launch({"SKDRIFT_ALLOW_PLUGIN_DRIFT": "1"}) as group:
        results = group.results()
    assert sorted(results) == ["hello (patched by 1.0)", "hello (patched by 2.0)"]
    err = capfd.readouterr().err
    assert "another plugin set than the launcher" in err
    assert "SKDRIFT_ALLOW_PLUGIN_DRIFT=1 allows this" in err


def test_a_template_of_build_spec_is_held_to_the_launchers_versions(
    two_versions: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spawn_spec_on_ray(build_spec(...))``: the template records no plugin set, only the
    launcher's entry-point rows, by which each rank imports the plugin from its own node:
    before, the rank on node B ran 2.0's hook, results ``patched by 1.0`` and ``by 2.0``."""
    import spawnkit

    v1, nodes = two_versions
    monkeypatch.syspath_prepend(str(v1))
    template = spawnkit.build_spec(
        "skdrift_app:main", namespace=NamespaceConfig.build("skdrift", "SKDRIFT")
    )
    with skray.spawn_spec_on_ray(
        template, nprocs=2, strategy="STRICT_SPREAD", ready_timeout=120, join_timeout=120
    ) as group, pytest.raises(ChildRaisedError) as info:
        group.results()
    err = info.value
    assert err.exc_type == "spawnkit.errors.PluginDriftError" and err.stage == "plugin_check"
    assert "skdrift-plugin: launcher 1.0, node 2.0" in str(err) and nodes[1] in str(err)
