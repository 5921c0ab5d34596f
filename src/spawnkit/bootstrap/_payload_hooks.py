"""Hooks on a constructor that never ran for the payload's objects.

A plugin that hooks ``ServerArgs.__post_init__`` (to adjust a default, to validate an option)
sees it run for every ``ServerArgs`` a worker builds, and never for the one the worker was
handed: the launcher built that before any plugin loaded, and unpickling restores an object's
state without calling ``__init__`` or ``__post_init__``.  The engine's own arguments then
carry the unadjusted value while ``status()`` says the hook is applied.

Only the worker knows its hooks, only the launcher built the payload: so ``Payload.capture``
notes which constructors (and class REPLACEs) its process had applied, per namespace (then
those ran hooked), and the worker, once the payload is materialized, names each other hooked
constructor of its namespace of a class the payload's pickle builds.  Per namespace: a
launcher that bootstrapped namespace A before building B's payload ran none of B's hooks.
Read from the pickle's class references, not by walking the objects: the check costs nothing
unless a constructor is hooked, and then one pass over the opcodes (``pickletools``, imported
on that path only).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.hooks.types import AppliedTarget
    from spawnkit.namespace import Namespace
    from spawnkit.spec import ProcessSpec
    from spawnkit.spec.payload import Payload

    # a class target, its replacement, its registrations
    Replaced = tuple[str, type, tuple[Any, ...]]

__all__: list[str] = []

_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING"})


def unrun(
    ctors: list[AppliedTarget],
    payload: Payload,
    replaced: Sequence[Replaced] = (),
    namespace: str = "",
    what: str = "payload",
) -> tuple[list[str], str]:
    """One line per hooked constructor whose class the payload builds without it (and per
    replaced class it rebuilds as the replacement without the replacement's), and the fix.
    Those ``namespace``'s launcher had applied when it captured the payload ran there: left
    alone; another namespace's hooks applied there (``bootstrap_here(A)``) ran none of these.
    ``what``: the payload, or the by-value entry (``partial(run, args)``, a lambda closing over
    ``args``), whose objects are unpickled the same way."""
    ran = {target for ns, target in payload.hooked if ns == namespace}
    ctors = [applied for applied in ctors if applied.target not in ran]
    replaced = [r for r in replaced if r[0] not in ran]
    if not ctors and not replaced:
        return [], ""
    refs = [(ref, cls) for ref in _references(payload.data) if (cls := _class(ref)) is not None]
    held = [cls for _, cls in refs]
    lines = []
    for target, replacement, regs in replaced:
        # named as the pickle names them: the launcher's classes, now found as the replacement
        built = sorted({".".join(ref) for ref, c in refs if issubclass(c, replacement)})
        if built:
            who = ", ".join(dict.fromkeys(str(reg.source) for reg in regs))
            lines.append(
                f"target {target!r} (replaced by {who} with {_name(replacement)}): the "
                f"{what}'s {', '.join(built)} was built by the original class in the launcher; "
                f"unpickled here it is a {replacement.__qualname__} whose own constructor "
                "never ran"
            )
    for applied in ctors:
        owner = _class((applied.module, applied.qualname.rpartition(".")[0]))
        if owner is None:
            continue
        built = sorted({_name(c) for c in held if issubclass(c, owner)})
        if built:
            who = ", ".join(dict.fromkeys(str(reg.source) for reg in applied.hooks))
            method = applied.qualname.rpartition(".")[2]
            lines.append(
                f"target {applied.target!r} (hooked by {who}) never ran for the {what}'s "
                f"{', '.join(built)}: the launcher built it before any plugin hooked {method}, "
                f"and unpickling it here called no {method}"
            )
    fix = (
        "Fix: load the plugins in the launcher before it builds the payload "
        "(spawnkit.bootstrap_here(), or apply_plugin_hooks()), or hook a method the worker calls "
        "on the object instead."
    )
    return lines, fix


def copied_instances(namespace: Namespace, payload: Payload, what: str) -> tuple[list[str], str]:
    """One line per applied target patched on a module-level instance the launcher put in the
    payload (``Payload.instances``): unpickled here, the payload's object is a copy, whose
    attribute is the original.  Compared by identity with the module's object now (a target
    named through a re-export counts); imports nothing."""
    held: dict[int, tuple[Any, str, list[str]]] = {}
    for name, where in payload.instances:
        module, _, attr = name.rpartition(".")
        value = getattr(sys.modules.get(module), attr, None)
        if value is not None:
            held.setdefault(id(value), (value, name, []))[2].append(where)
    lines: list[str] = []
    for applied in namespace.hooks.applied_targets() if held else ():
        obj: Any = sys.modules.get(applied.module)
        parts = applied.qualname.split(".")
        for i, part in enumerate(parts[:-1]):
            obj = getattr(obj, part, None)
            hit = held.get(id(obj))
            if hit is not None and hit[0] is obj:
                who = ", ".join(dict.fromkeys(str(reg.source) for reg in applied.hooks))
                lines.append(
                    f"target {applied.target!r} (hooked by {who}) is patched on the module-level "
                    f"{hit[1]}, but the {what}'s object at {', '.join(hit[2])} is a copy of it, "
                    f"made by unpickling: its {'.'.join(parts[i + 1 :])} is the original, and "
                    "calls through it never run the hook"
                )
                break
    names = sorted({name for _, name, _ in held.values()})
    refs = ", ".join(repr(":".join(n.rpartition(".")[::2])) for n in names)
    fix = (
        f"Fix: leave that object out of the {what} and pass its name ({refs}), which the entry "
        "resolves here after the hooks (pkgutil.resolve_name), or what the entry needs to "
        "build its own (a factory's arguments)."
    )
    return lines, fix


def extra_payloads(spec: ProcessSpec) -> list[tuple[Payload | None, str]]:
    """Each ``spec.extra`` value (``rank_extra=``'s) as a payload to read: pickled again here,
    as the launcher pickled it, for the classes its pickle builds without calling them.  Under
    forkserver a rank unpickles them after its server applied the hooks, where the import
    guard cannot see them.  A value plain pickle cannot take (a ``Pipe`` end) is not read."""
    import pickle

    from spawnkit.spec.payload import Payload

    hooked = spec._control.extra_hooked
    found: list[tuple[Payload | None, str]] = []
    for key, value in spec.extra.items():
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            continue
        payload = Payload(data, type(value).__qualname__, "", hooked=hooked)
        found.append((payload, f"rank_extra[{key!r}]"))
    return found


_COPYREG = frozenset(  # protocols 0 and 1 name the module copy_reg, as Python 2 did
    (mod, name) for mod in ("copyreg", "copy_reg") for name in ("_reconstructor", "__newobj__")
)
_MARK = object()


class _Ref(tuple[str, str]):
    """A global the pickle loaded, as it sits on the simulated stack."""


def _references(data: bytes) -> set[tuple[str, str]]:
    """``(module, qualname)`` of each class a pickle builds without calling it: the class of
    ``NEWOBJ``/``NEWOBJ_EX`` and of ``copyreg.__newobj__``/``_reconstructor`` (protocols 0
    and 1).  A class the pickle calls (``REDUCE``: a ``__reduce__`` returning ``(cls, args)``,
    which rebuilds through the constructor) ran its hooks, and a class only held is not built.
    The stack is simulated from ``pickletools``' opcode table; a pickle it cannot follow is
    read as before (every global), so nothing goes unnamed."""
    import pickletools

    try:
        return _built(pickletools, data)
    except Exception:
        from spawnkit.spec._held_instances import class_refs  # every global: rare, here only

        return class_refs(data)


def _built(pickletools: Any, data: bytes) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    for opcode, arg, _pos in pickletools.genops(data):
        name, before = opcode.name, opcode.stack_before
        if name == "MARK":
            stack.append(_MARK)
            continue
        if name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):  # the value stays on the stack
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
            continue
        items: list[Any] = []
        if pickletools.stackslice in before:  # everything down to the mark, then the mark
            at = len(stack) - 1 - stack[::-1].index(_MARK)
            items, stack = stack[at + 1 :], stack[:at]
            before = before[: before.index(pickletools.markobject)]
        popped = [stack.pop() for _ in before][::-1]
        pushed: Any = None
        if name in _STRINGS and isinstance(arg, str):
            pushed = arg
        elif name == "GLOBAL" and isinstance(arg, str):
            pushed = _Ref(arg.split(" ", 1))
        elif name == "STACK_GLOBAL" and all(isinstance(p, str) for p in popped):
            pushed = _Ref(popped)
        elif name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"):
            pushed = tuple(items or popped)
        elif name in ("NEWOBJ", "NEWOBJ_EX") and isinstance(popped[0], _Ref):
            found.add(tuple(popped[0]))  # type: ignore[arg-type]
        elif name == "REDUCE" and popped[0] in _COPYREG and isinstance(popped[1], tuple):
            if popped[1] and isinstance(popped[1][0], _Ref):
                found.add(tuple(popped[1][0]))  # type: ignore[arg-type]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            pushed = memo.get(arg)
        stack.extend([pushed] * len(opcode.stack_after))
    return found


def _class(ref: tuple[str, str]) -> type | None:
    """The class ``ref`` names among the modules already imported (nothing is imported here)."""
    module, qualname = ref
    obj: Any = sys.modules.get(module)
    for part in qualname.split(".") if obj is not None and qualname else ():
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
