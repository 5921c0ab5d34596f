"""``spawn_on_ray(plugins=...)`` is checked in the driver, as ``<PREFIX>_PLUGINS`` is.

``plugins="patcher"`` was made ``tuple("patcher")``: the ranks were asked for plugins ``'p'``,
``'a'``, ``'t'``... and each refused it once its actor had started ("the parent's selection
(names=) selects 'a', 'c', 'e', ..."), where ``ProcessSpec(plugins="ab")`` is refused at once.
And a name no installed plugin has went to every rank, where the same name in
``<PREFIX>_PLUGINS`` is refused once, in the driver, with a did-you-mean.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from spawnkit import _metadata
from spawnkit.errors import ConfigError, PluginError, PluginSelectionWarning
from spawnkit.spec import NamespaceConfig
from spawnkit.testing import write_distribution


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NamespaceConfig]:
    tag = f"rpa{uuid.uuid4().hex[:8]}"
    write_distribution(
        tmp_path, f"{tag}-app", "1.0", modules={f"{tag}_app": "def main(payload=None):\n    pass\n"}
    )
    write_distribution(
        tmp_path, f"{tag}-plugin", "1.0",
        entry_points={f"{tag}.plugins": {"patcher": f"{tag}_plugin:register"}},
        modules={f"{tag}_plugin": "def register():\n    pass\n"},
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    _metadata.clear_cache()
    yield NamespaceConfig.build(tag, tag.upper())
    _metadata.clear_cache()


def _template(config: NamespaceConfig, **kwargs: Any) -> Any:
    import spawnkit.scaleout.ray as skray

    return skray.build_template(f"{config.name}_app:main", namespace=config, **kwargs)


def test_one_string_is_refused_not_read_as_its_letters(config: NamespaceConfig) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError) as info:
        _template(config, plugins="patcher")
    assert info.value.setting == "plugins"
    assert "spawn_on_ray(plugins='patcher'): one string" in str(info.value)
    assert "plugins=('patcher',)" in str(info.value)
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
    assert _template(config, plugins=("patcher",)).plugins == ("patcher",)  # the control


def test_an_unknown_name_is_refused_in_the_driver(
    config: NamespaceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = r"plugins=\['patchr'\]\) selects 'patchr' \(did you mean 'patcher'\?\)"
    with pytest.raises(PluginError, match=said):
        _template(config, plugins=["patchr"])
    # lenient: one warning here, and the name left out, as for the variable
    monkeypatch.setenv(config.lenient_var, "1")
    with pytest.warns(PluginSelectionWarning, match="'patchr'"):
        assert _template(config, plugins=["patchr", "patcher"]).plugins == ("patcher",)
    # drift allowed: each rank's node decides, so the name is kept for it
    monkeypatch.delenv(config.lenient_var)
    monkeypatch.setenv(config.allow_plugin_drift_var, "1")
    assert _template(config, plugins=["patchr"]).plugins == ("patchr",)
