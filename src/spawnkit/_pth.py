"""A module missing because a ``.pth`` path entry never reached this process's ``sys.path``.

An editable install (``pip install -e`` of a src-layout project, hatchling's or setuptools'
compat mode) writes the distribution's metadata into site-packages and a ``.pth`` file naming
the source directory.  The interpreter reads ``.pth`` files only as it starts, so a launcher
that was running at the install sees the distribution (its entry points: the plugin is
selected) but never gets the directory on its ``sys.path``; a spawned worker or warm server
reads the new ``.pth`` as it starts, then multiprocessing replaces its ``sys.path`` with the
launcher's.  The plugin then fails to import with "No module named ...", and the usual advice
(fix or upgrade the plugin) sends its user to code that is fine.  Only on that failure path:
nothing here runs in a worker that loads its plugins.
"""

from __future__ import annotations

import os
import site
import sys
from importlib.machinery import PathFinder

__all__ = ["unread_entry"]


def unread_entry(module: str) -> tuple[str, str] | None:
    """``(pth_file, entry)``: a path entry that a ``.pth`` file of this interpreter's site
    directories names, that is not on ``sys.path`` and holds top-level ``module``; else None."""
    if not module or "." in module:
        return None
    on_path = {os.path.normcase(os.path.abspath(p or os.curdir)) for p in sys.path}
    for sitedir in _site_dirs():
        for pth, entry in _pth_entries(sitedir):
            if os.path.normcase(entry) in on_path or not os.path.isdir(entry):
                continue
            try:
                found = PathFinder.find_spec(module, [entry])
            except (ImportError, OSError, ValueError):
                continue
            if found is not None:
                return pth, entry
    return None


def _site_dirs() -> list[str]:
    """The directories whose ``.pth`` files an interpreter of this environment reads at start."""
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _pth_entries(sitedir: str) -> list[tuple[str, str]]:
    """Each ``.pth`` file's path lines as ``site.addpackage`` reads them (``import`` lines run
    code, which is not a path: left out), in the order ``site`` reads the files."""
    try:
        names = sorted(n for n in os.listdir(sitedir) if n.endswith(".pth") and n[0] != ".")
    except OSError:
        return []
    found = []
    for name in names:
        pth = os.path.join(sitedir, name)
        try:
            with open(pth, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.rstrip()
            if not line or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            found.append((pth, os.path.abspath(os.path.join(sitedir, line))))
    return found
