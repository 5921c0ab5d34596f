"""Signed spec files: verified before anything is unpickled, refused loudly otherwise."""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from multiprocessing import Pipe
from pathlib import Path

import pytest

from spawnkit.errors import SpecError
from spawnkit.spec import Payload, ProcessSpec
from spawnkit.spec.signing import (
    DEFAULT_KEY_VAR,
    generate_key,
    key_from_env,
    read_spec_file,
    sign_spec,
    verify_spec,
    write_spec_file,
)

KEY = "k" * 32


def _spec() -> ProcessSpec:
    return ProcessSpec(
        entry="json:dumps",
        world_size=2,
        env={"A": "1"},
        payload=Payload.capture({"x": [1, 2, 3]}),
        run_id="r1",
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    spec = _spec()
    path = write_spec_file(spec, tmp_path / "spec.bin", KEY)
    back = read_spec_file(path, KEY)
    assert back == spec
    assert back.payload is not None and back.payload.materialize() == {"x": [1, 2, 3]}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # No temporary file is left beside the spec.
    assert [p.name for p in tmp_path.iterdir()] == ["spec.bin"]


def test_key_comes_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEFAULT_KEY_VAR, generate_key())
    path = write_spec_file(_spec(), tmp_path / "s")
    assert read_spec_file(path).entry == "json:dumps"
    monkeypatch.setenv("OTHER_KEY", KEY)
    path2 = write_spec_file(_spec(), tmp_path / "s2", key_var="OTHER_KEY")
    assert read_spec_file(path2, key_var="OTHER_KEY").run_id == "r1"
    with pytest.raises(SpecError, match="failed its signature check"):
        read_spec_file(path2)  # default variable holds another key


@pytest.mark.parametrize("offset", [0, 17, 40, -1, -30])
def test_any_flipped_byte_is_refused(tmp_path: Path, offset: int) -> None:
    path = write_spec_file(_spec(), tmp_path / "spec.bin", KEY)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SpecError) as info:
        read_spec_file(path, KEY)
    assert str(path) in str(info.value)


def test_tampered_file_is_refused_before_unpickling(tmp_path: Path) -> None:
    """A body replaced by a pickle that would run code must not run it."""
    marker = tmp_path / "pwned"
    data = sign_spec(_spec(), KEY)
    magic, header, _body = data.split(b"\n", 2)
    evil = pickle.dumps(_Evil(str(marker)))
    header_d = json.loads(header)
    header_d["size"] = len(evil)
    forged = magic + b"\n" + json.dumps(header_d).encode() + b"\n" + evil
    with pytest.raises(SpecError, match="modified after it was written"):
        verify_spec(forged, KEY)
    assert not marker.exists()


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (Path.touch, (Path(self.path),))


def test_unsigned_pickle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps(_spec()))
    with pytest.raises(SpecError, match="not a signed spawnkit spec"):
        read_spec_file(path, KEY)


def test_wrong_key_is_refused(tmp_path: Path) -> None:
    path = write_spec_file(_spec(), tmp_path / "s", KEY)
    with pytest.raises(SpecError, match="different key"):
        read_spec_file(path, "z" * 32)


def test_malformed_header_is_refused() -> None:
    with pytest.raises(SpecError, match="malformed signature header"):
        verify_spec(b"SPAWNKIT-SPEC/1\n{not json}\nbody", KEY)
    for header in (b"[1, 2]", b'"text"', b"3"):  # valid JSON, but not a header object
        with pytest.raises(SpecError, match="malformed signature header"):
            verify_spec(b"SPAWNKIT-SPEC/1\n" + header + b"\nbody", KEY)
    with pytest.raises(SpecError, match="no readable signature header"):
        verify_spec(b"SPAWNKIT-SPEC/1\n" + b"x" * 10000, KEY)


def test_missing_and_short_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEFAULT_KEY_VAR, raising=False)
    with pytest.raises(SpecError, match=f"{DEFAULT_KEY_VAR} is not set"):
        key_from_env()
    with pytest.raises(SpecError, match="at least 16"):
        sign_spec(_spec(), "short")
    assert len(generate_key()) == 64 and generate_key() != generate_key()


def test_connections_cannot_go_into_a_file(tmp_path: Path) -> None:
    a, b = Pipe()
    try:
        spec = _spec().replace(report_conn=a)
        with pytest.raises(ValueError, match="report_conn"):
            write_spec_file(spec, tmp_path / "s", KEY)
        assert not (tmp_path / "s").exists()
    finally:
        a.close()
        b.close()


def test_verification_needs_no_engine_import(tmp_path: Path) -> None:
    """Reading a spec in a fresh interpreter imports neither torch nor the payload's modules."""
    spec = ProcessSpec(entry="json:dumps", payload=Payload.capture(Path("/x")))
    path = write_spec_file(spec, tmp_path / "s", KEY)
    code = (
        "import sys; from spawnkit.spec.signing import read_spec_file; "
        f"s = read_spec_file({str(path)!r}, {KEY!r}); "
        "print('torch' in sys.modules, 'pathlib' in s.payload.type_name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["False", "True"]


def test_forged_headers_are_refused_with_the_signature_error() -> None:
    """A header an attacker controls yields SpecError, never TypeError/RecursionError."""
    magic, header, body = sign_spec(_spec(), KEY).split(b"\n", 2)
    fields = json.loads(header)
    for sig in ("\u00e9" * 64, "AB" * 32, 12):  # non-ASCII, wrong case, not text
        forged = magic + b"\n" + json.dumps(dict(fields, sig=sig)).encode() + b"\n" + body
        with pytest.raises(SpecError, match="malformed signature header"):
            verify_spec(forged, KEY)
    nested = magic + b"\n" + b"[" * 3000 + b"\n" + body
    with pytest.raises(SpecError, match="malformed signature header"):
        verify_spec(nested, KEY)
