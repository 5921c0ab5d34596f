"""Alias of :mod:`spawnkit.platforms.interface` for plugins written like the seed's."""

from __future__ import annotations

from spawnkit.platforms.interface import DeviceMixin, PlatformEnum

__all__ = ["DeviceMixin", "PlatformEnum"]
