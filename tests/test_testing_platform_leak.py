"""A platform one test decided in process reaches no later test (``testing/_platforms``).

Before: a test that read ``current_platform`` without ``platform_selection`` pinned it for
the session, and a later test selecting another platform with ``monkeypatch.setenv`` got
that platform from ``run_entry`` (a real spawned worker) and the earlier test's in process.
A fresh pytest run, with a platform plugin installed for the whole session as a plugin
author's own is.
"""

from __future__ import annotations

import pytest

CONFTEST = """
import os
import sys

import pytest

from spawnkit.testing import write_distribution

ROOT = os.path.join(os.path.dirname(__file__), "site")
write_distribution(
    ROOT,
    "my-platform-plugin",
    entry_points={"spawnkit.platforms": {"my_device": "my_platform_plugin:activate"}},
    modules={
        "my_platform_plugin": (
            "import os\\n\\ndef activate():\\n"
            "    if os.environ.get('MY_DEVICE_VISIBLE') == '1':\\n"
            "        return 'my_platform_plugin.impl.MyPlatform'\\n"
        ),
        "my_platform_plugin.impl": (
            "from spawnkit.platforms.interface import Platform, PlatformEnum\\n\\n"
            "class MyPlatform(Platform):\\n"
            "    _enum = PlatformEnum.OOT\\n"
            "    device_name = 'my_device'\\n"
            "    device_type = 'my_device'\\n"
        ),
    },
)
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="module")
def suite_platform():
    import spawnkit.platforms as platforms

    return platforms.current_platform.device_name, id(platforms.current_platform)
"""

TESTS = """
import spawnkit.platforms as platforms
from spawnkit.testing import run_entry


def device():
    return platforms.current_platform.device_name  # each read asks the manager


def test_a_reads_the_platform():
    assert device() != "my_device"  # auto: no device visible


def test_b_selects_another(monkeypatch):
    monkeypatch.setenv("SPAWNKIT_PLATFORM", "my_device")
    monkeypatch.setenv("MY_DEVICE_VISIBLE", "1")
    assert run_entry(device).result == "my_device"
    assert device() == "my_device"


def test_c_isolated_reads_it(isolated_hooks):
    assert device() != "my_device"


def test_d_auto_again():
    assert device() != "my_device"


def selected():
    from spawnkit.platforms.discovery import PlatformManager

    return PlatformManager.default().select().name  # decided, not built


def test_e_selects_without_a_device():
    assert selected() != "my_device"


def test_f_selects_with_one(monkeypatch):
    monkeypatch.setenv("MY_DEVICE_VISIBLE", "1")
    assert selected() == "my_device"
"""

SUITE = """
import pytest

import spawnkit.platforms as platforms


# a module-scoped fixture's platform is the suite's: the same instance in both tests
def test_one(suite_platform):
    assert suite_platform[1] == id(platforms.current_platform)


def test_two(suite_platform):
    assert suite_platform[1] == id(platforms.current_platform)
"""


def test_a_platform_read_in_one_test_is_decided_afresh_in_the_next(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_leak=TESTS, test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    # before: test_b failed, its worker on my_device and this process on test_a's platform
    result.assert_outcomes(passed=8)
