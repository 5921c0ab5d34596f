"""The one failure record (protocol/failure.py) that local, Ray and torchrun workers send."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from spawnkit.errors import ChildRaisedError
from spawnkit.protocol import failure


class _BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself is broken")


class _NoRoundTrip(Exception):
    """Pickles, but cannot be rebuilt from its pickle (a required argument is lost)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"needs {a} and {b}")


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
