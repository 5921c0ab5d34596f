"""``run_entry(timeout=...)`` refused by its own name: the launcher's check named
``ready_timeout='5'``, an argument the test never passed (``run_entry`` sets it from
``timeout=``)."""

from __future__ import annotations

import math
from typing import Any

import psutil
import pytest

from spawnkit.errors import ConfigError
from spawnkit.testing import run_entry


@pytest.mark.parametrize("value", ["5", -1, 0, math.nan, math.inf, True])
def test_a_timeout_that_is_no_bound_is_refused_as_run_entrys_own(value: Any) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError) as info:
        run_entry("json:dumps", timeout=value)
    assert str(info.value).startswith(f"run_entry(timeout={value!r})"), info.value
    assert info.value.setting == "timeout"
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
