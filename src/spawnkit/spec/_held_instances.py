"""The module-level instances a payload carries, each of which a worker gets as a copy.

``payload={"engine": ENGINE}``, ``ENGINE`` a module's own instance: pickle takes it by value,
so the worker's ``payload["engine"]`` is a new object beside its module's ``ENGINE``.  A hook
on an attribute of that instance (target ``eng.sched.ENGINE.run``) patches the module's
object, and the copy runs the original.  Only the launcher knows that the payload held the
module's very object, only the worker knows the hooks: ``Payload.capture`` notes each such
instance (``Payload.instances``: its name and its place in the payload), the worker compares
them with its applied targets (``bootstrap/_payload_hooks.copied_instances``).

Found from the pickle's class references: a module that defines a class the payload builds
and holds an instance of it as a global (``ENGINE = Engine()``); only then is the payload
walked for that object.  Imported by ``Payload.capture`` in the launcher, and by a worker only
to read a pickle's globals (``class_refs``) where its opcode simulation gave up
(``bootstrap/_payload_hooks``).
"""

from __future__ import annotations

import pickle
import pickletools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["class_refs", "held_instances"]

_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING"})
_SCALARS = (str, bytes, int, float, bool, type(None))


def held_instances(
    obj: Any,
    data: bytes,
    path_to: Callable[..., str],
    refs: set[tuple[str, str]] | None = None,
) -> tuple[tuple[str, str], ...]:
    """``(module.NAME, path)`` of each module-level instance ``obj`` holds, ``path`` found by
    ``path_to`` (the payload's bounded walk); ``()`` for most payloads, after one opcode pass
    (``refs``, when the caller made it already)."""
    candidates: dict[int, tuple[Any, str]] = {}
    for module_name, qualname in class_refs(data) if refs is None else refs:
        module = sys.modules.get(module_name)
        cls: Any = module
        for part in qualname.split(".") if module is not None else ():
            cls = getattr(cls, part, None)
        if module is None or not isinstance(cls, type) or _unpickles_itself(cls):
            continue
        for name, value in list(vars(module).items()):
            if type(value) is cls and not name.startswith("__") and not _by_name(value):
                candidates.setdefault(id(value), (value, f"{module_name}.{name}"))
    found = []
    for value, name in candidates.values():
        where = path_to(obj, value)
        if where:
            found.append((name, where))
    return tuple(found)


def _unpickles_itself(cls: type) -> bool:
    """Instances that unpickle as the very object (an enum's members: ``re.IGNORECASE``) or
    whose copy is the same value (scalars)."""
    enum = sys.modules.get("enum")
    return issubclass(cls, _SCALARS) or (enum is not None and issubclass(cls, enum.Enum))


def _by_name(value: Any) -> bool:
    """A singleton that pickles as a reference to its global name (``__reduce__`` -> str)."""
    try:
        return isinstance(value.__reduce_ex__(pickle.HIGHEST_PROTOCOL), str)
    except Exception:
        return False


def class_refs(data: bytes) -> set[tuple[str, str]]:
    """Every global the pickle loads (``GLOBAL``, ``INST``, ``STACK_GLOBAL`` with its strings
    from the memo too); a pickle this reader cannot follow: what was found so far."""
    found: set[tuple[str, str]] = set()
    strings: list[str | None] = []
    memo: dict[Any, str | None] = {}
    try:
        for opcode, arg, _pos in pickletools.genops(data):
            name = opcode.name
            if name in _STRINGS:
                strings.append(arg if isinstance(arg, str) else None)
                continue
            if name in ("GLOBAL", "INST") and isinstance(arg, str):
                module, _, qualname = arg.partition(" ")
                found.add((module, qualname))
            elif name == "STACK_GLOBAL" and len(strings) >= 2:
                if strings[-2] is not None and strings[-1] is not None:
                    found.add((strings[-2], strings[-1]))
            elif name in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"):
                key = len(memo) if name == "MEMOIZE" else arg
                memo[key] = strings[-1] if strings else None
                continue
            elif name in ("BINGET", "LONG_BINGET", "GET") and isinstance(arg, int):
                strings.append(memo.get(arg))
                continue
            strings.append(None)
    except Exception:
        pass
    return found
