"""The raw-fork floor of ``spawnkit bench``: a fresh interpreter that holds only the worker."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import psutil
import pytest

from spawnkit.bench._raw_fork import RawForker


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_each_child_reports_once_and_nothing_outlives_close(site: Path) -> None:
    # The module records what the forking interpreter had imported once it was loaded: the
    # floor must not carry spawnkit (or the benchmark's torch and Ray) into its forks.
    (site / "rf_worker.py").write_text(
        "import sys\nopen(__file__ + '.mods', 'w').write('\\n'.join(sys.modules))\n"
    )
    forker = RawForker("rf_worker", timeout=60)
    server = psutil.Process(forker._proc.pid)
    with contextlib.closing(forker):
        begun = time.monotonic()
        first, second = forker.fork(3), forker.fork(1)
        took = time.monotonic() - begun
        assert len(first) == 3 and len(second) == 1
        assert all(0 < t <= took for t in first + second)
        deadline = time.monotonic() + 10
        while server.children() and time.monotonic() < deadline:  # reaped after it wrote
            time.sleep(0.01)
        assert server.children() == []  # every child was reaped
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    held = (site / "rf_worker.py.mods").read_text().split()
    assert not [m for m in held if m.split(".")[0] in ("spawnkit", "torch", "ray")]


def test_a_worker_that_fails_to_import_or_hangs_is_named(site: Path) -> None:
    (site / "rf_broken.py").write_text("raise ImportError('no such device library')\n")
    with pytest.raises(RuntimeError, match=r"(?s)holding rf_broken.*no such device library"):
        RawForker("rf_broken", timeout=60)
    (site / "rf_slow.py").write_text("import time\ntime.sleep(60)\n")
    begun = time.monotonic()
    with pytest.raises(TimeoutError, match=r"holding rf_slow: no answer within 0\.5 s"):
        RawForker("rf_slow", timeout=0.5)
    assert time.monotonic() - begun < 5  # killed, not waited on for its 60 s


class _Touch:
    """Unpickles as a call of ``rf_spec.touch(path)``: proof that a child unpickled its spec."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import rf_spec

        return rf_spec.touch, (self.path,)


def test_the_spec_floor_unpickles_the_spec_in_every_child(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    (site / "rf_spec.py").write_text(
        "import sys\n"
        "def touch(path):\n"
        "    open(path, 'a').write('x')\n"
        "    open(path + '.mods', 'w').write('\\n'.join(sys.modules))\n"
    )
    monkeypatch.syspath_prepend(str(site))
    marks = site / "unpickled"
    with contextlib.closing(RawForker("rf_spec", 60, spec=pickle.dumps(_Touch(str(marks))))) as f:
        assert len(f.fork(2)) == 2 and len(f.fork(1)) == 1
    assert marks.read_text() == "xxx"  # one unpickling per child, before its stamp
    held = (site / "unpickled.mods").read_text().split()
    assert "spawnkit.spec" in held  # what the spec's classes need, imported before the forks
    assert not [m for m in held if m.split(".")[0] in ("torch", "ray")]
