"""``MyDiffusionPlatform``: the demo engine's platform for my_device, with its own RMSNorm."""

from __future__ import annotations

from my_platform_plugin.device import MyDeviceMixin
from spawnkit.platforms.interface import Platform, PlatformEnum

__all__ = ["MyDiffusionPlatform"]


class MyDiffusionPlatform(Platform, MyDeviceMixin):
    _enum = PlatformEnum.OOT
    device_name = "my_device"
    dispatch_key = "PrivateUse1"

    def get_dispatch_key_name(self) -> str:
        return "my_device"

    def init_backend(self) -> None:
        # Imported here, once per worker after the platform is chosen: torch and
        # the op registry stay out of processes that never pick this platform.
        from my_platform_plugin.ops import rms_norm_forward
        from spawnkit.platforms import CustomOp, RMSNorm

        CustomOp.register_oot_forward(RMSNorm, fn=rms_norm_forward, platform_key="my_device")
