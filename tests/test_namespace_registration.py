"""Engines register their namespace; the module-level API follows the worker's namespace.

Every test installs real distributions (``*.dist-info`` with
``entry_points.txt``) into its own site directory: an engine that registers
``<tag> = "<tag>_eng.namespace:NS"`` in ``spawnkit.namespaces`` with an
``env_prefix`` that is *not* the upper-cased name (so a guessed prefix shows),
a platform plugin ``myaccel`` and a general plugin ``tracer`` for it.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spawnkit import _metadata, spawn_with_plugins
from spawnkit.cli import main
from spawnkit.errors import NamespaceError
from spawnkit.namespace import Namespace, default_namespace, get_namespace
from spawnkit.testing import write_distribution

TIMEOUT = 120.0

ENGINE_NAMESPACE = """
from spawnkit.namespace import Namespace

NS = Namespace({tag!r}, env_prefix={prefix!r})
"""

ENGINE_WORKER = """
import spawnkit.platforms as module_level
from spawnkit.bootstrap import current_spec
from spawnkit.namespace import default_namespace, get_namespace
from {tag}_eng.namespace import NS


def platforms():
    return {{
        "module_level": module_level.current_platform.device_name,
        "initialize": module_level.initialize_current_platform().device_name,
        "same_object": module_level.current_platform is NS.current_platform,
        "explained_for": module_level.explain_platform().namespace,
        "get_namespace_none": get_namespace().name,
        "default_still_default": default_namespace().name,
        "rank": current_spec().rank,
    }}


def describe():
    spec = current_spec()
    return f"{{spec.namespace.env_prefix}}:{{module_level.current_platform.device_name}}"
"""

PLATFORM = """
from spawnkit.platforms.interface import Platform, PlatformEnum


class MyAccel(Platform):
    _enum = PlatformEnum.OOT
    device_name = "myaccel"
    device_type = "cpu"


def activate():
    return "{tag}_myaccel.MyAccel"
"""

TRACER = """
from spawnkit.namespace import get_namespace

NS = get_namespace({tag!r})  # at module scope, as plugins do


def register():
    pass
"""


@dataclass
class Engine:
    tag: str
    prefix: str
    site: Path

    def install(self, name: str, **kwargs: object) -> None:
        write_distribution(self.site, name, "1.0", **kwargs)  # type: ignore[arg-type]
        _metadata.clear_cache()

    def cli(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """The engine (registered), its platform plugin and a general plugin, all installed."""
    tag = f"ns{uuid.uuid4().hex[:10]}"
    site = tmp_path / "site"
    eng = Engine(tag, f"OE{tag[2:].upper()}", site)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *sys.path]))
    eng.install(
        f"{tag}-engine",
        entry_points={"spawnkit.namespaces": {tag: f"{tag}_eng.namespace:NS"}},
        modules={
            f"{tag}_eng.namespace": ENGINE_NAMESPACE.format(tag=tag, prefix=eng.prefix),
            f"{tag}_eng.worker": ENGINE_WORKER.format(tag=tag),
        },
    )
    eng.install(
        f"{tag}-myaccel",
        entry_points={f"{tag}.platforms": {"myaccel": f"{tag}_myaccel:activate"}},
        modules={f"{tag}_myaccel": PLATFORM.format(tag=tag)},
    )
    eng.install(
        f"{tag}-tracer",
        entry_points={f"{tag}.plugins": {"tracer": f"{tag}_tracer:register"}},
        modules={f"{tag}_tracer": TRACER.format(tag=tag)},
    )
    for var in ("PLATFORM", "PLUGINS", "USE_CPU_ENGINE", "LENIENT_PLUGINS", "IMPORT_GUARD"):
        monkeypatch.delenv(f"{eng.prefix}_{var}", raising=False)
    yield eng
    for name in [m for m in sys.modules if m.startswith(f"{tag}_")]:
        del sys.modules[name]
    monkeypatch.undo()
    _metadata.clear_cache()


# ------------------------------------------------------------ get_namespace
def test_get_namespace_loads_the_registered_engine_namespace(engine: Engine) -> None:
    assert engine.tag not in Namespace._registry  # nothing declared it in this process yet
    ns = get_namespace(engine.tag)
    assert ns is sys.modules[f"{engine.tag}_eng.namespace"].NS
    assert ns.env_prefix == engine.prefix
    assert ns.config.platform_var == f"{engine.prefix}_PLATFORM"
    assert get_namespace(engine.tag) is ns


def test_namespace_without_a_prefix_is_the_registered_engines(engine: Engine) -> None:
    """``Namespace("eng.srt")`` in a launcher, the engine's namespace registered with
    ``env_prefix="ENG"`` and not declared yet: it derived ``ENG_SRT_*``, so ``ENG_PLUGINS``
    was never read (and the workers got the derived names), unsaid."""
    assert engine.tag not in Namespace._registry
    ns = Namespace(engine.tag)
    assert ns is sys.modules[f"{engine.tag}_eng.namespace"].NS
    assert ns.config.plugins_var == f"{engine.prefix}_PLUGINS"
    assert Namespace(engine.tag) is ns


def test_a_registered_module_declaring_its_own_name_without_a_prefix_imports(
    engine: Engine,
) -> None:
    """The engine's own module declaring ``Namespace(name)`` as it runs is the declaration
    (the registration points at it), imported plainly or loaded by name."""
    other = f"{engine.tag}own"
    engine.install(
        f"{other}-engine",
        entry_points={"spawnkit.namespaces": {other: f"{other}_eng:NS"}},
        modules={
            f"{other}_eng": f"from spawnkit.namespace import Namespace\nNS = Namespace({other!r})\n"
        },
    )
    try:
        module = importlib.import_module(f"{other}_eng")
        assert Namespace(other) is module.NS
        assert module.NS.config.plugins_var == f"{other.upper()}_PLUGINS"
    finally:
        Namespace._registry.pop(other, None)
        sys.modules.pop(f"{other}_eng", None)
    assert Namespace(other) is sys.modules[f"{other}_eng"].NS  # loaded by name this time


def test_get_namespace_at_plugin_module_scope_in_a_plain_import(engine: Engine) -> None:
    code = f"import {engine.tag}_tracer as m; print(m.NS.env_prefix, m.NS.config.plugins_var)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [engine.prefix, f"{engine.prefix}_PLUGINS"]


def test_an_unregistered_name_is_refused_never_guessed(engine: Engine) -> None:
    other = f"{engine.tag}x"
    engine.install(  # plugins for it are installed, but no engine registers the name
        f"{other}-stray",
        entry_points={f"{other}.plugins": {"stray": f"{other}_stray:register"}},
        modules={f"{other}_stray": "def register():\n    pass\n"},
    )
    with pytest.raises(NamespaceError) as info:
        get_namespace(other)
    text = str(info.value)
    assert f"unknown namespace {other!r}" in text
    assert f'[project.entry-points."spawnkit.namespaces"] {other} = "<module>:<attr>"' in text
    assert engine.tag in text  # the registered names are listed
    assert other not in Namespace._registry


def _broken(engine: Engine, case: str) -> str:
    name = f"{engine.tag}b"
    mod = f"{name}_eng"
    sources = {
        "not-a-namespace": "NS = 42\n",
        "other-name": f"from spawnkit import Namespace\nNS = Namespace({name + 'z'!r})\n",
        "import-fails": "raise ImportError('engine half installed')\n",
    }
    if case == "two-dists":
        for i in (1, 2):
            engine.install(
                f"{name}-engine{i}",
                entry_points={"spawnkit.namespaces": {name: f"{mod}{i}:NS"}},
                modules={f"{mod}{i}": f"import spawnkit\nNS = spawnkit.Namespace({name!r})\n"},
            )
    else:
        engine.install(
            f"{name}-engine",
            entry_points={"spawnkit.namespaces": {name: f"{mod}:NS"}},
            modules={mod: sources[case]},
        )
    return name


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        ("not-a-namespace", ["which is a int, not a spawnkit.Namespace", "-engine 1.0"]),
        ("other-name", ["which declares Namespace(", "Register it under"]),
        ("import-fails", ["loading it failed: ImportError: engine half installed"]),
        ("two-dists", ["registered by several distributions", "-engine1 1.0", "-engine2 1.0"]),
    ],
)
def test_a_broken_registration_names_the_distribution(
    engine: Engine, case: str, needles: list[str]
) -> None:
    name = _broken(engine, case)
    with pytest.raises(NamespaceError) as info:
        get_namespace(name)
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    assert name not in Namespace._registry


# --------------------------------------------------------------------- CLI
def test_doctor_shows_the_registered_variables_and_honours_them(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: an engine with its own prefix, its plugin excluded by an empty list."""
    monkeypatch.setenv(f"{engine.prefix}_PLUGINS", "")
    code, out, err = engine.cli("doctor", "--namespace", engine.tag, "--json", "--no-child")
    assert code == 0, out + err
    data = json.loads(out)
    assert sorted(data["environment"]["variables"]) == sorted(
        f"{engine.prefix}_{v}"
        for v in (
            "PLATFORM",
            "PLUGINS",
            "USE_CPU_ENGINE",
            "LENIENT_PLUGINS",
            "IMPORT_GUARD",
            "STRICT_ENV",
            "HOOK_CONFLICTS",
            "ALLOW_PLUGIN_DRIFT",
        )
    )
    assert data["environment"]["variables"][f"{engine.prefix}_PLUGINS"] == ""
    (tracer,) = data["plugins"]
    assert tracer["name"] == "tracer" and tracer["status"] == "not-selected", tracer
    assert data["platform"]["selection"]["name"] == "myaccel"


def test_doctor_refuses_an_unregistered_namespace_with_the_registration_form(
    engine: Engine,
) -> None:
    other = f"{engine.tag}x"
    engine.install(
        f"{other}-stray",
        entry_points={f"{other}.plugins": {"stray": f"{other}_stray:register"}},
        modules={f"{other}_stray": "def register():\n    pass\n"},
    )
    code, out, err = engine.cli("doctor", "--namespace", other, "--no-child")
    assert code == 2 and out == "", out
    (line,) = err.strip().splitlines()
    assert f"unknown namespace {other!r}" in line
    assert f"{other}-stray" in line and "will not guess" in line
    assert f'[project.entry-points."spawnkit.namespaces"] {other} = "<module>:<attr>"' in line
    assert "Fix:" in line


def test_launch_runs_workers_of_the_registered_namespace(engine: Engine, tmp_path: Path) -> None:
    result = tmp_path / "launch.json"
    code, out, err = engine.cli(
        "launch",
        f"{engine.tag}_eng.worker:describe",
        "--namespace",
        engine.tag,
        "--timeout",
        str(TIMEOUT),
        "--json",
        str(result),
    )
    assert code == 0, out + err
    assert json.loads(result.read_text())["results"] == [repr(f"{engine.prefix}:myaccel")]


def test_launch_refuses_an_unregistered_namespace_before_spawning(engine: Engine) -> None:
    code, out, err = engine.cli(
        "launch", f"{engine.tag}_eng.worker:describe", "--namespace", f"{engine.tag}x"
    )
    assert code == 2 and "stage" not in out
    assert f"unknown namespace '{engine.tag}x'" in err and "spawnkit.namespaces" in err


# ------------------------------------------------ module-level API in a worker
def test_module_level_platform_api_follows_the_worker_namespace(engine: Engine) -> None:
    """``spawnkit.platforms.current_platform`` in a worker of ``<tag>`` is ``myaccel``, not base."""
    ns = importlib.import_module(f"{engine.tag}_eng.namespace").NS
    with spawn_with_plugins(
        f"{engine.tag}_eng.worker:platforms",
        nprocs=2,
        namespace=ns,
        ready_timeout=TIMEOUT,
        join_timeout=TIMEOUT,
    ) as group:
        results = group.results(timeout=TIMEOUT)
    for rank, got in enumerate(results):
        assert got == {
            "module_level": "myaccel",
            "initialize": "myaccel",
            "same_object": True,
            "explained_for": engine.tag,
            "get_namespace_none": engine.tag,
            "default_still_default": "spawnkit",
            "rank": rank,
        }
    assert get_namespace() is default_namespace()  # the parent is no worker of any namespace

