"""A Ray group keeps a bound longer than one wait of Ray or of ``threading`` allows.

``ray.get`` takes its timeout in milliseconds as a C ``long`` and a rank's ``Event.wait``
no more than ``threading.TIMEOUT_MAX`` (292 years on Linux): ``spawn_on_ray(...,
ready_timeout=sys.maxsize)``, which ``check_seconds`` accepts, raised a bare
``OverflowError`` while placing the group, and a bound of 10**12 s a ``RayTaskError
(OverflowError)`` from every rank's ``wait_ready``, in place of the run.  And
``ready_timeout=None``, which the check accepts as "no startup limit" (its message says so),
was ``TypeError: unsupported operand type(s) for +: 'float' and 'NoneType'``.  Real local
cluster.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from test_ray import _env, _namespace, _site, ray_cluster  # noqa: F401  (module-scoped cluster)

MONTH = 30 * 86400.0
pytestmark = [pytest.mark.xdist_group("spawnkit-ray"), pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    "bound",
    [MONTH, 1e12, float(sys.maxsize), None],
    ids=["month", "past-TIMEOUT_MAX", "maxsize", "none"],
)
def test_a_ray_group_keeps_a_bound_of_any_length(
    ray_cluster: Any,  # noqa: F811
    tmp_path: Path,
    bound: float | None,
) -> None:
    import spawnkit.scaleout.ray as skray

    root = _site(tmp_path / "site")
    with skray.spawn_on_ray(
        "skray_app.entry:main", {"tag": "long"}, nprocs=2, namespace=_namespace(),
        env=_env(root), ready_timeout=bound, join_timeout=bound,
    ) as group:  # fmt: skip
        assert [r.rank for r in group.wait_ready(timeout=bound)] == [0, 1]
        assert [r.rank for r in group.wait_ready()] == [0, 1]  # the group's own bound
        results = group.results(timeout=bound)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["tag"] == "long" for r in results)
    assert group.exit_codes == [0, 0]


def test_a_ray_groups_wait_refuses_a_timeout_the_local_group_refuses(
    ray_cluster: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``wait_ready(timeout=-1)`` tore the Ray group down as late ranks ("did not finish their
    bootstrap within 0.7s ... Raise ready_timeout"), ``"5"`` was a bare ``TypeError``; the
    local group refuses both, and the group runs on."""
    import spawnkit.scaleout.ray as skray
    from spawnkit.errors import ConfigError

    root = _site(tmp_path / "site")
    with skray.spawn_on_ray(
        "skray_app.entry:main", {"tag": "args"}, nprocs=1, namespace=_namespace(),
        env=_env(root), ready_timeout=120, join_timeout=120,
    ) as group:  # fmt: skip
        for call, wait, value in [
            ("wait_ready", group.wait_ready, -1), ("wait_ready", group.wait_ready, "5"),
            ("join", group.join, float("nan")), ("join", group.join, "5"),
            ("join", group.results, -1.0),
        ]:  # fmt: skip
            with pytest.raises(ConfigError, match=rf"^{call}\(timeout={value!r}\)"):
                wait(timeout=value)
        assert [r["tag"] for r in group.results(timeout=120)] == ["args"]  # it ran on
