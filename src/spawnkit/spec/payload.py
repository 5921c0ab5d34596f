"""Opaque payload bytes: the engine's arguments, carried through a spawn untouched.

multiprocessing unpickles a target's arguments *before* calling it, so an
engine's ``ServerArgs`` passed directly would import the engine's config graph
(and with it hook targets) before any plugin ran.  Wrapping it in ``Payload``
keeps it as bytes until the bootstrap has applied hooks.
"""

from __future__ import annotations

import pickle
import zlib
from types import MethodType
from typing import Any, TypeVar, overload

from spawnkit.errors import BootstrapError, BootstrapOrderError
from spawnkit.spec import _phase
from spawnkit.spec._record import field, record

__all__ = ["Payload"]

T = TypeVar("T")

_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})


#: The bootstrap stage that materializes a payload, named by its errors;
#: ``bootstrap.stages.Stage.PAYLOAD`` takes its value from here (the spec sits below the bootstrap).
PAYLOAD_STAGE = "materialize_payload"

#: What unpickling skips: construction and the post-construction steps dataclasses, attrs and
#: pydantic run from it (``__new__`` is called, ``__setstate__`` runs: hooks there do run).
#: Here, below the hooks that record them at capture and the bootstrap that checks them.
CONSTRUCTORS = frozenset({"__init__", "__post_init__", "__attrs_post_init__", "model_post_init"})


def _references_main(data: bytes) -> bool:
    """Whether a pickle refers to ``__main__`` by name, which a spawned child cannot honour.

    A spawned child re-imports the launching script as ``__mp_main__``, and a
    reference to ``__main__.Thing`` may then fail or, worse, re-run script code
    before hooks are applied; such objects go by value instead.
    """
    import pickletools  # parent side only: workers never capture

    strings: list[str] = []
    for opcode, arg, _pos in pickletools.genops(data):
        name = opcode.name
        if name in ("GLOBAL", "INST") and isinstance(arg, str):
            if arg.split(" ", 1)[0] in _MAIN_MODULES:
                return True
        elif name == "STACK_GLOBAL":
            if len(strings) >= 2 and strings[-2] in _MAIN_MODULES:
                return True
        elif name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8") and isinstance(
            arg, str
        ):
            strings.append(arg)
    return False


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
        _BY_VALUE = type("_FilesRefused", (base,), {"dispatch_table": table})
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


def _path_to(root: Any, target: Any, limit: int = 20000) -> str:
    """Where ``target`` sits in ``root`` (``payload.log``, ``payload['files'][0]``), found by
    a bounded walk of containers and attributes; ``""`` when not found within ``limit``."""
    from collections import deque

    queue: deque[tuple[Any, str]] = deque([(root, "payload")])
    seen: set[int] = set()
    while queue and len(seen) < limit:
        obj, path = queue.popleft()
        if obj is target:
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


def _checksum(data: bytes) -> str:
    """Length and CRC-32: enough to catch truncation and corruption in transit.

    Not a signature (``spawnkit.spec.signing`` signs spec files); CRC-32 rather
    than a cryptographic hash keeps OpenSSL's import out of every worker.
    """
    return f"{len(data)}:{zlib.crc32(data):08x}"


@record(frozen=True, slots=True)
class Payload:
    """Pickled bytes with their checksum and the captured object's type name.

    ``by_value`` says whether cloudpickle was needed (lambdas, closures,
    objects defined in ``__main__``); such payloads import cloudpickle when
    materialized.  ``hooked``: ``(namespace, target)`` of each constructor (and class REPLACE)
    the capturing process had applied, so the objects it built ran them; a worker names each
    hooked constructor of its namespace not among them (``bootstrap/_payload_hooks``).  Per
    namespace and target, not one flag: a launcher that bootstrapped another namespace ran
    none of this one's constructor hooks.
    """

    data: bytes = field(repr=False)
    type_name: str
    digest: str = field(repr=False)
    by_value: bool = False
    hooked: tuple[tuple[str, str], ...] = ()

    @classmethod
    def capture(cls, obj: Any, *, by_value: bool | None = None) -> Payload:
        """Pickle ``obj`` now, in the parent, so the child receives only bytes.

        ``by_value=None`` picks plain pickle when it can take the object by
        reference to an importable module, cloudpickle otherwise.
        """
        from spawnkit._names import qualified_name  # parent side: not on the unpickling path

        type_name = qualified_name(type(obj))
        data: bytes | None = None
        used_value = False
        if by_value is not True:
            try:
                data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                if by_value is False:
                    raise BootstrapError(
                        f"cannot capture a {type_name} payload with plain pickle: {exc}. "
                        "Pass by_value=None (the default) to let cloudpickle take it by value.",
                        kind="payload",
                    ) from exc
                data = None
            if data is not None and by_value is None and _references_main(data):
                data = None
        if data is None:
            try:
                import cloudpickle
            except ImportError as exc:  # pragma: no cover - cloudpickle is a dependency
                raise BootstrapError(
                    f"a {type_name} payload needs cloudpickle (it is defined in __main__ or is "
                    "a lambda/closure), but cloudpickle is not installed: pip install cloudpickle",
                    kind="payload",
                ) from exc
            try:
                data = _by_value(cloudpickle, obj)
            except _Copied as exc:
                text = _copied_text(type_name, obj, exc.obj)
                raise BootstrapError(text, kind="payload") from None
            except Exception as exc:
                raise BootstrapError(
                    f"cannot capture a {type_name} payload, even by value with cloudpickle: "
                    f"{type(exc).__name__}: {exc}. Make the object picklable (define it at a "
                    "module's top level, or give its class __reduce__).",
                    kind="payload",
                ) from exc
            used_value = True
        hooked = _phase.built_hooked()
        return cls(data, type_name, _checksum(data), by_value=used_value, hooked=hooked)

    @classmethod
    def from_pickled(cls, data: bytes, type_name: str, *, by_value: bool = False) -> Payload:
        """Wrap bytes that are already a pickle (a payload file, say), recording their checksum."""
        return cls(data=data, type_name=type_name, digest=_checksum(data), by_value=by_value)

    @property
    def size(self) -> int:
        return len(self.data)

    @overload
    def materialize(self, expected_type: None = None) -> Any: ...

    @overload
    def materialize(self, expected_type: type[T]) -> T: ...

    def materialize(self, expected_type: type[Any] | None = None) -> Any:
        """Unpickle the object; in a worker, only after the bootstrap applied hooks.

        Unpickling imports the object's modules, which may be hook targets, so
        doing it earlier would bind unpatched code: that is refused with
        ``BootstrapOrderError``.
        """
        if _phase.too_early():
            raise BootstrapOrderError(
                f"Payload ({self.type_name}) materialized before the bootstrap applied hooks. "
                "Unpickling imports the payload's modules, which would then hold unpatched "
                "code. Materialize it in the entry function or after apply_plugin_hooks().",
                stage=PAYLOAD_STAGE,
            )
        actual = _checksum(self.data)
        if actual != self.digest:
            raise BootstrapError(
                f"Payload ({self.type_name}, {len(self.data)} bytes) is corrupt or truncated: "
                f"checksum {actual} does not match the {self.digest} recorded at capture. "
                "The bytes were changed after Payload.capture(); capture the object again.",
                stage=PAYLOAD_STAGE,
                kind="payload",
            )
        try:
            obj = pickle.loads(self.data)
        except (ImportError, AttributeError) as exc:
            raise BootstrapError(
                f"Payload ({self.type_name}) refers to code this process cannot import: "
                f"{type(exc).__name__}: {exc}. Install the package that defines it in the "
                "worker's environment, or capture it by value.",
                stage=PAYLOAD_STAGE,
                kind="payload",
            ) from exc
        except Exception as exc:
            raise BootstrapError(
                f"Payload ({self.type_name}) could not be unpickled: {type(exc).__name__}: {exc}",
                stage=PAYLOAD_STAGE,
                kind="payload",
            ) from exc
        if expected_type is not None and not isinstance(obj, expected_type):
            from spawnkit._names import qualified_name  # failure path only

            held, wanted = qualified_name(type(obj)), qualified_name(expected_type)
            raise TypeError(f"payload holds a {held}, but a {wanted} was expected")
        return obj
