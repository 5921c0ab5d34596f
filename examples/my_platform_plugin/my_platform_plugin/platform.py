"""``MyPlatform``: the platform spawnkit's default namespace gets when my_device is visible."""

from __future__ import annotations

from my_platform_plugin.device import MyDeviceMixin
from spawnkit.platforms.interface import Platform

__all__ = ["MyPlatform"]


class MyPlatform(Platform, MyDeviceMixin):
    dispatch_key = "PrivateUse1"

    def get_default_attention_backend(self) -> str:
        return "my_device_flash"

    def support_cuda_graph(self) -> bool:
        return False

    def get_dispatch_key_name(self) -> str:
        return "my_device"
