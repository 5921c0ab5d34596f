"""Lenient mode and the selected platform's own distribution when its hooks fail to APPLY.

Loading that distribution's general plugin stays strict under ``<PREFIX>_LENIENT_PLUGINS=1``
(its failure is a ``PluginError``); its registrations failing to apply (a misspelt REPLACE
target) used to be one ERROR line while the worker ran the native code and exited 0.  Now
the worker fails with ``HookApplyError`` naming the distribution; another distribution's
failing target is still logged and skipped (the control).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spawnkit import _metadata, spawn_with_plugins
from spawnkit.errors import ChildRaisedError, HookApplyError
from spawnkit.namespace import Namespace
from spawnkit.protocol import warm as _warm_server
from spawnkit.testing import write_distribution

_KERN = """
from spawnkit import get_namespace
from spawnkit.hooks import HookType

def kernel(x):
    return "{name}-kernel"

def register():
    get_namespace({tag!r}).hooks.register("{eng}.layers.{target}", kernel, HookType.REPLACE)
"""


@pytest.fixture
def ns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Namespace]:
    tag = f"lp{uuid.uuid4().hex[:8]}"
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    namespace = Namespace(tag, env_prefix=tag.upper())
    namespace.root = root  # type: ignore[attr-defined]
    yield namespace
    _warm_server.shutdown_forkservers()


def _site(ns: Namespace, chip_target: str, other_target: str | None = None) -> str:
    tag, root = ns.name, ns.root  # type: ignore[attr-defined]
    eng, chip = f"{tag}eng", f"{tag}chip"
    layers = (
        "def rms_norm(x):\n    return 'native'\n\ndef gelu(x):\n    return 'native'\n\n"
        "def entry(payload=None):\n"
        f"    from {eng} import layers\n"
        "    return [layers.rms_norm(1), layers.gelu(1)]\n"
    )
    write_distribution(
        root, f"{tag}-eng", "1.0", modules={f"{eng}/__init__.py": "", f"{eng}.layers": layers}
    )
    platform = (
        "from spawnkit.platforms.interface import Platform, PlatformEnum\n"
        "class ChipPlatform(Platform):\n"
        "    _enum = PlatformEnum.OOT\n"
        "    device_name = 'chip'\n"
        "    device_type = 'cpu'\n"
        f"def activate():\n    return '{chip}.ChipPlatform'\n"
    )
    write_distribution(
        root,
        f"{tag}-chip",
        "1.0",
        entry_points={
            ns.config.platform_group: {"chip": f"{chip}:activate"},
            ns.config.plugin_group: {"chip_kernels": f"{chip}.kern:register"},
        },
        modules={
            f"{chip}/__init__.py": platform,
            f"{chip}.kern": _KERN.format(name="chip", tag=tag, eng=eng, target=chip_target),
        },
    )
    if other_target is not None:
        write_distribution(
            root,
            f"{tag}-other",
            "1.0",
            entry_points={ns.config.plugin_group: {"other": f"{tag}other:register"}},
            modules={
                f"{tag}other/__init__.py": _KERN.format(
                    name="other", tag=tag, eng=eng, target=other_target
                )
            },
        )
    _metadata.clear_cache()
    return f"{eng}.layers:entry"


def _run(ns: Namespace, entry: str) -> list[object]:
    env = {ns.config.platform_var: "chip", ns.config.lenient_var: "1"}
    with spawn_with_plugins(
        entry, namespace=ns, env=env, start_method="spawn", ready_timeout=60, join_timeout=60
    ) as group:
        return list(group.results(timeout=60))


def test_lenient_mode_does_not_cover_the_platform_dists_failing_hooks(ns: Namespace) -> None:
    entry = _site(ns, chip_target="rmsnorm")  # misspelt: the engine's is rms_norm
    with pytest.raises(ChildRaisedError) as info:
        _run(ns, entry)
    child = info.value.child_exception
    assert isinstance(child, HookApplyError), type(child)
    text = str(info.value)
    assert "rmsnorm" in text and f"{ns.name}-chip" in text
    assert "selected platform's distribution, so lenient mode does not apply" in text


def test_lenient_mode_still_skips_another_dists_failing_hooks(ns: Namespace) -> None:
    """Control: the platform's own hook applies; another distribution's misspelt target is
    logged and skipped, as lenient mode says."""
    entry = _site(ns, chip_target="rms_norm", other_target="gelu_tanh")
    assert _run(ns, entry) == [["chip-kernel", "native"]]
