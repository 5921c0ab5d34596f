"""The device interface every platform implements, and the check that keeps plugins honest.

A misspelled or mis-signed override in a plugin would silently leave the base implementation
running on the wrong hardware, so ``__init_subclass__`` checks every class when it is defined:
public names must be interface names, overrides must accept every interface call and be of
the same kind, and a mixin's override must not be shadowed earlier in the MRO. An engine's
``class X(Platform, contract=True)`` extends the interface. Standard library only (no torch).
The check itself is in ``_contract.py``, imported only for a class spawnkit does not ship.
"""

from __future__ import annotations

import enum

from spawnkit._compat import TYPE_CHECKING
from spawnkit._names import qualified_name
from spawnkit.errors import PlatformContractError

if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = ["DeviceMixin", "Platform", "PlatformEnum"]


class PlatformEnum(enum.Enum):
    """Which kind of hardware a platform drives; ``OOT`` marks every out-of-tree plugin."""

    CUDA = "cuda"
    ROCM = "rocm"
    XPU = "xpu"
    CPU = "cpu"
    OOT = "oot"
    UNSPECIFIED = "unspecified"


#: Where spawnkit's own platform classes live (as ``_family_of`` reads it): checked by
#: tests/test_platform_interface.py, not as every worker defines them (#23: the check and its
#: 20 kB of code were a cold worker's).
_VETTED = "spawnkit.platforms."


def _check_class(cls: type, *, defines_contract: bool) -> None:
    """Raise one ``PlatformContractError`` listing every problem of ``cls``, not the first."""
    from spawnkit.platforms._contract import _contract, _member_problems, _shadowing_problems

    where = qualified_name(cls)
    problems = _member_problems(cls, where, defines_contract=defines_contract, mixin=DeviceMixin)
    problems.extend(_shadowing_problems(cls, _contract(cls), where, Platform))
    enum_value = cls.__dict__.get("_enum")
    if enum_value is not None and not isinstance(enum_value, PlatformEnum):
        problems.append(
            f"{where}._enum must be a PlatformEnum member (out-of-tree platforms use "
            f"PlatformEnum.OOT), got {enum_value!r}."
        )
    if len(problems) == 1:
        raise PlatformContractError(problems[0])
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise PlatformContractError(
            f"{where} breaks the platform interface in {len(problems)} places:\n{listed}"
        )


def _family_of(cls: type) -> PlatformEnum:
    """The ``_enum`` of the nearest built-in class ``cls`` derives from (``UNSPECIFIED``: none).

    An out-of-tree platform must declare ``PlatformEnum.OOT``, which alone made a plugin
    subclassing ``RocmPlatform`` answer ``is_rocm()`` False: ``CustomOp`` ran ``forward_cuda``
    on AMD and never a kernel registered for ``rocm``.  The family is the ancestry's.
    """
    for klass in cls.__mro__:
        enum = vars(klass).get("_enum")
        if isinstance(enum, PlatformEnum) and klass.__module__.startswith("spawnkit.platforms."):
            return enum
    return PlatformEnum.UNSPECIFIED


class DeviceMixin:
    """What the engine asks of a device (memory in bytes); a plugin's device mixin overrides these.

    The defaults raise, so a missing implementation fails instead of returning a wrong number.
    """

    _spawnkit_contract: ClassVar[bool] = True
    _enum: ClassVar[PlatformEnum] = PlatformEnum.UNSPECIFIED
    #: The built-in family the class derives from (see ``_family_of``).
    _family: ClassVar[PlatformEnum] = PlatformEnum.UNSPECIFIED
    device_name: ClassVar[str] = ""
    device_type: ClassVar[str] = ""

    def __init_subclass__(cls, *, contract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._spawnkit_contract = contract
        if not cls.__module__.startswith(_VETTED):
            _check_class(cls, defines_contract=contract)
        cls._family = _family_of(cls)

    def _missing(self, method: str) -> NotImplementedError:
        label = self.device_name or "unspecified"
        return NotImplementedError(
            f"platform {type(self).__qualname__} (device {label!r}) does not implement "
            f"{method}(). If no platform was found for this machine, install a platform plugin "
            "or select a built-in one (e.g. <PREFIX>_PLATFORM=cpu); explain_platform() shows "
            "what discovery found."
        )

    def set_device(self, device: Any) -> None:
        """Make ``device`` the current device of this process."""
        raise self._missing("set_device")

    def get_device_name(self, device_id: int = 0) -> str:
        """The marketing name of device ``device_id`` (e.g. ``NVIDIA H200``)."""
        raise self._missing("get_device_name")

    def get_device_count(self) -> int:
        """How many devices of this platform this process can see."""
        raise self._missing("get_device_count")

    def get_device_total_memory(self, device_id: int = 0) -> int:
        """Total memory of device ``device_id`` in bytes."""
        raise self._missing("get_device_total_memory")

    def get_current_memory_usage(self, device: Any = None) -> float:
        """Memory this process currently uses on ``device``, in bytes."""
        raise self._missing("get_current_memory_usage")

    def get_device_capability(self, device_id: int = 0) -> tuple[int, int] | None:
        """(major, minor) compute capability, or None where the notion does not apply."""
        raise self._missing("get_device_capability")

    def get_torch_distributed_backend_str(self) -> str:
        """The ``torch.distributed`` backend for this device (``nccl``, ``gloo``, ...)."""
        raise self._missing("get_torch_distributed_backend_str")

    def is_cuda(self) -> bool:
        return self._is(PlatformEnum.CUDA)

    def is_rocm(self) -> bool:
        return self._is(PlatformEnum.ROCM)

    def is_xpu(self) -> bool:
        return self._is(PlatformEnum.XPU)

    def is_cpu(self) -> bool:
        return self._is(PlatformEnum.CPU)

    def _is(self, family: PlatformEnum) -> bool:
        # A plugin deriving from a built-in (``class Rdna3Platform(RocmPlatform)``) must say
        # OOT, and is still of that built-in's family: its ops and engine checks go AMD's way.
        enum = self._enum
        return enum is family or (enum is PlatformEnum.OOT and self._family is family)

    def is_out_of_tree(self) -> bool:
        return self._enum is PlatformEnum.OOT


class Platform(DeviceMixin, contract=True):
    """The base platform: engine-facing capabilities on top of the device interface.

    Used as is when discovery finds nothing; then every device query says how to select one.
    """

    #: torch's dispatcher key for the device (``CPU``, ``CUDA``, ``XPU``; ``PrivateUse1`` for an
    #: out-of-tree one), for an engine's own ``torch.library`` operators.  ``CustomOp`` does not
    #: read it: its kernels are keyed by ``get_dispatch_key_name()``.
    dispatch_key: ClassVar[str] = ""

    def get_default_attention_backend(self) -> str:
        """Engine-neutral default; engines override this in their own base."""
        return "torch_native"

    def support_cuda_graph(self) -> bool:
        return False

    def get_dispatch_key_name(self) -> str:
        """The key ``CustomOp`` kernels are registered under (``register_oot_forward``'s
        ``platform_key``) and looked up by: the torch device type unless overridden."""
        return self.device_type

    def init_backend(self) -> None:
        """Once per process, after resolution: register kernels, import the runtime, etc."""

    def _describe_selection(self) -> str:
        selection = self.__dict__.get("_selection")
        if selection is None:
            return "not selected by discovery (constructed directly)"
        how = " -> ".join(selection.path)
        where = f" from {selection.dist} {selection.version}" if selection.dist else ""
        text = f"selected as {selection.kind} {selection.name!r}{where}"
        return f"{text} ({how})" if how else text

    def __repr__(self) -> str:
        cls = type(self)
        return (
            f"<{qualified_name(cls)} device_name={self.device_name!r} "
            f"device_type={self.device_type!r} enum={self._enum.name}>"
        )

    def __str__(self) -> str:
        cls = type(self)
        name = self.device_name or "unspecified"
        return (
            f"{cls.__qualname__} (device {name!r}, torch device type "
            f"{self.device_type or '-'!r}, {self._enum.name}; {qualified_name(cls)})"
            f", {self._describe_selection()}"
        )
