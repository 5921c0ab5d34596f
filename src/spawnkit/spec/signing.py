"""Signed spec files: how a spec crosses into processes that spawnkit did not start itself.

Under ``torchrun`` (or any launcher that runs ``python -m spawnkit.run``) the
parent cannot hand the child a pickled spec over a pipe; it writes a file.
Unpickling a file is running code from it, so the file carries an HMAC-SHA256
signature made with a key that only the parent and its children know (given
through the environment, ``SPAWNKIT_SPEC_KEY`` by default), and the child
checks that signature *before* a single byte is unpickled.

File layout (all of it covered by the signature except the signature itself)::

    SPAWNKIT-SPEC/1\\n
    {"alg": "hmac-sha256", "size": N, "created": T, "sig": "<hex>"}\\n
    <N bytes: pickle of the ProcessSpec template>

Standard library only, like the rest of :mod:`spawnkit.spec`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from spawnkit.errors import SpecError
from spawnkit.spec.process_spec import ProcessSpec

__all__ = [
    "DEFAULT_KEY_VAR",
    "MIN_KEY_BYTES",
    "PROCESS_ENV",
    "generate_key",
    "key_from_env",
    "read_spec_file",
    "sign_spec",
    "verify_spec",
    "write_spec_file",
]

DEFAULT_KEY_VAR = "SPAWNKIT_SPEC_KEY"
PROCESS_ENV = (DEFAULT_KEY_VAR,)
"""This module's process-wide variables, for the launcher's environment check."""
MIN_KEY_BYTES = 16
_MAGIC = b"SPAWNKIT-SPEC/1\n"
_ALG = "hmac-sha256"
# A header longer than this is not ours; refusing early bounds what we parse before verifying.
_MAX_HEADER = 4096
_SIG_SHAPE = re.compile(r"[0-9a-f]{64}")


def generate_key() -> str:
    """A fresh random key (64 hex characters) to put into the children's environment."""
    return secrets.token_hex(32)


def _key_bytes(key: str | bytes, where: str) -> bytes:
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if len(raw) < MIN_KEY_BYTES:
        raise SpecError(
            f"the spec signing key from {where} is {len(raw)} bytes long; at least "
            f"{MIN_KEY_BYTES} are needed so the signature cannot be guessed. Use "
            "spawnkit.spec.signing.generate_key() to make one.",
            kind="signature",
        )
    return raw


def key_from_env(var: str = DEFAULT_KEY_VAR, environ: dict[str, str] | None = None) -> bytes:
    """The signing key from environment variable ``var``; missing or short is an error."""
    env = os.environ if environ is None else environ
    value = env.get(var)
    if not value:
        raise SpecError(
            f"no spec signing key: environment variable {var} is not set in this process "
            f"(pid {os.getpid()}). The parent that wrote the spec file must export the same key "
            f"to its children, e.g. {var}=$(python -c 'from spawnkit.spec.signing import "
            "generate_key; print(generate_key())') before running torchrun.",
            kind="signature",
        )
    return _key_bytes(value, f"${var}")


def _resolve_key(key: str | bytes | None, key_var: str) -> bytes:
    if key is None:
        return key_from_env(key_var)
    return _key_bytes(key, "the key argument")


def _mac(key: bytes, header_fields: dict[str, Any], body: bytes) -> str:
    canonical = json.dumps(header_fields, sort_keys=True, separators=(",", ":")).encode("utf-8")
    mac = hmac.new(key, digestmod=hashlib.sha256)
    mac.update(_MAGIC)
    mac.update(len(canonical).to_bytes(8, "big"))
    mac.update(canonical)
    mac.update(body)
    return mac.hexdigest()


def _check_spec_for_file(spec: ProcessSpec) -> None:
    if not isinstance(spec, ProcessSpec):
        raise TypeError(f"a spec file holds a ProcessSpec, got {type(spec).__name__}")
    held = [n for n in ("report_conn", "death_conn") if getattr(spec, n) is not None]
    if held:
        raise ValueError(
            f"ProcessSpec for {spec.entry or 'an entry_payload'} holds {', '.join(held)}: a "
            "Connection is a live pipe of this process and cannot be written to a spec file. "
            "Spec-file workers (torchrun) report through their exit status and "
            "TORCHELASTIC_ERROR_FILE instead; build the template with these fields left None."
        )


def sign_spec(
    spec: ProcessSpec, key: str | bytes | None = None, *, key_var: str = DEFAULT_KEY_VAR
) -> bytes:
    """The signed file contents for ``spec`` (see the module docstring for the layout)."""
    _check_spec_for_file(spec)
    raw_key = _resolve_key(key, key_var)
    body = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    fields: dict[str, Any] = {"alg": _ALG, "size": len(body), "created": int(time.time())}
    header = dict(fields, sig=_mac(raw_key, fields, body))
    return _MAGIC + json.dumps(header, sort_keys=True).encode("utf-8") + b"\n" + body


def verify_spec(
    data: bytes,
    key: str | bytes | None = None,
    *,
    key_var: str = DEFAULT_KEY_VAR,
    source: str = "spec data",
) -> ProcessSpec:
    """Check the signature of ``data``, then (only then) unpickle the spec it holds."""
    if not data.startswith(_MAGIC):
        raise SpecError(
            f"{source} is not a signed spawnkit spec (it does not start with "
            f"{_MAGIC.strip().decode()!r}); it may be an unsigned pickle. Refusing to unpickle "
            "it. Write spec files with spawnkit.spec.signing.write_spec_file().",
            kind="signature",
        )
    end = data.find(b"\n", len(_MAGIC), len(_MAGIC) + _MAX_HEADER)
    if end < 0:
        raise SpecError(
            f"{source} has no readable signature header; refusing it.", kind="signature"
        )
    try:
        header = json.loads(data[len(_MAGIC) : end].decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError(f"the header is a JSON {type(header).__name__}, not an object")
        sig = header.pop("sig")
        if header.get("alg") != _ALG:
            raise ValueError(f"unsupported signature algorithm {header.get('alg')!r}")
        # hmac.compare_digest raises TypeError on non-ASCII text: check the shape first.
        if not isinstance(sig, str) or not _SIG_SHAPE.fullmatch(sig):
            raise ValueError("the signature is not 64 lowercase hex digits")
    # RecursionError: a deeply nested JSON header (json's decoder recurses).
    except (ValueError, KeyError, AttributeError, UnicodeDecodeError, RecursionError) as exc:
        raise SpecError(
            f"{source} has a malformed signature header ({exc}); refusing to unpickle it.",
            kind="signature",
        ) from None
    body = data[end + 1 :]
    raw_key = _resolve_key(key, key_var)
    expected = _mac(raw_key, header, body)
    if not hmac.compare_digest(expected, sig):
        raise SpecError(
            f"{source} failed its signature check: it was modified after it was written, "
            f"or signed with a different key than the one in this process "
            f"({'the key argument' if key is not None else '$' + key_var}). Nothing was "
            "unpickled. Rewrite the file with write_spec_file() and give every rank the key "
            "the writer used.",
            kind="signature",
        )
    if header.get("size") != len(body):  # pragma: no cover - size is inside the signed header
        raise SpecError(
            f"{source}: signed size does not match the body; refusing it.", kind="signature"
        )
    spec = pickle.loads(body)
    if not isinstance(spec, ProcessSpec):
        raise SpecError(
            f"{source} is signed but holds a {type(spec).__name__}, not a ProcessSpec.",
            kind="signature",
        )
    return spec


def write_spec_file(
    spec_template: ProcessSpec,
    path: str | os.PathLike[str],
    key: str | bytes | None = None,
    *,
    key_var: str = DEFAULT_KEY_VAR,
) -> Path:
    """Sign ``spec_template`` and write it to ``path`` atomically, readable by this user only.

    Atomic (a temporary file renamed into place) so that a rank starting early
    never reads a half-written file and mistakes it for tampering.
    """
    data = sign_spec(spec_template, key, key_var=key_var)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".spec-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def read_spec_file(
    path: str | os.PathLike[str],
    key: str | bytes | None = None,
    *,
    key_var: str = DEFAULT_KEY_VAR,
) -> ProcessSpec:
    """Read, verify and only then unpickle the spec template at ``path``."""
    source = f"spec file {os.fspath(path)}"
    data = Path(path).read_bytes()
    return verify_spec(data, key, key_var=key_var, source=source)
