"""``spawn_spec_on_ray(build_spec(...))``: each rank's node decides its platform, as with
``spawn_on_ray``, unless the user chose one.

``build_spec`` pins the platform its own detection chose (right for workers on this
machine).  Given to ``spawn_spec_on_ray``, that pin sent the driver's hardware to every Ray
node: a rank on a node with an accelerator the driver lacks ran the driver's platform, unsaid.
A real local cluster whose raylet (and so its workers) sees the accelerator ``FAKEACC=1``
while the driver does not; a real platform plugin distribution.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _platform_dists import node_accelerator
from _ray_support import local_ray_cluster
from spawnkit.testing import write_distribution

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "spawnkit[ray]"')

import spawnkit  # noqa: E402
import spawnkit.scaleout.ray as skray  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spawnkit-ray")]


_APP = """
def main(payload=None):
    from spawnkit.platforms import current_platform
    return current_platform.device_name or "base"
"""


@pytest.fixture(scope="module")
def accelerated_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    site = tmp_path_factory.mktemp("skdp")
    write_distribution(
        site, "skdp-fakeacc", "1.0",
        entry_points={"spawnkit.platforms": {"fakeacc": "skdp_fakeacc:activate"}},
        modules={"skdp_fakeacc.py": node_accelerator("skdp_fakeacc"), "skdp_app.py": _APP},
    )  # fmt: skip
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "FAKEACC")}
    src = str(Path(spawnkit.__file__).parent.parent)  # the source under test
    os.environ.update(PYTHONPATH=os.pathsep.join([str(site), src]), FAKEACC="1")
    sys.path.insert(0, str(site))
    try:
        with local_ray_cluster(tmp_path_factory, "skdp-", 600.0) as cluster:
            for key, value in saved.items():  # the driver's node: no accelerator
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            yield cluster
    finally:
        sys.path.remove(str(site))
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run(template: Any) -> Any:
    with skray.spawn_spec_on_ray(template, nprocs=1, ready_timeout=120, join_timeout=120) as g:
        return g.results()


def test_a_build_spec_template_runs_each_ray_nodes_own_platform(accelerated_nodes: Any) -> None:
    template = spawnkit.build_spec("skdp_app:main")
    assert template.platform == "base"  # what this driver detected, for its own workers
    # Before: ['base'] on the node with the accelerator; spawn_on_ray's rank ran fakeacc.
    assert _run(template) == ["fakeacc"]
    with skray.spawn_on_ray("skdp_app:main", nprocs=1, ready_timeout=120) as group:
        assert group.results(timeout=120) == ["fakeacc"]


def test_a_platform_the_user_chose_stays_pinned(
    accelerated_nodes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPAWNKIT_PLATFORM", "base")  # the driver's choice, not its detection
    template = spawnkit.build_spec("skdp_app:main")
    monkeypatch.delenv("SPAWNKIT_PLATFORM")
    assert _run(template) == ["base"]
    # and one set on the template since build_spec
    assert _run(template.replace(platform="fakeacc")) == ["fakeacc"]
