"""Alias of :mod:`spawnkit.platforms.interface` for plugins written like the seed's ``device.py``.

The seed's plugins import ``...platforms.device_mixin``; keeping that path
working costs one line and spares every plugin author a rename.
"""

from __future__ import annotations

from spawnkit.platforms.interface import DeviceMixin, PlatformEnum

__all__ = ["DeviceMixin", "PlatformEnum"]
