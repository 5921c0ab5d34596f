"""``<PREFIX>_ALLOW_PLUGIN_DRIFT`` reads as every other boolean variable of a namespace does.

It counted only ``"1"``: ``=true`` (or ``yes``, ``on``) got the drift refusal telling the user
to set ``=1``, which they had, in their words; ``=maybe`` was read as off, never refused,
where ``<PREFIX>_LENIENT_PLUGINS=maybe`` is a ``ConfigError`` naming the variable.  Real
ranks (``python -m spawnkit.run`` with torchrun's variables) and real distributions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spawnkit.errors import ConfigError
from spawnkit.spec.signing import generate_key
from test_torchrun import _env, _namespace, _rank_by_hand, _write_versioned

RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "1"}


def _spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, Path]:
    """A spec written where sktr-plugin 1.0 is installed; ranks run on a node with 2.0."""
    from spawnkit import write_launch_spec

    launcher = _write_versioned(tmp_path / "v1", "1.0")
    key = generate_key()
    out = tmp_path / "out"
    out.mkdir()
    spec_file = tmp_path / "spec.bin"
    monkeypatch.syspath_prepend(str(launcher))
    payload = {"tag": "t1", "out": str(out)}
    write_launch_spec(spec_file, "sktr_app.entry:main", payload, key=key, namespace=_namespace())
    _write_versioned(tmp_path / "node", "2.0")
    return spec_file, key, out


@pytest.mark.parametrize("value", ["true", "yes", "ON", " 1 "])
def test_a_node_with_other_plugins_runs_under_any_true_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    spec_file, key, out = _spec(tmp_path, monkeypatch)
    env = dict(_env(tmp_path / "node", key), SKTR_ALLOW_PLUGIN_DRIFT=value)
    proc = _rank_by_hand(spec_file, env, **RANKS)
    # before: PluginDriftError "... or set SKTR_ALLOW_PLUGIN_DRIFT=1 to run anyway"
    assert proc.returncode == 0, proc.stderr
    assert "another plugin set than the launcher" in proc.stderr, proc.stderr
    assert json.loads((out / "rank0.json").read_text())["greet"] == "hello x (patched by 2.0)"


@pytest.mark.parametrize("value", ["false", "0", "off", ""])
def test_a_false_spelling_still_refuses_the_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """The control: off is off, however it is spelt."""
    spec_file, key, out = _spec(tmp_path, monkeypatch)
    env = dict(_env(tmp_path / "node", key), SKTR_ALLOW_PLUGIN_DRIFT=value)
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
    proc = _rank_by_hand(spec_file, env, **RANKS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = json.loads((tmp_path / "err.json").read_text())["message"]["message"]
    assert text.startswith("spawnkit.errors.PluginDriftError"), text
    assert not list(out.iterdir())


def test_a_value_that_is_no_boolean_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_file, key, out = _spec(tmp_path, monkeypatch)
    env = dict(_env(tmp_path / "node", key), SKTR_ALLOW_PLUGIN_DRIFT="maybe")
    env["TORCHELASTIC_ERROR_FILE"] = str(tmp_path / "err.json")
    proc = _rank_by_hand(spec_file, env, **RANKS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = json.loads((tmp_path / "err.json").read_text())["message"]["message"]
    # before: PluginDriftError, the value read as off
    assert text.startswith("spawnkit.errors.ConfigError"), text
    assert "SKTR_ALLOW_PLUGIN_DRIFT='maybe' is not a boolean" in text, text
    assert not list(out.iterdir())


def test_the_launcher_refuses_a_value_no_rank_could_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused once where the spec is written, as ``_LENIENT_PLUGINS=maybe`` is, not by
    every rank after the job was scheduled."""
    from spawnkit import write_launch_spec

    launcher = _write_versioned(tmp_path / "v1", "1.0")
    monkeypatch.syspath_prepend(str(launcher))
    for where in ("env", "environ"):
        if where == "environ":
            monkeypatch.setenv("SKTR_ALLOW_PLUGIN_DRIFT", "maybe")
        env = {"SKTR_ALLOW_PLUGIN_DRIFT": "maybe"} if where == "env" else None
        with pytest.raises(ConfigError, match="SKTR_ALLOW_PLUGIN_DRIFT='maybe' is not a boolean"):
            write_launch_spec(
                tmp_path / "spec.bin", "sktr_app.entry:main", key=generate_key(),
                namespace=_namespace(), env=env,
            )  # fmt: skip
        assert not (tmp_path / "spec.bin").exists()
