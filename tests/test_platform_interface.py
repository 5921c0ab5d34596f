"""The device interface and its class-definition contract check."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from spawnkit.errors import MissingExtraError, PlatformContractError
from spawnkit.platforms import DeviceMixin, Platform, PlatformEnum
from spawnkit.platforms import device_mixin as alias


def _seed_like() -> tuple[type, type]:
    """The seed's my_platform_plugin device.py and platform.py, written against spawnkit."""

    class MyDeviceMixin(alias.DeviceMixin):
        _enum = alias.PlatformEnum.OOT
        device_name = "my_device"
        device_type = "my_device"

        def set_device(self, device) -> None:  # type: ignore[no-untyped-def]
            self._dev = device

        def get_device_name(self, device_id=0) -> str:  # type: ignore[no-untyped-def]
            return f"my-device-{device_id}"

        def get_device_total_memory(self, device_id=0) -> int:  # type: ignore[no-untyped-def]
            return 1 << 30

        def get_current_memory_usage(self, device=None) -> float:  # type: ignore[no-untyped-def]
            return 0.0

        def get_device_capability(self, device_id=0):  # type: ignore[no-untyped-def]
            return (1, 0)

        def get_torch_distributed_backend_str(self) -> str:
            return "my_ccl"

    class MySRTPlatform(Platform, MyDeviceMixin):
        def get_default_attention_backend(self) -> str:
            return "my_attn"

        def support_cuda_graph(self) -> bool:
            return False

    return MyDeviceMixin, MySRTPlatform


def test_seed_plugin_is_writable_against_the_interface() -> None:
    _mixin, plat = _seed_like()
    p = plat()
    assert alias.DeviceMixin is DeviceMixin and alias.PlatformEnum is PlatformEnum
    assert p.is_out_of_tree() and not p.is_cuda() and not p.is_cpu()
    assert p.get_device_name(3) == "my-device-3"  # the mixin's method, not the base's
    assert p.get_torch_distributed_backend_str() == "my_ccl"
    assert p.get_default_attention_backend() == "my_attn"
    assert p.get_dispatch_key_name() == "my_device"
    assert "MySRTPlatform" in str(p) and "my_device" in repr(p)


def test_enum_predicates() -> None:
    for member, pred in [
        (PlatformEnum.CUDA, "is_cuda"),
        (PlatformEnum.ROCM, "is_rocm"),
        (PlatformEnum.XPU, "is_xpu"),
        (PlatformEnum.CPU, "is_cpu"),
        (PlatformEnum.OOT, "is_out_of_tree"),
    ]:
        cls = type("P", (Platform,), {"_enum": member})
        p = cls()
        preds = ["is_cuda", "is_rocm", "is_xpu", "is_cpu", "is_out_of_tree"]
        assert [getattr(p, n)() for n in preds] == [n == pred for n in preds]


def test_base_device_queries_say_how_to_fix() -> None:
    with pytest.raises(NotImplementedError, match="does not implement get_device_name"):
        Platform().get_device_name()
    with pytest.raises(NotImplementedError, match="explain_platform"):
        Platform().get_torch_distributed_backend_str()
    assert Platform().get_dispatch_key_name() == ""
    Platform().init_backend()


def test_misspelled_public_name_is_rejected_with_suggestion() -> None:
    with pytest.raises(PlatformContractError) as info:

        class Bad(Platform):
            def get_devce_name(self, device_id: int = 0) -> str:
                return "x"

    text = str(info.value)
    assert "Bad.get_devce_name" in text and "Did you mean 'get_device_name'" in text
    assert isinstance(info.value, TypeError)


def test_every_bad_name_is_listed_at_once() -> None:
    """One import shows every mistake, not one per round trip (as SGLang's check does)."""
    with pytest.raises(PlatformContractError) as info:

        class Bad(Platform):
            _enum = "oot"  # type: ignore[assignment]
            device_name = 3  # type: ignore[assignment]

            def get_devce_name(self, device_id: int = 0) -> str:
                return "x"

            def set_device(self, device: Any, strict: bool) -> None:
                pass

    text = str(info.value)
    assert "Bad breaks the platform interface in 4 places" in text
    for fragment in ("get_devce_name", "must be a str", "extra parameter 'strict'", "_enum"):
        assert fragment in text


def test_private_helpers_are_allowed() -> None:
    class Ok(Platform):
        def _helper(self) -> int:
            return 1

    assert Ok()._helper() == 1


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("def get_device_name(self): return 'x'", "parameter 'device_id' is missing"),
        ("def get_device_name(self, idx=0): return 'x'", "named 'idx'"),
        ("def get_device_name(self, device_id): return 'x'", "lost its default"),
        ("def set_device(self, device, strict): pass", "extra parameter 'strict'"),
        ("def set_device(self, device, /): pass", "positional-only"),
        ("@staticmethod\ndef set_device(device): pass", "staticmethod"),
        ("set_device = 3", "int value"),
        ("device_name = 3", "must be a str"),
        ("def device_type(self): return 'x'", "must be a str"),
        ("_enum = 'oot'", "PlatformEnum member"),
    ],
)
def test_incompatible_overrides_are_rejected(source: str, fragment: str) -> None:
    body = "class Bad(Platform):\n" + "\n".join("    " + line for line in source.splitlines())
    scope: dict[str, Any] = {"Platform": Platform}
    with pytest.raises(PlatformContractError) as info:
        exec(body, scope)
    assert fragment in str(info.value)
    assert "Bad." in str(info.value)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("async def support_cuda_graph(self): return False", "returns a coroutine, never run"),
        ("def support_cuda_graph(self):\n    yield False", "returns a generator, never run"),
        ("async def get_device_count(self):\n    yield 8", "an async generator, never run"),
    ],
)
def test_async_and_generator_overrides_of_plain_methods_are_rejected(
    source: str, fragment: str
) -> None:
    """``support_cuda_graph()`` returned a coroutine, always true; the signatures matched."""
    body = "class Bad(Platform):\n" + "\n".join("    " + line for line in source.splitlines())
    with pytest.raises(PlatformContractError) as info:
        exec(body, {"Platform": Platform})
    text = str(info.value)
    assert fragment in text and "Define it as the interface does (a plain def)" in text


def test_the_not_in_interface_hint_does_not_offer_contract_true_to_plugins() -> None:
    with pytest.raises(PlatformContractError) as info:

        class Bad(Platform):
            def get_devce_name(self, device_id: int = 0) -> str:
                return "x"

    assert "`class X(Platform, contract=True)`" not in str(info.value)
    assert "Only an engine extends the interface" in str(info.value)


@pytest.mark.parametrize(
    "source",
    [
        "def get_device_name(self, device_id=0, *, verbose=False): return 'x'",
        "def get_device_name(self, *args, **kwargs): return 'x'",
        "def get_device_name(self, device_id: int = 1) -> str: return 'x'",
        "def set_device(self, device, stream=None): pass",
        "device_name = 'mine'",
        "@property\ndef device_type(self): return 'mine'",
    ],
)
def test_compatible_overrides_are_accepted(source: str) -> None:
    body = "class Good(Platform):\n" + "\n".join("    " + line for line in source.splitlines())
    exec(body, {"Platform": Platform})


def test_mixin_shadowed_by_engine_base_is_rejected() -> None:
    class EngineBase(Platform, contract=True):
        def get_device_name(self, device_id: int = 0) -> str:
            return "engine default"

    class Mixin(DeviceMixin):
        def get_device_name(self, device_id: int = 0) -> str:
            return "mixin"

    with pytest.raises(PlatformContractError, match="shadowed"):

        class Wrong(EngineBase, Mixin):
            pass

    class Right(Mixin, EngineBase):
        pass

    assert Right().get_device_name() == "mixin"


class _ChipMixin(DeviceMixin):
    device_type = "cuda"

    def get_device_count(self) -> int:
        return 4

    def get_torch_distributed_backend_str(self) -> str:
        return "vccl"


def test_mixin_shadowed_by_a_builtin_is_rejected() -> None:
    """CudaPlatform listed first won over the chip's own methods: nccl, torch's count."""
    from spawnkit.platforms import CudaPlatform

    with pytest.raises(PlatformContractError) as info:

        class VChip(CudaPlatform, _ChipMixin):
            _enum = PlatformEnum.OOT
            device_name = "vchip"

    text = str(info.value)
    assert "in 2 places" in text  # device_type is "cuda" in both: nothing lost
    assert "_ChipMixin.get_torch_distributed_backend_str is shadowed by " in text
    assert "_TorchCudaApi.get_torch_distributed_backend_str (through CudaPlatform)" in text
    assert "List _ChipMixin before CudaPlatform in the bases of " in text
    assert "stop redefining" not in text  # a built-in's own method is not the user's to change

    class Right(_ChipMixin, CudaPlatform):  # the fix it names; the mixin overrides CUDA's
        _enum = PlatformEnum.OOT
        device_name = "vchip"

    assert Right().get_torch_distributed_backend_str() == "vccl"
    assert Right().get_device_count() == 4


def test_mixin_shadowed_by_the_vendors_own_base_is_rejected() -> None:
    class VendorCommon(Platform):
        _enum = PlatformEnum.OOT
        device_name = device_type = "vnd"

        def get_device_count(self) -> int:
            return 1

    class Gen2Mixin(DeviceMixin):
        def get_device_count(self) -> int:
            return 8

    with pytest.raises(PlatformContractError) as info:

        class Gen2(VendorCommon, Gen2Mixin):
            pass

    text = str(info.value)
    assert "Gen2Mixin.get_device_count is shadowed by " in text
    assert ".VendorCommon.get_device_count, which comes first" in text
    assert "or stop redefining 'get_device_count' in " in text  # the vendor's own class


def test_overrides_that_reach_the_mixin_are_accepted() -> None:
    """super() hands on; a subclass of the mixin overrides it; a platform listed later is
    overridden on purpose by the class listed before it."""
    from spawnkit.platforms import CudaPlatform

    class Wrapping(Platform):
        def get_device_count(self) -> int:
            return 2 * int(super().get_device_count())

    class Hands(Wrapping, _ChipMixin):
        pass

    assert Hands().get_device_count() == 8

    class Gen3Mixin(_ChipMixin):
        def get_device_count(self) -> int:
            return 16

    class Gen3(Platform, Gen3Mixin, _ChipMixin):
        pass

    assert Gen3().get_device_count() == 16

    class Tuned(Platform):
        def get_torch_distributed_backend_str(self) -> str:
            return "tuned"

    class TunedCuda(Tuned, CudaPlatform):
        pass

    assert TunedCuda().get_torch_distributed_backend_str() == "tuned"


def test_engine_base_extends_the_interface() -> None:
    class SRTPlatform(Platform, contract=True):
        def get_graph_pool(self, size: int = 1) -> str:
            return "default"

    class Plugin(SRTPlatform):
        def get_graph_pool(self, size: int = 1) -> str:
            return "mine"

    assert Plugin().get_graph_pool() == "mine"
    with pytest.raises(PlatformContractError, match="get_graph_pool"):

        class BadPlugin(SRTPlatform):
            def get_graph_pool(self) -> str:
                return "x"

    with pytest.raises(PlatformContractError, match="not part of the platform interface"):

        class Elsewhere(Platform):  # the engine's names do not leak into other namespaces
            def get_graph_pool(self, size: int = 1) -> str:
                return "x"


def test_engine_base_overrides_are_checked_too() -> None:
    with pytest.raises(PlatformContractError, match="support_cuda_graph"):

        class SRTPlatform(Platform, contract=True):
            def support_cuda_graph(self, extra: int) -> bool:
                return False


def _shapes() -> list[Any]:
    import functools

    def plain(self, a, b=1, *args, c, d=2, **kw): ...  # type: ignore[no-untyped-def]
    def posonly(a, b=3, /, c=4, *, d): ...  # type: ignore[no-untyped-def]
    def bare(): ...  # type: ignore[no-untyped-def]
    def kwonly_star(*, a=1): ...  # type: ignore[no-untyped-def]
    def only_var(*a, **k): ...  # type: ignore[no-untyped-def]

    @functools.wraps(plain)
    def wrapped(*a, **k): ...  # type: ignore[no-untyped-def]

    def signed(x): ...  # type: ignore[no-untyped-def]

    signed.__signature__ = inspect.signature(posonly)  # type: ignore[attr-defined]

    def with_locals(a, b=2):  # type: ignore[no-untyped-def]
        c = d = a
        return c, d

    return [plain, posonly, bare, kwonly_star, only_var, wrapped, signed, with_locals,
            functools.partial(plain, 1), len]  # fmt: skip


@pytest.mark.parametrize("fn", _shapes(), ids=lambda f: getattr(f, "__name__", "partial"))
def test_the_override_check_reads_a_signature_as_inspect_does(fn: Any) -> None:
    # the check reads plain functions' code objects (no inspect in a cold worker)
    from spawnkit.platforms._contract import _signature

    expected = [
        (p.name, int(p.kind), p.default is not p.empty)
        for p in inspect.signature(fn).parameters.values()
    ]
    assert _signature(fn) == expected


def test_spawnkit_own_platform_classes_pass_the_check_they_skip_as_defined() -> None:
    """spawnkit's own classes are not checked as every worker defines them (#23: a cold worker
    does not import the check); they are checked here, with every class the skip covers."""
    import importlib
    import importlib.util
    import pkgutil

    from spawnkit import platforms
    from spawnkit.platforms import interface

    modules = []
    for info in pkgutil.iter_modules(platforms.__path__):
        try:
            modules.append(importlib.import_module(f"{platforms.__name__}.{info.name}"))
        except MissingExtraError:  # custom_op needs torch: without it, none of its classes exist
            if importlib.util.find_spec("torch") is not None:
                raise
    vetted = {
        obj
        for module in modules
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, DeviceMixin) and obj is not DeviceMixin
    }
    assert Platform in vetted and len(vetted) >= 6  # the built-in platforms were found
    assert all(cls.__module__.startswith(interface._VETTED) for cls in vetted)
    for cls in vetted:
        interface._check_class(cls, defines_contract=cls.__dict__["_spawnkit_contract"])

