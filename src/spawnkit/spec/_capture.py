"""Capturing a payload, in the launching process: plain pickle or cloudpickle, and what a
refusal says (an object shared between processes, a copy that would silently diverge).

Apart from :mod:`spawnkit.spec.payload` because a worker only materializes: it never imports
this (issue #23).
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from types import MethodType

from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import BootstrapError

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})


def _references_main(refs: set[tuple[str, str]]) -> bool:
    """Whether a pickle refers to ``__main__`` by name, which a spawned child cannot honour.

    A spawned child re-imports the launching script as ``__mp_main__``, and a
    reference to ``__main__.Thing`` may then fail or, worse, re-run script code
    before hooks are applied; such objects go by value instead.  ``refs``: the pickle's
    globals (``_held_instances.class_refs``, one opcode pass shared with its other reader).
    """
    return any(module in _MAIN_MODULES for module, _ in refs)


class _Shared(pickle.PicklingError):
    """A torch tensor in shared memory: pickled into the payload, each worker gets a copy."""

    def __init__(self, obj: Any) -> None:
        super().__init__("a torch tensor in shared memory")
        self.obj = obj


def _shared_tensor(torch: Any, obj: Any) -> bool:
    """A CPU tensor whose storage is shared memory (``share_memory_()``, or one received from
    a ``torch.multiprocessing`` queue); a CUDA tensor counts as shared for torch, and is left
    to its device."""
    if not isinstance(obj, torch.Tensor):
        return False
    try:
        return bool(obj.device.type == "cpu" and obj.is_shared())
    except Exception:  # a sparse or meta tensor: no storage of its own to share
        return False


_PLAIN: Any = None


def _dumps(obj: Any) -> bytes:
    """``pickle.dumps(obj)``, refusing a shared-memory tensor (``_Shared``) where torch is
    imported: plain pickle copies its data, where ``torch.multiprocessing.spawn(fn, args=(t,))``
    shares it.  Without torch in ``sys.modules`` no payload can hold a tensor: plain pickle."""
    global _PLAIN
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    import io

    if _PLAIN is None:

        def reducer_override(self: Any, found: Any) -> Any:
            if _shared_tensor(torch, found):
                raise _Shared(found)
            return NotImplemented

        _PLAIN = type("_SharedRefused", (pickle.Pickler,), {"reducer_override": reducer_override})
    buf = io.BytesIO()
    _PLAIN(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


class _Copied(pickle.PicklingError):
    """An object cloudpickle would send as a copy of what it holds, not as itself."""

    def __init__(self, obj: Any) -> None:
        super().__init__(f"an open file: {obj!r}")
        self.obj = obj


_BY_VALUE: Any = None


def _by_value(cloudpickle: Any, obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, refusing an open text file (``_Copied``).

    Plain pickle refuses a file; cloudpickle, there for lambdas, closures and ``__main__``'s
    classes, reads a readable one's contents into an ``io.StringIO``, unsaid: each worker's
    writes went to its own copy in memory and the file never saw them.  The standard streams
    keep cloudpickle's meaning (the worker's own ``sys.stdout``/``stderr``, relayed)."""
    global _BY_VALUE
    import io

    if _BY_VALUE is None:
        from collections import ChainMap

        base = cloudpickle.Pickler
        streams = ("stdin", "stdout", "stderr")

        def file_reduce(f: Any) -> Any:
            import sys

            if any(f is getattr(sys, name, None) for name in streams):
                return base.dispatch_table[io.TextIOWrapper](f)
            raise _Copied(f)

        table = ChainMap(
            {io.TextIOWrapper: file_reduce, MethodType: _class_method_reduce(base)},
            base.dispatch_table,
        )

        def reducer_override(self: Any, found: Any) -> Any:
            torch = sys.modules.get("torch")
            if torch is not None and _shared_tensor(torch, found):
                raise _Shared(found)
            return base.reducer_override(self, found)

        attrs = {"dispatch_table": table, "reducer_override": reducer_override}
        _BY_VALUE = type("_FilesRefused", (base,), attrs)
    buf = io.BytesIO()
    _BY_VALUE(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _class_method_reduce(base: Any) -> Any:
    """A classmethod bound to its class (``Engine.serve``, in a ``partial`` or a payload) goes
    as ``getattr(cls, name)``, as plain pickle sends it: cloudpickle copied its function by
    value, so the worker ran the original, not the function its hooks put on the class."""
    fallback = base.dispatch_table[MethodType]

    def reduce(method: Any) -> Any:
        owner, name = method.__self__, getattr(method.__func__, "__name__", "")
        if isinstance(owner, type) and getattr(owner, name, None) == method:
            return getattr, (owner, name)
        return fallback(method)

    return reduce


def _copied_text(type_name: str, root: Any, found: Any) -> str:
    """Why a payload holding an open file is refused: where it is, what would have happened."""
    where = _path_to(root, found)
    what = f"{where} is" if where else "it holds"
    name, mode = getattr(found, "name", "?"), getattr(found, "mode", "?")
    kind = f"{type(found).__module__}.{type(found).__qualname__}"
    return (
        f"cannot capture a {type_name} payload: {what} an open file ({name!r}, mode {mode!r}). "
        "A file object cannot travel to another process: plain pickle refuses it (TypeError: "
        f"cannot pickle '{kind}' object), and by value "
        "(cloudpickle) it would arrive in each worker as an in-memory copy of the file's "
        "contents (io.StringIO), so what the workers write to it would never reach the file. "
        "Pass the path instead and open the file in the entry (each worker its own handle, "
        "mode 'a' to append to a shared log)."
    )


def _refused(type_name: str, obj: Any, exc: BaseException) -> BootstrapError | None:
    """The payload refusal ``exc`` stands for (an open file, a shared tensor, a multiprocessing
    shared object), naming where it sits; None for any other pickling error."""
    if isinstance(exc, _Copied):
        text: str | None = _copied_text(type_name, obj, exc.obj)
    elif isinstance(exc, _Shared):
        text = _shared_text(type_name, obj, exc.obj)
    else:
        text = _inherited_text(type_name, obj, exc)
    if text is None:
        return None
    refusal = BootstrapError(text, kind="payload")
    # multiprocessing's own error is the cause; spawnkit's internal markers are not shown
    refusal.__cause__ = None if isinstance(exc, _Copied | _Shared) else exc
    refusal.__suppress_context__ = True
    return refusal


def _shared_text(type_name: str, root: Any, found: Any) -> str:
    """Why a payload holding a shared-memory tensor is refused, and how to share it."""
    where = _path_to(root, found)
    what = f"{where} is" if where else "it holds"
    shape, dtype = tuple(getattr(found, "shape", ())), getattr(found, "dtype", "?")
    return (
        f"cannot capture a {type_name} payload: {what} a torch tensor in shared memory "
        f"(shape {shape}, {dtype}). The payload is pickled once, in the launcher, and each "
        "worker unpickles a copy of its data, so what the workers write to it would never "
        "reach the launcher's tensor or each other (torch.multiprocessing.spawn(fn, "
        "args=(t,)) shares it). Pass it per rank, sent with each rank's start as "
        "torch.multiprocessing sends it (shared): rank_extra=lambda rank: {'buf': t} with "
        "entry_args=('local_rank', 'buf'); or, if each worker should get its own copy, put "
        "t.clone() in the payload."
    )


_INHERITED = "through inheritance"
# what ``Payload.capture(by_value=None)`` means, for a refused value's message
_BY_VALUE_NONE = "plain pickle where it can take the object by reference, else by value"


def _inherited_text(type_name: str, root: Any, exc: BaseException) -> str | None:
    """Why a payload holding a multiprocessing ``Value``/``Array``/``Queue``/``Event``/``Lock``
    is refused (its pickling raised ``RuntimeError: ... through inheritance``); None for any
    other error.  Where it sits is looked for only now, on the failure path."""
    if not isinstance(exc, RuntimeError) or _INHERITED not in str(exc):
        return None
    found = _first(root, _mp_shared)
    where = _path_to(root, found) if found is not None else ""
    kind = f" ({type(found).__module__}.{type(found).__qualname__})" if found is not None else ""
    what = f"{where} is" if where else "it holds"
    return (
        f"cannot capture a {type_name} payload: {what} a multiprocessing shared object{kind}: "
        f"{exc}. A Value, Array, Queue, Event or Lock travels only with a process's start, "
        "which the payload, pickled once in the launcher, is not. Pass it per rank: "
        "rank_extra=lambda rank: {'queue': q} with entry_args=(..., 'queue') (sent with each "
        "rank's start, it stays shared), made from a context of the launch's start method "
        "(multiprocessing.get_context('spawn').Queue())."
    )


def _mp_shared(obj: Any) -> bool:
    """Whether pickling ``obj`` alone is multiprocessing's refusal outside a process start."""
    if not type(obj).__module__.startswith("multiprocessing"):
        return False
    try:
        pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except RuntimeError as exc:
        return _INHERITED in str(exc)
    except Exception:
        return False
    return False


def _first(root: Any, match: Any, limit: int = 20000) -> Any:
    """The first object in ``root`` (breadth first, bounded as ``_path_to``) ``match`` takes."""
    from collections import deque

    queue: deque[Any] = deque([root])
    seen: set[int] = set()
    while queue and len(seen) < limit:
        obj = queue.popleft()
        if id(obj) in seen or isinstance(obj, str | bytes | int | float | type):
            continue
        seen.add(id(obj))
        if match(obj):
            return obj
        queue.extend(child for child, _ in _children(obj, ""))
    return None


def _path_to(
    root: Any, target: Any, limit: int = 20000, match: Callable[[Any], bool] | None = None
) -> str:
    """Where ``target`` (or the first object ``match`` accepts) sits in ``root``
    (``payload.log``, ``payload['files'][0]``), found by a bounded walk of containers and
    attributes; ``""`` when not found within ``limit``."""
    from collections import deque

    queue: deque[tuple[Any, str]] = deque([(root, "payload")])
    seen: set[int] = set()
    while queue and len(seen) < limit:
        obj, path = queue.popleft()
        if obj is target or (match is not None and match(obj)):
            return path
        if id(obj) in seen or isinstance(obj, str | bytes | int | float | type):
            continue
        seen.add(id(obj))
        queue.extend(_children(obj, path))
    return ""


def _children(obj: Any, path: str) -> list[tuple[Any, str]]:
    """What ``obj`` holds, each with its path; nothing where reading it fails (a proxy, a
    ``__getattr__`` of its own): only a message is at stake."""
    try:
        return _held(obj, path)
    except Exception:
        return []


def _held(obj: Any, path: str) -> list[tuple[Any, str]]:
    if isinstance(obj, dict):
        return [(v, f"{path}[{k!r}]") for k, v in obj.items()]
    if isinstance(obj, list | tuple):
        return [(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, set | frozenset):
        return [(v, f"an item of {path}") for v in obj]
    attrs = getattr(obj, "__dict__", None)
    found = [(v, f"{path}.{k}") for k, v in attrs.items()] if isinstance(attrs, dict) else []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                found.append((getattr(obj, name), f"{path}.{name}"))
    cells = getattr(obj, "__closure__", None) or ()
    names = getattr(getattr(obj, "__code__", None), "co_freevars", ())
    for name, cell in zip(names, cells, strict=False):
        try:
            found.append((cell.cell_contents, f"{path}'s closure variable {name!r}"))
        except ValueError:  # an empty cell
            continue
    return found
