"""Shared helpers for the platform tests: a fresh namespace and real distributions on sys.path.

Each test gets a namespace with a unique name (so xdist workers and tests
never share groups, variables or state) and a private site directory in
``tmp_path`` where ``write_distribution`` puts real ``*.dist-info`` folders.
Module names carry the namespace's tag, so a module imported by one test
cannot be found in ``sys.modules`` by another.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from spawnkit import _metadata
from spawnkit.namespace import Namespace
from spawnkit.testing import write_distribution

PLATFORM_CLASS = """
from spawnkit.platforms.interface import Platform, PlatformEnum

class {cls}({base}):
    _enum = PlatformEnum.{enum}
    device_name = {device!r}
    device_type = {device!r}
"""


def node_accelerator(module: str) -> str:
    """A platform plugin module ``module`` whose hardware is present only where ``FAKEACC=1``:
    one machine's processes stand for nodes with and without an accelerator (the Ray and
    torchrun node tests)."""
    return f"""
import os
from spawnkit.platforms.interface import Platform, PlatformEnum

class FakeAcc(Platform):
    _enum = PlatformEnum.OOT
    device_name = "fakeacc"
    device_type = "cpu"

def activate():  # the hardware: present where FAKEACC=1
    return "{module}.FakeAcc" if os.environ.get("FAKEACC") == "1" else None
"""


class PluginSite:
    """A namespace plus a site directory of real distributions for it."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **ns_settings: Any):
        self.tag = f"t{uuid.uuid4().hex[:10]}"
        self.ns = Namespace(self.tag, env_prefix=self.tag.upper(), **ns_settings)
        self.root = tmp_path / "site"
        self.root.mkdir()
        self.monkeypatch = monkeypatch
        monkeypatch.syspath_prepend(str(self.root))
        for var in (self.var, self.cpu_var):
            monkeypatch.delenv(var, raising=False)
        _metadata.clear_cache()

    @property
    def group(self) -> str:
        return self.ns.config.platform_group

    @property
    def var(self) -> str:
        return self.ns.config.platform_var

    @property
    def cpu_var(self) -> str:
        return self.ns.config.cpu_engine_var

    @property
    def pm(self) -> Any:
        return self.ns.platforms

    def mod(self, short: str) -> str:
        return f"{self.tag}_{short}"

    def add(
        self,
        dist: str,
        entry_points: dict[str, str],
        modules: dict[str, str],
        version: str = "1.0",
        group: str | None = None,
    ) -> None:
        """Write one distribution; module and entry-point names are used as given."""
        write_distribution(
            self.root,
            dist,
            version,
            entry_points={group or self.group: entry_points},
            modules={k: textwrap.dedent(v) for k, v in modules.items()},
        )
        _metadata.clear_cache()

    def add_platform(
        self,
        name: str,
        *,
        activate: str | None = None,
        dist: str | None = None,
        version: str = "1.0",
        cls_body: str | None = None,
        enum: str = "OOT",
        base: str = "Platform",
        extra: str = "",
    ) -> str:
        """A plugin ``name`` whose ``activate()`` body is ``activate`` (default: return the class).

        Returns the plugin's package name.  The platform class is ``<pkg>.platform.Plat``.
        """
        pkg = self.mod(name.replace("-", "_"))
        qual = f"{pkg}.platform.Plat"
        body = activate if activate is not None else f"return {qual!r}"
        init = f"{extra}\ndef activate():\n" + textwrap.indent(textwrap.dedent(body), "    ")
        platform_src = cls_body or PLATFORM_CLASS.format(
            cls="Plat", base=base, enum=enum, device=name.replace("-", "_")
        )
        self.add(
            dist or f"{pkg.replace('_', '-')}-dist",
            {name: f"{pkg}:activate"},
            {f"{pkg}.__init__": init, f"{pkg}.platform": platform_src},
            version=version,
        )
        return pkg

    def imported(self, pkg: str) -> bool:
        return pkg in sys.modules

    def cleanup(self) -> None:
        root = str(self.root)
        for name, module in list(sys.modules.items()):
            if (getattr(module, "__file__", None) or "").startswith(root):
                del sys.modules[name]
        self.pm.reset_for_tests()
        self.ns.hooks.reset()  # what a platform package registered: no later test's
        _metadata.clear_cache()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    s = PluginSite(tmp_path, monkeypatch)
    yield s
    s.cleanup()
