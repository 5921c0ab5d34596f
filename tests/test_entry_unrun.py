"""An entry whose call runs none of its body: an ``async def``, a generator function.

Before: ``spawn_with_plugins("srv:serve")`` with ``async def serve()`` called it, got a
coroutine, and reported "finished its entry function, but its coroutine return value could
not be pickled": the server never served, and the message said it had finished.  A worker
now refuses such an entry before calling it (the parent already, when it holds the object),
and an entry that returns a coroutine or a generator is told apart from an unpicklable
result.  Real spawned and warm workers.
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path

import pytest

from spawnkit import spawn_with_plugins
from spawnkit.errors import ChildRaisedError, EntryResolutionError

APP = """
import asyncio

ran = []

async def serve(*args):
    ran.append("serve")
    return 1

def stream(*args):
    yield 1

async def astream(*args):
    yield 1

def wrapper(*args):
    return serve(*args)

class Server:
    async def __call__(self, *args):
        return 1

SERVER = Server()
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"entry_unrun_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _run(entry: object, method: str = "spawn") -> list[object]:
    with spawn_with_plugins(
        entry, nprocs=1, start_method=method, ready_timeout=120, join_timeout=120
    ) as group:
        return group.results(timeout=120)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize(
    ("name", "kind", "fix"),
    [
        ("serve", "an `async def` function", "asyncio.run(serve(*args))"),
        ("stream", "a generator function", "list(stream(*args))"),
        ("astream", "a generator function", "list(astream(*args))"),
        ("SERVER", "an `async def` function", "asyncio.run(__call__(*args))"),
    ],
)
def test_a_worker_refuses_an_entry_whose_call_runs_none_of_its_body(
    app: str, method: str, name: str, kind: str, fix: str
) -> None:
    with pytest.raises(ChildRaisedError) as info:
        _run(f"{app}:{name}", method)
    err = info.value
    assert err.stage == "resolve_entry"
    assert isinstance(err.child_exception, EntryResolutionError)
    assert f"entry '{app}:{name}' is {kind}: calling it runs none of its body" in str(err)
    assert fix in str(err)


def test_the_parent_refuses_such_an_entry_it_holds_before_any_worker_starts(app: str) -> None:
    module = importlib.import_module(app)
    try:
        for entry in (module.serve, functools.partial(module.stream, 1), module.SERVER):
            with pytest.raises(EntryResolutionError) as info:
                _run(entry)
            assert info.value.stage == "resolve_entry"
            assert "calling it runs none of its body" in str(info.value)
            assert info.value.rank is None  # no rank: refused in the parent
    finally:
        del sys.modules[app]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_entry_that_returns_a_coroutine_is_not_called_finished(
    app: str, method: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A sync wrapper of an ``async def`` passes the check before the call; what it returns
    says what happened, and no 'never awaited' warning follows it."""
    with pytest.raises(ChildRaisedError) as info:
        _run(f"{app}:wrapper", method)
    text = str(info.value)
    assert "it returned the coroutine serve() that nothing awaited" in text
    assert "could not be pickled" not in text
    assert "never awaited" not in capfd.readouterr().err  # the ranks' relayed stderr
