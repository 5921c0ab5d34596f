"""Namespaces: their own groups, variables, base classes and current platforms."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from _platform_dists import PluginSite
from spawnkit.errors import PlatformContractError, PlatformPluginError
from spawnkit.namespace import Namespace
from spawnkit.platforms import explain_platform, initialize_current_platform
from spawnkit.platforms.builtin import CpuPlatform

ENGINE_BASE = """
from spawnkit.platforms.interface import Platform, PlatformEnum

class SRTPlatform(Platform, contract=True):
    def get_graph_pool(self, size: int = 1) -> str:
        return "engine"

class CpuSRT(SRTPlatform):
    _enum = PlatformEnum.CPU
    device_name = "cpu"
    device_type = "cpu"

class WithOwnBuiltins(SRTPlatform, contract=True):
    _builtin_platforms = {"cpu": __name__ + ":CpuSRT"}

class EngPlatform(Platform, contract=True):  # engine-wide defaults a built-in defines too
    def get_default_attention_backend(self) -> str:
        return "eng_paged_attn"

    def get_torch_distributed_backend_str(self) -> str:
        return "eng_ccl"

class EngWithCpu(EngPlatform, contract=True):  # the fix the refusal names
    _builtin_platforms = {"cpu": __name__ + ":EngCpuPlatform"}

from spawnkit.platforms.builtin import CpuPlatform

class EngCpuPlatform(CpuPlatform, EngWithCpu):
    def get_torch_distributed_backend_str(self) -> str:
        return EngPlatform.get_torch_distributed_backend_str(self)
"""


def _engine_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: str = "SRTPlatform"
) -> PluginSite:
    mod = f"engine_{uuid.uuid4().hex[:8]}"
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    (engine_dir / f"{mod}.py").write_text(textwrap.dedent(ENGINE_BASE))
    monkeypatch.syspath_prepend(str(engine_dir))
    s = PluginSite(tmp_path, monkeypatch, platform_base=f"{mod}:{base}")
    s.engine_module = mod  # type: ignore[attr-defined]
    return s


def test_seed_names_for_an_engine_namespace() -> None:
    name = f"eng{uuid.uuid4().hex[:6]}.srt"
    ns = Namespace(name, env_prefix="SGLANG")
    cfg = ns.config
    assert cfg.platform_group == f"{name}.platforms"
    assert (cfg.platform_var, cfg.cpu_engine_var) == ("SGLANG_PLATFORM", "SGLANG_USE_CPU_ENGINE")
    assert ns.platforms is ns.platforms and ns.platforms.namespace is ns


def test_two_namespaces_are_independent(
    site: PluginSite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b").mkdir()
    other = PluginSite(tmp_path / "b", monkeypatch)
    try:
        site.add_platform("alpha")
        monkeypatch.setenv(other.var, "cpu")
        assert site.pm.select().name == "alpha"  # the other namespace's variable is not ours
        assert type(other.pm.current()) is CpuPlatform
        assert other.pm.platform_dists() == {}  # our group's plugins are not theirs
        assert site.pm.current() is not other.pm.current()
        assert explain_platform(site.ns).namespace == site.ns.name
        assert initialize_current_platform(other.ns) is other.pm.current()
    finally:
        other.cleanup()


def test_custom_selector_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = uuid.uuid4().hex[:8].upper()
    var = f"X{tag}_DIFFUSION_PLATFORM_OVERRIDE"
    s = PluginSite(tmp_path, monkeypatch, platform_var=var)
    try:
        s.add_platform("my_device", activate="return None")
        monkeypatch.setenv(var, "cpu")
        assert type(s.pm.current()) is CpuPlatform
        assert var in str(s.pm.current())
    finally:
        s.cleanup()


def test_plugin_must_subclass_the_engine_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _engine_site(tmp_path, monkeypatch)
    try:
        s.add_platform("alpha")  # subclasses plain Platform
        with pytest.raises(PlatformPluginError) as info:
            s.pm.select()
        assert "SRTPlatform" in str(info.value) and "not a subclass" in str(info.value)
    finally:
        s.cleanup()


def test_plugin_on_the_engine_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _engine_site(tmp_path, monkeypatch)
    mod = s.engine_module  # type: ignore[attr-defined]
    try:
        body = (
            f"from {mod} import SRTPlatform\nfrom spawnkit.platforms import PlatformEnum\n"
            "class Plat(SRTPlatform):\n    _enum = PlatformEnum.OOT\n    device_name = 'd'\n"
            "    device_type = 'd'\n    def get_graph_pool(self, size: int = 1) -> str:\n"
            "        return 'plugin'\n"
        )
        s.add_platform("alpha", cls_body=body)
        assert s.pm.current().get_graph_pool() == "plugin"  # type: ignore[attr-defined]
    finally:
        s.cleanup()


def test_engine_contract_applies_to_its_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _engine_site(tmp_path, monkeypatch)
    mod = s.engine_module  # type: ignore[attr-defined]
    try:
        body = (
            f"from {mod} import SRTPlatform\nfrom spawnkit.platforms import PlatformEnum\n"
            "class Plat(SRTPlatform):\n    _enum = PlatformEnum.OOT\n    device_name = 'd'\n"
            "    device_type = 'd'\n    def get_graph_pool(self) -> str:\n        return 'x'\n"
        )
        s.add_platform("alpha", cls_body=body)
        with pytest.raises(PlatformPluginError) as info:
            s.pm.select()
        assert isinstance(info.value.__cause__, PlatformContractError)
    finally:
        s.cleanup()


def test_builtins_are_composed_with_the_engine_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _engine_site(tmp_path, monkeypatch)
    try:
        monkeypatch.setenv(s.cpu_var, "1")
        p = s.pm.current()
        assert isinstance(p, CpuPlatform) and type(p).__name__ == "CpuPlatformForSRTPlatform"
        assert p.get_graph_pool() == "engine"  # type: ignore[attr-defined]
        assert p.get_torch_distributed_backend_str() == "gloo"
        # the class that runs, not spawnkit's CpuPlatform (a composed class has no import path)
        mod = s.engine_module  # type: ignore[attr-defined]
        bases = f"spawnkit.platforms.builtin:CpuPlatform, {mod}:SRTPlatform"
        expected = f"CpuPlatformForSRTPlatform({bases})"
        assert s.pm.select().qualname == expected
        assert f"winner: builtin 'cpu' ({expected})" in str(s.pm.explain())
        s.pm.reset_for_tests()
        monkeypatch.delenv(s.cpu_var)
        s.pm.set_selection("base")
        assert type(s.pm.current()).__name__ == "SRTPlatform"
    finally:
        s.cleanup()


@pytest.mark.parametrize("name", ["cpu", "cuda"])
def test_engine_base_overrides_a_builtin_defines_too_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Composed as (CpuPlatform, EngPlatform), the built-in's methods won: the engine's
    eng_ccl and its attention backend never ran on the built-ins, unsaid."""
    from spawnkit.launch import build_spec
    from spawnkit.platforms._probes import Probe

    s = _engine_site(tmp_path, monkeypatch, base="EngPlatform")
    try:
        s.pm._probes["cuda"] = lambda: Probe(True, "test: cuda")
        monkeypatch.setenv(s.var, name)
        with pytest.raises(PlatformPluginError) as info:
            build_spec("os:getpid", namespace=s.ns)  # in the parent, before any worker
        text = str(info.value)
        clashing = {
            "cpu": "get_torch_distributed_backend_str",
            "cuda": "get_default_attention_backend, get_torch_distributed_backend_str",
        }[name]
        builtin = {"cpu": "CpuPlatform", "cuda": "CudaPlatform"}[name]
        mod = s.engine_module  # type: ignore[attr-defined]
        assert f"platform base {mod}:EngPlatform overrides {clashing}, " in text
        assert f"EngPlatform._builtin_platforms = {{{name!r}: '<module>:Eng{builtin}'}}" in text
        with pytest.raises(PlatformPluginError, match="would never run"):
            s.pm.current()  # and in-process
    finally:
        s.cleanup()


def test_an_engine_builtin_named_in_builtin_platforms_runs_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _engine_site(tmp_path, monkeypatch, base="EngWithCpu")
    try:
        monkeypatch.setenv(s.cpu_var, "1")
        p = s.pm.current()
        assert type(p).__name__ == "EngCpuPlatform"
        assert p.get_torch_distributed_backend_str() == "eng_ccl"
        assert p.get_default_attention_backend() == "eng_paged_attn"
        qualname = f"{s.engine_module}:EngCpuPlatform"  # type: ignore[attr-defined]
        assert s.pm.select().qualname == qualname
        assert f"({qualname})" in str(s.pm.explain())
    finally:
        s.cleanup()


def test_engine_base_may_name_its_own_builtins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _engine_site(tmp_path, monkeypatch, base="WithOwnBuiltins")
    try:
        s.pm.set_selection("cpu")
        with pytest.raises(PlatformPluginError, match="not a subclass"):
            s.pm.current()  # CpuSRT is an SRTPlatform but not a WithOwnBuiltins
    finally:
        s.cleanup()


def test_unimportable_engine_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = PluginSite(tmp_path, monkeypatch, platform_base="no_such_engine_zz:Base")
    try:
        s.pm.set_selection("base")
        with pytest.raises(PlatformPluginError, match="no_such_engine_zz:Base"):
            s.pm.current()
    finally:
        s.cleanup()


def test_redeclaring_a_namespace_returns_it_and_a_different_prefix_is_refused_every_time() -> None:
    """Plugin modules re-declare their engine's namespace; each plain re-declaration is
    checked once, and one with other settings is refused however often the first was seen."""
    from spawnkit.errors import NamespaceError

    name = f"redecl_{uuid.uuid4().hex[:8]}"
    first = Namespace(name, "REDECL")
    for _ in range(3):  # the second and later calls take the already-checked path
        assert Namespace(name, "REDECL") is first
    for _ in range(2):
        with pytest.raises(NamespaceError, match="already declared with different settings"):
            Namespace(name, "OTHER")
        with pytest.raises(NamespaceError, match=f"env_prefix='{name.upper()}'"):
            Namespace(name)  # the prefix derived from the name differs
    with pytest.raises(NamespaceError, match="OTHER_PLATFORM"):
        Namespace(name, "REDECL", platform_var="OTHER_PLATFORM")
    assert Namespace(name, "REDECL") is first


@pytest.mark.parametrize(
    ("prefix", "needles"),
    [
        # Before: accepted, and the ENG7_PLATFORM a user sets was silently never read.
        ("eng7", ["so the ENG7_PLATFORM a user sets would be ignored", "env_prefix='ENG7'"]),
        ("Eng", ["ENG_PLATFORM", "Eng_PLATFORM", "env_prefix='ENG'"]),
        ("7ENG", ["not starting with a digit", "a shell cannot set"]),
        ("ÉNG", ["a shell cannot set"]),  # isalnum() took it before
        ("ENG-X", ["a shell cannot set"]),
        ("", ["got ''"]),
    ],
)
def test_an_env_prefix_no_user_could_set_as_documented_is_refused(
    prefix: str, needles: list[str]
) -> None:
    from spawnkit.errors import ConfigError

    name = f"prefix_{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigError) as info:
        Namespace(name, env_prefix=prefix)
    assert info.value.setting == "env_prefix" and name in str(info.value)
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    assert Namespace(name, env_prefix="ENG_7").config.platform_var == "ENG_7_PLATFORM"
