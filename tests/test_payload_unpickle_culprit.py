"""A payload that fails to unpickle in the worker names the class, where it sits, and the fix.

``pickle.loads`` says ``No module named 'x'`` or what a ``__setstate__`` raised, never for
which object of a payload of nested configs: the worker's error said only
``Payload (dict) could not be unpickled: ValueError: ...``.  Real modules on ``sys.path``,
a real spawned worker where the failure is the worker's own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from spawnkit.errors import BootstrapError
from spawnkit.spec import Payload
from spawnkit.testing import run_entry

_CONFIG = """
import os

class Cfg:
    def __init__(self, n):
        self.n = n

    def __setstate__(self, state):
        if os.environ.get("CFG_REFUSES"):
            raise ValueError("device handle gone")
        self.__dict__.update(state)

class Engine:
    def __init__(self, cfg):
        self.cfg = cfg

def build(n):
    if os.environ.get("CFG_REFUSES"):
        raise RuntimeError("no such device")
    return Rebuilt(n)

class Rebuilt:
    def __init__(self, n):
        self.n = n

    def __reduce__(self):
        return (build, (self.n,))

def main(payload):
    return payload["engine"].cfg.n
"""


@pytest.fixture
def pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh package ``<name>.config`` on ``sys.path`` (spawned workers inherit it)."""
    name = f"unpk_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "config.py").write_text(textwrap.dedent(_CONFIG))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _config(pkg: str):  # type: ignore[no-untyped-def]
    __import__(f"{pkg}.config")
    return sys.modules[f"{pkg}.config"]


def test_a_setstate_that_raises_in_the_worker_is_named_with_its_place(pkg: str) -> None:
    mod = _config(pkg)
    payload = {"engine": mod.Engine(mod.Cfg(3))}
    with pytest.raises(BootstrapError) as info:
        run_entry(f"{pkg}.config:main", payload, plugins=[], env={"CFG_REFUSES": "1"})
    text = str(info.value)
    assert f"{pkg}.config.Cfg at payload['engine'].cfg raised in its __setstate__" in text
    assert "device handle gone" in text and f"Make {pkg}.config.Cfg.__setstate__ work" in text
    assert info.value.stage == "materialize_payload"


def test_the_same_payload_runs_where_it_unpickles(pkg: str) -> None:  # the control
    mod = _config(pkg)
    run = run_entry(f"{pkg}.config:main", {"engine": mod.Engine(mod.Cfg(3))}, plugins=[])
    assert run.result == 3


def test_a_module_only_the_launcher_has_is_named_with_the_class_and_place() -> None:
    name = f"onlyhere_{uuid.uuid4().hex[:8]}"
    made = type(sys)(name)
    exec("class Thing:\n    pass\n", made.__dict__)
    sys.modules[name] = made
    try:
        payload = Payload.capture({"jobs": [1, {"sink": made.Thing()}]})
    finally:
        del sys.modules[name]  # as the worker sees it: no such module
    with pytest.raises(BootstrapError, match="cannot import") as info:
        payload.materialize()
    text = str(info.value)
    assert f"{name}.Thing at payload['jobs'][1]['sink']: ModuleNotFoundError" in text
    assert "Install the package that defines it" in text and info.value.kind == "payload"


def test_a_class_renamed_since_capture_is_named(pkg: str) -> None:
    mod = _config(pkg)
    payload = Payload.capture({"engine": mod.Engine(mod.Cfg(1))})
    cfg = mod.Cfg
    del mod.Cfg  # the worker's version of the module calls it something else
    try:
        with pytest.raises(BootstrapError) as info:
            payload.materialize()
    finally:
        mod.Cfg = cfg
    text = str(info.value)
    assert f"{pkg}.config.Cfg at payload['engine'].cfg: AttributeError" in text
    assert "renamed or moved since the payload was captured" in text


def test_a_reduce_call_that_raises_is_named(pkg: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _config(pkg)
    payload = Payload.capture({"engine": mod.Engine([1, mod.Rebuilt(2)])})
    monkeypatch.setenv("CFG_REFUSES", "1")
    with pytest.raises(BootstrapError) as info:
        payload.materialize()
    text = str(info.value)
    assert f"{pkg}.config.build at payload['engine'].cfg[1] raised while its pickle" in text
    assert "no such device" in text


def test_bad_bytes_keep_their_plain_message() -> None:
    bad = Payload.from_pickled(b"\x80\x05not a pickle at all", "x.Y")
    with pytest.raises(BootstrapError, match=r"could not be unpickled: UnpicklingError"):
        bad.materialize()


def test_a_payload_that_unpickles_never_loads_the_culprit_finder() -> None:
    code = (
        "import sys; from spawnkit.spec import Payload\n"
        "assert Payload.capture({'a': [1, 2]}).materialize() == {'a': [1, 2]}\n"
        "print('spawnkit.spec._unpickle_where' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
