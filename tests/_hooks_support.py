"""Shared fixtures for the hook engine tests: real target modules written to ``tmp_path``.

Hooks are tested against real modules on ``sys.path`` (not objects built in the
test), so that resolution, ``from X import Y`` bindings and propagation take the
same path as in production.  Each test gets a uniquely named package, and every
module it created leaves ``sys.modules`` (and its directory leaves ``sys.path``)
afterwards.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from spawnkit.hooks import HookRegistry

#: A device probe engine modules call as they are imported (``_is_hip = is_hip()``): the
#: original answers False; the hooks under test make it answer True.
IS_HIP = """
def is_hip():
    return False
"""


class Modules:
    """Writes modules of one unique package and imports them on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pkg = f"hkt_{uuid.uuid4().hex[:10]}"
        (root / self.pkg).mkdir()
        (root / self.pkg / "__init__.py").write_text("")

    def name(self, short: str) -> str:
        return f"{self.pkg}.{short}"

    def write(self, short: str, source: str) -> str:
        """Write ``<pkg>/<short>.py`` (dots make subpackages); returns the dotted name."""
        parts = short.split(".")
        directory = self.root / self.pkg
        for part in parts[:-1]:
            directory = directory / part
            directory.mkdir(exist_ok=True)
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text("")
        text = textwrap.dedent(source).replace("PKG", self.pkg)
        (directory / f"{parts[-1]}.py").write_text(text)
        importlib.invalidate_caches()
        return self.name(short)

    def load(self, short: str, source: str | None = None) -> ModuleType:
        if source is not None:
            self.write(short, source)
        return importlib.import_module(self.name(short))

    def cleanup(self) -> None:
        for name in [n for n in sys.modules if n == self.pkg or n.startswith(self.pkg + ".")]:
            del sys.modules[name]


@pytest.fixture
def mods(tmp_path: Path) -> Iterator[Modules]:
    entry = str(tmp_path)
    sys.path.insert(0, entry)
    m = Modules(tmp_path)
    try:
        yield m
    finally:
        m.cleanup()
        if entry in sys.path:
            sys.path.remove(entry)


@pytest.fixture
def registry() -> Iterator[type[HookRegistry]]:
    """The class-level API, on a clean default registry restored afterwards."""
    with HookRegistry.isolated():
        yield HookRegistry
