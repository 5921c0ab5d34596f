"""Suite-wide settings; fixtures for users live in spawnkit.testing (a pytest11 plugin).

The suite's own shared fixtures are plugins declared here, once, so pytest
rewrites their asserts and every test module sees the same instances.

torch is an extra (``spawnkit[torch]``), and CI runs the suite without it on
every Python but the default one: a test that needs torch carries
``@pytest.mark.needs_torch`` and is skipped here, with that reason, where
torch is not installed.  One place decides, so no module needs its own
``importorskip`` and a forgotten marker shows up as a failure, not a skip.
"""

from __future__ import annotations

import importlib.util

import pytest

pytest_plugins = ["_hooks_support", "_platform_dists", "pytester"]

_NO_TORCH = pytest.mark.skip(
    reason='needs torch, which is not installed: pip install "spawnkit[torch]" (needs_torch)'
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if importlib.util.find_spec("torch") is not None:
        return
    for item in items:
        if item.get_closest_marker("needs_torch") is not None:
            item.add_marker(_NO_TORCH)
