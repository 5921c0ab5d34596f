"""``write_distribution`` of a new version into one root is pip's upgrade: the earlier
version's recorded files go with its ``.dist-info``.  It used to keep them (``RECORD`` was
written empty), so a submodule the new version dropped stayed importable, and the old package
shadowed a new single-file module of the same name."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from pathlib import Path

from spawnkit.testing import write_distribution

V1 = {"upg_plug/__init__.py": "VERSION = 1\n", "upg_plug/legacy_kernels.py": "FAST = True\n"}
V2 = {"upg_plug/__init__.py": "VERSION = 2\n"}
V2_FLAT = {"upg_plug": "VERSION = 2\n"}
PROBE = (
    "import importlib.util, upg_plug\n"
    "print(upg_plug.VERSION, importlib.util.find_spec('upg_plug.legacy_kernels') is not None "
    "if hasattr(upg_plug, '__path__') else 'module')\n"
)


def _probe(root: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_submodule_the_new_version_dropped_is_gone(tmp_path: Path) -> None:
    write_distribution(tmp_path, "upg-plug", "1.0", modules=V1)
    write_distribution(tmp_path, "upg-plug", "2.0", modules=V2)
    assert not (tmp_path / "upg_plug" / "legacy_kernels.py").exists()
    assert _probe(tmp_path) == "2 False"


def test_a_package_turned_into_a_module_no_longer_shadows_it(tmp_path: Path) -> None:
    write_distribution(tmp_path, "upg-plug", "1.0", modules=V1)
    write_distribution(tmp_path, "upg-plug", "2.0", modules=V2_FLAT)
    assert not (tmp_path / "upg_plug").exists()  # emptied, then removed, as pip does
    assert _probe(tmp_path) == "2 module"


def test_the_record_lists_every_file_written_as_pip_does(tmp_path: Path) -> None:
    dist = write_distribution(tmp_path, "rec-plug", "1.0", modules={"rec_pkg.sub.mod": "X = 1\n"})
    rows = (dist.dist_info / "RECORD").read_text(encoding="utf-8").splitlines()
    listed = {row.split(",")[0]: row for row in rows}
    for name in ("rec_pkg/sub/mod.py", "rec_pkg/__init__.py", "rec_pkg/sub/__init__.py"):
        assert name in listed, rows
    data = (tmp_path / "rec_pkg/sub/mod.py").read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert listed["rec_pkg/sub/mod.py"] == f"rec_pkg/sub/mod.py,sha256={digest},{len(data)}"
    assert listed[f"{dist.dist_info.name}/RECORD"] == f"{dist.dist_info.name}/RECORD,,"


def test_files_the_earlier_version_did_not_record_stay(tmp_path: Path) -> None:
    write_distribution(tmp_path, "upg-plug", "1.0", modules=V1)
    write_distribution(tmp_path, "other-plug", modules={"upg_plug/extra.py": "Y = 1\n"})
    (tmp_path / "notes.txt").write_text("mine\n")
    write_distribution(tmp_path, "upg-plug", "2.0", modules=V2_FLAT)
    assert (tmp_path / "upg_plug" / "extra.py").read_text() == "Y = 1\n"  # another dist's
    assert (tmp_path / "notes.txt").exists()
    assert (tmp_path / "other_plug-0.1.0.dist-info").is_dir()
