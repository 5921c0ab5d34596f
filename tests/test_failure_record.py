"""The one failure record (protocol/failure.py) that local, Ray and torchrun workers send."""

from __future__ import annotations

import builtins
import errno
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spawnkit._compat import add_note
from spawnkit.errors import ChildRaisedError
from spawnkit.protocol import failure


class _BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself is broken")


class _NoRoundTrip(Exception):
    """Pickles, but its own ``__reduce__`` cannot rebuild it (a required argument is lost)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"needs {a} and {b}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class _CodeError(Exception):
    """Builds its message from its argument: the default pickle calls it with the message."""

    def __init__(self, code: int) -> None:
        super().__init__(f"failed with code {code}")
        self.code = code


class _MissingFile(FileNotFoundError):
    def __init__(self, path: str) -> None:
        super().__init__(errno.ENOENT, "no checkpoint", path)


class _OwnReduce(Exception):
    """Pickles itself faithfully: its own ``__reduce__`` is what travels."""

    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:
        return (_OwnReduce, (self.code,))


class _LyingReduce(Exception):
    """Its own ``__reduce__`` loads as another message: respected, so nothing is sent."""

    def __init__(self, code: object) -> None:
        super().__init__(f"code {code}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_LyingReduce, self.args)


class _StateReduce(Exception):
    """As pydantic's ``ValidationError``: made with no ``args`` (from its parts, not through
    its class), pickled by its own ``__reduce__`` from those parts, so its reload's ``args``
    are the parts: the same exception, whose ``args`` differ."""

    def __init__(self, title: str, count: int) -> None:  # (no super().__init__: args kept)
        self.title, self.count = title, count

    @classmethod
    def made(cls, title: str, count: int) -> _StateReduce:
        self = Exception.__new__(cls)
        self.title, self.count = title, count
        return self

    def __str__(self) -> str:
        return f"{self.count} validation error(s) for {self.title}"

    def __reduce__(self) -> tuple[object, ...]:
        return (_StateReduce, (self.title, self.count))


def _caught(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_pickling_is_round_tripped_and_the_text_always_travels() -> None:
    rec = failure.record("load_plugins", _caught(_NoRoundTrip(1, 2)), rank=3, node="n1")
    assert rec.exc_bytes is None  # dumps worked, loads would not: not sent as if it would
    assert rec.exc_type.endswith("_NoRoundTrip") and rec.message == "needs 1 and 2"
    assert "raise exc" in rec.traceback_text
    assert (rec.rank, rec.node, rec.stage) == (3, "n1", "load_plugins")
    assert rec.pid > 0 and rec.host
    good = failure.record("entry", _caught(ValueError("bad")))
    assert good.exc_type == "ValueError"
    assert isinstance(pickle.loads(good.exc_bytes or b""), ValueError)


def test_an_exception_that_builds_its_message_arrives_with_the_message_it_had() -> None:
    """``raise CodeError(7)`` arrived as ``'failed with code failed with code 7'``: the pickle's
    load only had to not raise.  Now what loads is checked (type, ``str()``, args) and rebuilt
    without its ``__init__`` when that differs; an OSError keeps its errno and filename."""
    back = failure.load_exception(failure.record("entry", _caught(_CodeError(7))).exc_bytes)
    assert type(back) is _CodeError
    assert (str(back), back.args, back.code) == ("failed with code 7", ("failed with code 7",), 7)
    exc = _caught(_CodeError(3))
    add_note(exc, "while loading shard 3")  # (3.10: spawnkit's own, a __notes__ attribute)
    back = failure.load_exception(failure.record("entry", exc).exc_bytes)
    assert isinstance(back, _CodeError) and back.__notes__ == ["while loading shard 3"]
    rec = failure.record("entry", _caught(_MissingFile("/c")))
    missing = failure.load_exception(rec.exc_bytes)
    assert type(missing) is _MissingFile and str(missing) == "[Errno 2] no checkpoint: '/c'"
    assert (missing.errno, missing.filename) == (errno.ENOENT, "/c")


def test_an_exception_that_pickles_itself_is_sent_its_way_or_not_at_all() -> None:
    own = failure.load_exception(failure.record("entry", _caught(_OwnReduce(4))).exc_bytes)
    assert type(own) is _OwnReduce and (str(own), own.code) == ("code 4", 4)
    lying = failure.record("entry", _caught(_LyingReduce(4)))
    assert lying.exc_bytes is None  # it would load as "code code 4": the text travels instead
    assert lying.message == "code 4" and lying.exc_type.endswith("_LyingReduce")


def test_an_exception_whose_own_pickle_reloads_other_args_still_travels() -> None:
    """Its own ``__reduce__`` is what it is: the reload's ``args`` differ (``()`` made, the
    parts reloaded) while its type and text are the same.  It was not sent (child_exception
    None, ``run_entry`` raising ``ChildRaisedError`` for a pydantic ``ValidationError``)."""
    exc = _StateReduce.made("Cfg", 1)
    assert exc.args == ()
    back = failure.load_exception(failure.record("entry", _caught(exc)).exc_bytes)
    assert type(back) is _StateReduce and (back.title, back.count) == ("Cfg", 1)
    assert str(back) == "1 validation error(s) for Cfg"


def test_a_pydantic_validation_error_travels_as_itself() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Cfg(pydantic.BaseModel):
        port: int

    try:
        Cfg(port="http")
    except pydantic.ValidationError as caught:
        exc = caught
    back = failure.load_exception(failure.record("entry", exc).exc_bytes)
    assert type(back) is pydantic.ValidationError and str(back) == str(exc)
    assert back.errors()[0]["type"] == "int_parsing"


def test_a_broken_str_does_not_hide_the_failure() -> None:
    rec = failure.record("entry", _caught(_BrokenStr()))
    assert "str() of the exception raised RuntimeError" in rec.message
    assert "_BrokenStr" in rec.traceback_text


def test_torchrun_reports_an_exception_whose_str_is_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner's report used to call str(exc) unguarded, so the report itself raised and
    torchrun got no error file."""
    from spawnkit.scaleout import torchrun

    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    torchrun._report(_caught(_BrokenStr()), rank=2, stage="entry")
    doc = json.loads(path.read_text())
    assert "_BrokenStr" in doc["message"]["message"]
    assert doc["message"]["extraInfo"]["spawnkit_rank"] == "2"
    assert "rank 2 (torchrun, pid" in capsys.readouterr().err


def test_every_launcher_words_a_record_the_same_way() -> None:
    rec = failure.record("load_plugins", _caught(KeyError("plugin x")), rank=1, node="n7")
    local = failure.raised_message(rec, failure.Worker(1, 42, "h"), effect="Effect: gone.")
    ray = failure.raised_message(rec, failure.Worker.of(rec, "ray"))
    for text in (local, ray):
        head = text.splitlines()[0]
        assert "bootstrap stage 'load_plugins' failed: KeyError: 'plugin x'" in head
        assert "Child traceback (rank 1 (" in text and "raise exc" in text
    assert local.startswith("rank 1 (pid 42, host h): ") and "\nEffect: gone.\n" in local
    assert ray.startswith(f"rank 1 (ray, pid {rec.pid}, host {rec.host}, node n7): ")
    entry = failure.record("entry", _caught(ValueError("v")))
    assert "stage 'entry' failed (its entry function raised)" in failure.raised_message(
        entry, failure.Worker(0, 1)
    )


def test_the_parent_error_carries_the_original_when_it_loads() -> None:
    rec = failure.record("entry", _caught(ValueError("v")), rank=0)
    err = failure.raised_error(rec, failure.Worker.of(rec, "ray"), effect="")
    assert isinstance(err, ChildRaisedError) and isinstance(err.__cause__, ValueError)
    assert (err.rank, err.stage, err.exc_type) == (0, "entry", "ValueError")
    assert err.child_exception is err.__cause__


def test_a_note_on_the_exception_is_in_the_traceback_text_on_every_version() -> None:
    """The note naming the hook and plugin that raised (``hooks/_chain``) reached the
    launcher's ``ChildRaisedError`` text on 3.11 and later only: 3.10's ``traceback`` omits
    ``__notes__``, which spawnkit sets there itself (``_compat.add_note``).  In a process of
    its own: pytest's exceptiongroup backport patches 3.10's ``traceback`` to print them."""
    code = (
        "from spawnkit._compat import add_note\n"
        "from spawnkit.protocol import failure\n"
        "try:\n    raise ValueError('bad shape')\n"
        "except ValueError as exc:\n"
        "    add_note(exc, 'spawnkit.hooks: raised by AFTER hook m.after from plugin p')\n"
        "    print(failure.record('entry', exc).traceback_text, end='')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.endswith(
        "ValueError: bad shape\nspawnkit.hooks: raised by AFTER hook m.after from plugin p\n"
    )


_APP = """
class CodeError(Exception):
    def __init__(self, code):
        super().__init__(f"failed with code {code}")
        self.code = code

def fails(payload=None):
    raise CodeError(7)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_exception_that_builds_its_message_reaches_the_launcher_as_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Real workers: ``child_exception`` (what ``run_entry`` re-raises) says what was raised."""
    from spawnkit import spawn_with_plugins

    name = f"record_app_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        pytest.raises(ChildRaisedError) as info,
        spawn_with_plugins(
            f"{name}:fails", start_method=method, ready_timeout=120, join_timeout=120
        ) as group,
    ):
        group.results(timeout=120)
    back = info.value.child_exception
    assert type(back).__name__ == "CodeError", info.value
    assert (str(back), back.args, getattr(back, "code", None)) == (
        "failed with code 7",
        ("failed with code 7",),
        7,
    )


_GROUPS = pytest.mark.skipif(sys.version_info < (3, 11), reason="no ExceptionGroup before 3.11")
#: The built-in groups (read from builtins: this module runs on 3.10 too, where they are not).
_EG: Any = getattr(builtins, "ExceptionGroup", Exception)
_BEG: Any = getattr(builtins, "BaseExceptionGroup", BaseException)


class _CodedGroup(_EG):  # type: ignore[misc]
    """The documented way to subclass a group: a ``__new__`` of its own arguments."""

    def __new__(cls, excs: list[Exception], errcode: int) -> _CodedGroup:
        self: Any = super().__new__(cls, "coded", excs)
        self.errcode = errcode
        return self  # type: ignore[no-any-return]

    def __init__(self, excs: list[Exception], errcode: int) -> None:
        super().__init__("coded", excs)


@_GROUPS
def test_an_exception_group_of_members_that_build_their_message_arrives_rebuilt() -> None:
    """A group holding ``CodeError(7)`` pickled its members the default way (called with the
    message) and so was not sent at all: ``child_exception`` None where the member alone
    arrived.  Each member now travels as it would alone, nested groups and a group subclass
    whose ``__new__`` takes other arguments than its base's included."""
    group = _caught(_EG("two shards", [_CodeError(7), ValueError("plain")]))
    rec = failure.record("entry", group)
    back: Any = failure.load_exception(rec.exc_bytes)
    assert type(back) is _EG and rec.unsent == ""
    assert str(back) == "two shards (2 sub-exceptions)"
    code, plain = back.exceptions
    assert (type(code), str(code), code.args, code.code) == (
        _CodeError,
        "failed with code 7",
        ("failed with code 7",),
        7,
    )
    assert type(plain) is ValueError and plain.args == ("plain",)
    nested = _caught(_BEG("outer", [_EG("inner", [_CodeError(3)]), KeyboardInterrupt()]))
    back = failure.load_exception(failure.record("entry", nested).exc_bytes)
    assert type(back) is _BEG
    inner, stop = back.exceptions
    assert type(stop) is KeyboardInterrupt and str(inner.exceptions[0]) == "failed with code 3"
    coded = _caught(_CodedGroup([_CodeError(2)], 9))
    back = failure.load_exception(failure.record("entry", coded).exc_bytes)
    assert type(back) is _CodedGroup and back.errcode == 9
    assert str(back.exceptions[0]) == "failed with code 2"


@_GROUPS
def test_an_exception_group_whose_member_cannot_travel_says_which() -> None:
    """Not silently None: the record, and the launcher's message, name the member."""
    rec = failure.record("entry", _caught(_EG("two", [_CodeError(1), _LyingReduce(4)])))
    assert rec.exc_bytes is None
    assert "sub-exception 2" in rec.unsent and "_LyingReduce: code 4" in rec.unsent
    assert "loads back as another exception" in rec.unsent
    line = failure.raised_message(rec, failure.Worker(0, 1)).splitlines()[1]
    assert line.startswith("The exception group did not reach the launcher as an object")
    assert "(child_exception is None): it holds sub-exception 2" in line
    single = failure.record("entry", _caught(_LyingReduce(4)))  # (a single one: its text only)
    assert single.exc_bytes is None and single.unsent == ""


_GROUP_APP = """
class CodeError(Exception):
    def __init__(self, code):
        super().__init__(f"failed with code {code}")
        self.code = code

class Lying(Exception):
    def __init__(self, code):
        super().__init__(f"code {code}")

    def __reduce__(self):
        return (Lying, self.args)

def fails(payload=None):
    raise ExceptionGroup("shards", [CodeError(7), ValueError("plain")])

def fails_lying(payload=None):
    raise ExceptionGroup("shards", [CodeError(7), Lying(4)])
"""


@_GROUPS
@pytest.mark.parametrize(
    ("method", "context"),
    [("spawn", "multiprocessing"), ("forkserver", "multiprocessing"), ("spawn", "multiprocess")],
)
def test_a_worker_exception_group_reaches_the_launcher_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, context: str
) -> None:
    """Real workers: the group, each member as raised (``child_exception``, its cause)."""
    if context == "multiprocess":
        pytest.importorskip("multiprocess")
    from spawnkit import spawn_with_plugins

    name = f"group_app_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(_GROUP_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        pytest.raises(ChildRaisedError) as info,
        spawn_with_plugins(
            f"{name}:fails", start_method=method, context=context, ready_timeout=120
        ) as group,
    ):
        group.results(timeout=120)
    back: Any = info.value.child_exception
    assert type(back) is _EG, info.value
    code, plain = back.exceptions
    assert (type(code).__name__, str(code), code.code) == ("CodeError", "failed with code 7", 7)
    assert type(plain) is ValueError and str(plain) == "plain"
    assert info.value.__cause__ is back


@_GROUPS
def test_a_worker_exception_group_that_cannot_travel_is_said_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spawnkit import spawn_with_plugins

    name = f"group_lying_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(_GROUP_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        pytest.raises(ChildRaisedError) as info,
        spawn_with_plugins(f"{name}:fails_lying", ready_timeout=120) as group,
    ):
        group.results(timeout=120)
    assert info.value.child_exception is None
    assert f"it holds sub-exception 2 ({name}.Lying: code 4), which loads back" in str(info.value)
