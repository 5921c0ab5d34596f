"""A stand-in for a vendor's device runtime library (the seed's ``my_device_runtime``).

No ``my_device`` hardware exists, so "visible" is decided the way real
runtimes decide it from the environment: ``MY_DEVICE_VISIBLE=1`` makes the
device present, ``MY_DEVICE_COUNT`` says how many there are (default 2).
"""

from __future__ import annotations

import os

__all__ = ["device_count", "is_available"]


def is_available() -> bool:
    return os.environ.get("MY_DEVICE_VISIBLE", "").strip() == "1"


def device_count() -> int:
    if not is_available():
        return 0
    try:
        return max(1, int(os.environ.get("MY_DEVICE_COUNT", "2")))
    except ValueError:
        return 1
