"""The two walks of docs/architecture.md, measured in a real spawned worker.

``server_args`` from ``spawn_with_plugins()`` to the entry call, and a child's
failure back to the parent's exception: ``sys.setprofile`` in the parent and
(from its first statement, through ``sitecustomize``) in the child records
every spawnkit source file whose frames hold the walked data; ``spec/`` and
``_namedtuple.py`` hold the types it travels in (a record's ``__init__``, a
tuple's ``__getnewargs__`` when it is pickled) and are not steps of the walk.  The docs promise at
most four files each; these tests hold them to it.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from spawnkit import spawn_with_plugins
from spawnkit.errors import ChildRaisedError

_TRACER = Path(__file__).parent / "_walk_tracer"
_ENTRY = """
import walk_tracer

def reached(args):
    walk_tracer.end()  # the entry call: the walk ends here

def raises(args):
    raise RuntimeError(args["token"][::-1])  # a token the payload does not carry
"""
_LIMIT = 4
_DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def _documented(walk: str) -> list[str]:
    """The files docs/architecture.md says the walk crosses (its ``<!-- walk NAME: ... -->``)."""
    match = re.search(rf"<!-- walk {walk}: (.*?) -->", _DOC.read_text())
    assert match, f"docs/architecture.md has no measured list for walk {walk!r}"
    return sorted(match.group(1).split())


#: The types the walked data travels in: plumbing every walk passes, not one of its steps.
_TYPES = ("spec/", "_namedtuple.py")


def _walked(found: list[str]) -> list[str]:
    import walk_tracer

    return [f for f in walk_tracer.relative(found) if not f.startswith(_TYPES)]


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str) -> tuple[list[str], str]:
    sys.path.insert(0, str(_TRACER))
    monkeypatch.syspath_prepend(str(tmp_path))
    import walk_tracer

    mod = f"walk_entry_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text(_ENTRY)
    token, out = f"walk-{uuid.uuid4().hex}", tmp_path / "child.txt"
    watch = token[::-1] if entry == "raises" else token
    path = os.pathsep.join([str(_TRACER), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    (tmp_path / "token.txt").write_text(watch)
    monkeypatch.setenv("WALKTEST_TOKEN_FILE", str(tmp_path / "token.txt"))
    monkeypatch.setenv("WALKTEST_OUT", str(out))
    error = ""
    walk_tracer.begin(watch)
    try:
        with spawn_with_plugins(f"{mod}:{entry}", {"token": token}, ready_timeout=120) as group:
            group.results(timeout=120)
    except ChildRaisedError as exc:
        error = str(exc)
    finally:
        parent = walk_tracer.end()
        sys.path.remove(str(_TRACER))
    child = out.read_text().split() if out.exists() else []
    return sorted(set(_walked(parent)) | set(_walked(child))), error


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Both walks, measured once for this module's tests."""
    found: dict[str, list[str]] = {}
    for walk, entry in (("server_args", "reached"), ("failure", "raises")):
        with pytest.MonkeyPatch.context() as monkeypatch:
            files, error = _run(tmp_path_factory.mktemp(walk), monkeypatch, entry)
        assert ("RuntimeError" in error) == (walk == "failure"), error
        found[walk] = files
    return found


@pytest.mark.parametrize("walk", ["server_args", "failure"])
def test_the_docs_name_the_files_each_walk_crosses(walks: dict[str, list[str]], walk: str) -> None:
    arrive = {"server_args": "bootstrap/process.py", "failure": "protocol/failure.py"}[walk]
    assert arrive in walks[walk]  # the tracer saw the walk arrive
    assert walks[walk] == _documented(walk)


@pytest.mark.parametrize("walk", ["server_args", "failure"])
def test_each_walk_crosses_at_most_four_files(walks: dict[str, list[str]], walk: str) -> None:
    assert len(walks[walk]) <= _LIMIT, " ".join(walks[walk])
