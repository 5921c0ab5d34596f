"""``MyDeviceMixin``: what the engine asks of the device, answered by the (simulated) runtime."""

from __future__ import annotations

import os
import resource
from typing import Any

from spawnkit.platforms.interface import DeviceMixin, PlatformEnum

__all__ = ["MyDeviceMixin"]

_TOTAL_MEMORY = 16 * 1024**3


class MyDeviceMixin(DeviceMixin):
    _enum = PlatformEnum.OOT
    device_name = "my_device"
    # The torch device type tensors are allocated on.  The device is simulated,
    # so its kernels run on the host: a real plugin names its own device type.
    device_type = "cpu"

    def set_device(self, device: Any) -> None:
        index = int(getattr(device, "index", device) or 0)
        count = self.get_device_count()
        if not 0 <= index < count:
            raise RuntimeError(
                f"my_device {index} does not exist: {count} visible (set MY_DEVICE_COUNT)"
            )
        os.environ["MY_DEVICE_CURRENT"] = str(index)

    def get_device_name(self, device_id: int = 0) -> str:
        return f"My Device {device_id} (simulated)"

    def get_device_count(self) -> int:
        import my_device_runtime

        return int(my_device_runtime.device_count())

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return _TOTAL_MEMORY

    def get_current_memory_usage(self, device: Any = None) -> float:
        # The simulated device shares host memory: report this process's peak RSS.
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def get_device_capability(self, device_id: int = 0) -> tuple[int, int] | None:
        return (1, 0)

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"
