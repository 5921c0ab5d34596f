"""A worker running another spawnkit than its launcher, whose records are laid out otherwise.

A spec's records pickle as their values in field order, so a worker whose ``sys.path`` finds
another copy of spawnkit (a stale install on a node, an older checkout first on
``PYTHONPATH``) failed unpickling it with a bare ``ValueError: zip() argument 2 is longer than
argument 1`` (stage ``process_start``, or ``read_spec`` under torchrun), naming neither copy.
The second copy here is real: the source under test, copied, with one more ``LaunchControl``
field and another ``__version__``, found first on the worker's ``sys.path``.
"""

from __future__ import annotations

import ast
import copyreg
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spawnkit
from spawnkit.errors import ChildRaisedError, SpecError
from spawnkit.spec import ProcessSpec
from spawnkit.spec._control import LaunchControl
from spawnkit.testing import write_distribution

_HERE = Path(spawnkit.__file__).parent  # the source under test
_OTHER_VERSION = "9.9.9.dev0"
_FIELDS = len(LaunchControl._fields)  # type: ignore[attr-defined]
_TIMEOUT_S = 120


def _other_copy(root: Path) -> Path:
    """The source under test copied to ``root/spawnkit``, ``LaunchControl`` with one more field
    and ``__version__`` another: a spawnkit of another version.  Returns ``root``."""
    copy = root / "spawnkit"
    shutil.copytree(_HERE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    control = copy / "spec" / "_control.py"
    lines = control.read_text().splitlines(keepends=True)
    cls = next(
        n for n in ast.parse("".join(lines)).body
        if isinstance(n, ast.ClassDef) and n.name == "LaunchControl"
    )  # fmt: skip
    last = [n for n in cls.body if isinstance(n, ast.AnnAssign)][-1]
    lines.insert(last.end_lineno or last.lineno, '    zz_newer: str = ""\n')
    control.write_text("".join(lines))
    init = copy / "__init__.py"
    version = f'__version__ = "{_OTHER_VERSION}"'
    text, n = re.subn(r'__version__ = "[^"]*"', version, init.read_text())
    assert n == 1
    init.write_text(text)
    return root


def _app(root: Path) -> Path:
    entry = "def main(p=None):\n    return 1\n"
    write_distribution(root, "skew-app", "1.0", modules={"skew_app": entry})
    return root


def test_a_spawned_worker_finding_another_spawnkit_first_names_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``ChildRaisedError`` in stage ``process_start`` whose child exception was
    ``ValueError: zip() argument 2 is shorter than argument 1``."""
    other = _other_copy(tmp_path / "other")
    site = _app(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    path = os.pathsep.join([str(other), str(site)])
    with pytest.raises(ChildRaisedError) as caught:  # noqa: SIM117 - the start may raise it
        with spawnkit.spawn_with_plugins("skew_app:main", nprocs=1, env={"PYTHONPATH": path}) as g:
            g.results(timeout=_TIMEOUT_S)
    err = caught.value
    assert err.stage == "process_start", str(err)
    cause = err.child_exception
    assert isinstance(cause, SpecError) and cause.kind == "version", str(err)
    text = str(cause)
    assert f"runs spawnkit {_OTHER_VERSION} ({other / 'spawnkit'})" in text, text
    assert f"built by spawnkit {spawnkit.__version__} ({_HERE})" in text, text
    assert f"a LaunchControl there has {_FIELDS} fields, here {_FIELDS + 1}" in text, text
    assert f"install spawnkit {spawnkit.__version__}, as the launcher has" in text, text
    assert "SpecError[version]" in str(err)


def test_a_torchrun_rank_reading_a_spec_of_another_spawnkit_names_both(tmp_path: Path) -> None:
    """The spec written by the other copy (the launcher's node), read by a rank running the
    source under test (a node with a stale install).  Before: the error file said
    ``ValueError: zip() argument 2 is longer than argument 1``."""
    from spawnkit.spec.signing import generate_key

    other = _other_copy(tmp_path / "other")
    site = _app(tmp_path / "site")
    key = generate_key()
    spec_file = tmp_path / "spec.bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(SPAWNKIT_SPEC_KEY=key, TORCHELASTIC_ERROR_FILE=str(tmp_path / "err.json"))
    write = (
        "import sys, spawnkit; from spawnkit import write_launch_spec; "
        "write_launch_spec(sys.argv[1], 'skew_app:main'); print(spawnkit.__file__)"
    )
    written = subprocess.run(
        [sys.executable, "-c", write, str(spec_file)],
        env=dict(env, PYTHONPATH=os.pathsep.join([str(other), str(site)])),
        capture_output=True, text=True, timeout=_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == str(other / "spawnkit" / "__init__.py")
    rank = subprocess.run(
        [sys.executable, "-m", "spawnkit.run", "--spec", str(spec_file)],
        env=dict(env, PYTHONPATH=os.pathsep.join([str(_HERE.parent), str(site)])),
        capture_output=True, text=True, timeout=_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert rank.returncode == 1, rank.stdout + rank.stderr
    doc = json.loads((tmp_path / "err.json").read_text())
    assert doc["message"]["extraInfo"]["spawnkit_stage"] == "read_spec"
    text = doc["message"]["message"]
    assert text.startswith("spawnkit.errors.SpecError[version]"), text
    assert f"runs spawnkit {spawnkit.__version__} ({_HERE})" in text, text
    assert f"built by spawnkit {_OTHER_VERSION} ({other / 'spawnkit'})" in text, text
    assert f"a LaunchControl there has {_FIELDS + 1} fields, here {_FIELDS}" in text, text


class _OlderWriter(pickle.Pickler):
    """Pickles as a spawnkit before this check did (no version ahead of the records), with a
    ``LaunchControl`` of one more field."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in (ProcessSpec, LaunchControl):
            state = [getattr(obj, n) for n in type(obj)._fields]  # type: ignore[attr-defined]
            extra = [""] if type(obj) is LaunchControl else []
            return copyreg.__newobj__, (type(obj),), state + extra  # type: ignore[attr-defined]
        return NotImplemented


def test_a_spec_of_a_spawnkit_that_does_not_say_its_version_is_refused_as_such() -> None:
    import io

    import spawnkit.spec._record as _record

    buf = io.BytesIO()
    _OlderWriter(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(ProcessSpec(entry="skew_app:main"))
    with pytest.raises(SpecError) as caught:
        pickle.loads(buf.getvalue())
    assert caught.value.kind == "version"
    assert "one that does not record its version" in str(caught.value)
    assert "install the launcher's spawnkit" in str(caught.value)
    assert _record._built_by is None
    # and a spec of this spawnkit reads back whole, leaving nothing noted behind
    spec = ProcessSpec(entry="skew_app:main", _control=LaunchControl(detected_platform="cpu"))
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert _record._built_by is None
