"""Which spawnkit files hold a walked object in a frame's locals (``sys.setprofile``).

The walked data carries a token: ``server_args`` is ``{"token": TOKEN}``,
the failure is ``RuntimeError(TOKEN)``.  A frame holds it when one of its
locals is that object, a copy of it (unpickled in the child), bytes with the
token inside (the payload pickled), or an object one attribute away from one
(a ``Payload``), or a failure record holding its text.  The spec and the
``Process`` that carry a payload are not holders: what is walked is the data.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

_SRC = os.sep + "spawnkit" + os.sep
files: set[str] = set()
_token = ""
_tokb = b""


def _direct(value: Any) -> bool:
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return _tokb in bytes(value[:1_000_000])
        except Exception:
            return False
    if isinstance(value, str):
        return False  # a message's text is not the record
    if isinstance(value, dict):
        return value.get("token") == _token
    if isinstance(value, BaseException):
        return _token in str(value.args)[:100_000]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a record (Failed, Exited)
        # tuple's own iterator: 3.10's EntryPoint (a namedtuple) warns from its __iter__
        return any(isinstance(v, str) and _token in v for v in tuple.__iter__(value))
    return False


def _carries(value: Any) -> bool:
    """The object, a copy, its bytes, a ``Payload`` of it, or a tuple or list holding one."""
    if _direct(value):
        return True
    if type(value).__name__ == "Payload":
        # getattr: a slotted Payload being unpickled has no data yet
        data = (
            vars(value).get("data") if hasattr(value, "__dict__") else getattr(value, "data", None)
        )
        return _direct(data)
    return isinstance(value, (list, tuple)) and any(_direct(v) for v in value[:64])


def _fields(value: Any) -> list[Any]:
    """An object's own attribute values, read without running any of its code."""
    try:
        own = object.__getattribute__(value, "__dict__")
    except AttributeError:
        slots = getattr(type(value), "__slots__", ())
        return [object.__getattribute__(value, n) for n in slots if hasattr(value, n)]
    return list(own.values()) if isinstance(own, dict) else []


def holds(value: Any) -> bool:
    """``value`` carries the walked data, or one of its attributes does (a spec, a report)."""
    if _carries(value):
        return True
    if isinstance(value, (type, type(os))) or (callable(value) and not hasattr(value, "__self__")):
        return False
    try:
        inner = _fields(value)
    except Exception:
        return False
    return any(_carries(v) or (type(v).__name__ == "ProcessSpec" and holds(v)) for v in inner)


def _profile(frame: Any, event: str, arg: Any) -> None:
    name = frame.f_code.co_filename
    if _SRC not in name or name in files:
        return
    if event == "return" and holds(arg):
        files.add(name)
        return
    try:
        values = list(frame.f_locals.values())
    except Exception:
        return
    if any(holds(v) for v in values):
        files.add(name)


def begin(token: str) -> None:
    global _token, _tokb
    _token, _tokb = token, token.encode()
    files.clear()
    threading.setprofile(_profile)
    sys.setprofile(_profile)


def end() -> list[str]:
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    return sorted(files)


def relative(paths: list[str]) -> list[str]:
    return sorted({p.split(_SRC, 1)[1].replace(os.sep, "/") for p in paths})


def start(token: str, out: str) -> None:
    """In a worker: trace from here; write the files at exit (the entry may write first)."""
    begin(token)

    def write() -> None:
        found = end()
        with open(out, "a") as f:
            f.write("\n".join(found) + "\n")

    atexit.register(write)
