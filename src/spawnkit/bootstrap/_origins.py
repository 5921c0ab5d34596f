"""Where a hook target came from when the import guard never saw it imported.

Either interpreter start-up (a ``.pth`` ``import`` line, ``sitecustomize``) or a direct
``sys.modules[name] = module`` (no ``__spec__`` of its own name); the fixes differ.  Read from
files on the failure path only; standard library only, imported lazily by ``guard``.
"""

from __future__ import annotations

import os
import re
import sys

from spawnkit._namedtuple import NamedTuple

__all__: list[str] = []

#: How ``site`` tells a ``.pth`` line that runs code from one that adds a path.
_PTH_CODE = ("import ", "import\t")


class Line(NamedTuple):
    """One line of a file: where it is and what it says."""

    filename: str
    lineno: int
    text: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


def _site_dirs() -> list[str]:
    """Directories whose ``.pth`` files ``site`` processes (and ``sys.path`` for good measure)."""
    import site

    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # an embedded or old ``site`` without it
        pass
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if p]
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs if os.path.isdir(d)))


def pth_code() -> list[Line]:
    """Every ``import`` line of every ``.pth`` file ``site`` would run at interpreter start."""
    found: list[Line] = []
    for directory in _site_dirs():
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            found += [
                Line(path, i, text.rstrip())
                for i, text in enumerate(lines, 1)
                if text.startswith(_PTH_CODE)
            ]
    return found


def _mentions(text: str, module: str) -> bool:
    names = {module, module.partition(".")[0]}
    return any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", text) for n in names)


def startup_line(module: str) -> Line | None:
    """The ``.pth`` line that most likely imported ``module`` at start-up (it names it)."""
    return next((line for line in pth_code() if _mentions(line.text, module)), None)


def placed_directly(module: str) -> bool:
    """Whether ``sys.modules[module]`` was put there without the import system."""
    obj = sys.modules.get(module)
    return getattr(getattr(obj, "__spec__", None), "name", None) != module


def placement_line(module: str, files: list[str]) -> Line | None:
    """The line in ``files`` (or in a ``.pth`` file) that assigns ``sys.modules[module]``."""
    pattern = re.compile(rf"""sys\.modules\s*\[\s*(['"]){re.escape(module)}\1\s*\]\s*=(?!=)""")
    for line in pth_code():
        if pattern.search(line.text):
            return line
    return _first_line(pattern, files)


def loading_line(module: str, files: list[str]) -> Line | None:
    """The line in ``files`` that loads ``module`` from a source file past the import system:
    ``spec_from_file_location("module", path)`` (vLLM's ``import_from_path``), else its
    ``sys.modules["module"] = ...``."""
    pattern = re.compile(rf"""spec_from_file_location\(\s*(['"]){re.escape(module)}\1""")
    return _first_line(pattern, files) or placement_line(module, files)


def _first_line(pattern: re.Pattern[str], files: list[str]) -> Line | None:
    """The first line of ``files`` (in their order) that ``pattern`` matches."""
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for i, text in enumerate(lines, 1):
            if pattern.search(text):
                return Line(path, i, text.strip())
    return None
