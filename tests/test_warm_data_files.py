"""A package data file read through ``pkgutil.get_data`` as a warm server bootstraps, edited
between two launches, is read again by the next warm launch, as a spawned worker reads it.

``pkgutil.get_data`` reads through the package loader's ``get_data`` (``io.open_code``), which
the server's ``open`` stand-in never saw: before, the edited table reached every spawned worker
and no warm one, unsaid.  ``importlib.resources.files(...).read_text()`` (``open``) was seen
already; both are checked.  Real launcher processes, real files.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from importlib._bootstrap_external import FileLoader
from pathlib import Path

import pytest

from spawnkit.protocol import _sources

_PACKAGE = """
import pkgutil, importlib.resources
TABLE = pkgutil.get_data(__name__, "table.txt").decode()
CFG = importlib.resources.files(__name__).joinpath("cfg.txt").read_text()

def main(payload=None):
    import os, datapkg
    return [datapkg.TABLE, datapkg.CFG, os.getppid()]
"""

_LAUNCHER = """
import json, pathlib, sys
sys.path.insert(0, sys.argv[1])
PKG = pathlib.Path(sys.argv[1], "datapkg")
from spawnkit import spawn_with_plugins

def launch(method):
    warm = dict(start_method="forkserver", preload=("datapkg",))
    kw = warm if method == "warm" else {}
    with spawn_with_plugins("datapkg:main", nprocs=1, ready_timeout=120, **kw) as group:
        return group.results(timeout=120)[0]

if __name__ == "__main__":
    out = {"first": launch("warm"), "again": launch("warm")}
    (PKG / "table.txt").write_text("table v2, edited")
    out["table"], out["table_spawned"] = launch("warm"), launch("spawn")
    (PKG / "cfg.txt").write_text("cfg v2, edited")
    out["cfg"] = launch("warm")
    print("OUT", json.dumps(out))
"""


def test_a_data_file_read_through_pkgutil_get_data_is_read_again_once_edited(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "site" / "datapkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(_PACKAGE)
    (pkg / "table.txt").write_text("table v1")
    (pkg / "cfg.txt").write_text("cfg v1")
    (tmp_path / "launcher.py").write_text(_LAUNCHER)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "launcher.py"), str(pkg.parent)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    *first, server = out["first"]
    assert first == ["table v1", "cfg v1"]
    assert out["again"][2] == server, "unchanged data files must keep the warm server"
    # Before the fix: 'table v1' from the first server, while the spawned worker read v2.
    assert out["table"][:2] == out["table_spawned"][:2] == ["table v2, edited", "cfg v1"]
    assert out["table"][2] != server
    assert out["cfg"][:2] == ["table v2, edited", "cfg v2, edited"]


def test_reads_notes_get_data_files_not_the_code_imported_and_puts_get_data_back(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "gd_notes_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("X = 1\n")
    (pkg / "data.bin").write_bytes(b"data")
    real = FileLoader.get_data
    sys.path.insert(0, str(tmp_path))
    try:
        with _sources.Reads() as reads:
            importlib.import_module("gd_notes_pkg.mod")  # source (and bytecode) read as code
            assert pkgutil.get_data("gd_notes_pkg", "data.bin") == b"data"
            with pytest.raises(FileNotFoundError):  # an optional table: its coming is a change
                pkgutil.get_data("gd_notes_pkg", "absent.bin")
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("gd_notes_pkg.mod", "gd_notes_pkg"):
            sys.modules.pop(name, None)
    assert FileLoader.get_data is real
    noted = {p for p in reads.paths if p.startswith(str(tmp_path))}
    assert noted == {str(pkg / "data.bin"), str(pkg / "absent.bin")}, noted
