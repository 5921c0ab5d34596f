"""Opaque payload bytes: the engine's arguments, carried through a spawn untouched.

multiprocessing unpickles a target's arguments *before* calling it, so an
engine's ``ServerArgs`` passed directly would import the engine's config graph
(and with it hook targets) before any plugin ran.  Wrapping it in ``Payload``
keeps it as bytes until the bootstrap has applied hooks.
"""

from __future__ import annotations

import pickle
import zlib

from spawnkit._compat import TYPE_CHECKING
from spawnkit.errors import BootstrapError, BootstrapOrderError
from spawnkit.spec import _phase
from spawnkit.spec._record import field, record

if TYPE_CHECKING:
    from typing import Any, TypeVar, overload
else:
    from spawnkit._compat import TypeVar

__all__ = ["Payload"]

T = TypeVar("T")


#: The bootstrap stage that materializes a payload, named by its errors;
#: ``bootstrap.stages.Stage.PAYLOAD`` takes its value from here (the spec sits below the bootstrap).
PAYLOAD_STAGE = "materialize_payload"

#: What unpickling skips: construction and the post-construction steps dataclasses, attrs and
#: pydantic run from it (``__new__`` is called, ``__setstate__`` runs: hooks there do run).
#: Here, below the hooks that record them at capture and the bootstrap that checks them.
CONSTRUCTORS = frozenset({"__init__", "__post_init__", "__attrs_post_init__", "model_post_init"})


def _unpickle_error(type_name: str, data: bytes, exc: Exception) -> BootstrapError:
    """The payload's unpickling failure, naming the class that failed, where in the payload it
    sits and the fix (found only now, by unpickling it again: the success path pays nothing)."""
    from spawnkit.spec import _unpickle_where
    from spawnkit.spec._capture import _path_to  # failure path only

    found = _unpickle_where.find(data, _path_to)
    cause = f"{type(exc).__name__}: {exc}"
    at = f" at {found.where}" if found and found.where else " (somewhere inside the payload)"
    if found is None and not isinstance(exc, ImportError | AttributeError):
        text = f"Payload ({type_name}) could not be unpickled: {cause}"
    elif found is None or found.how == "import":
        what = f" {found.name}{at}" if found else ""
        text = (
            f"Payload ({type_name}) refers to code this process cannot import:{what}: {cause}. "
            + _import_fix(found.name if found else "", exc)
        )
    elif found.how == "setstate":
        text = (
            f"Payload ({type_name}) could not be unpickled: {found.name}{at} raised in its "
            f"__setstate__: {cause}. Make {found.name}.__setstate__ work in the worker, or "
            "leave that object out of the payload and pass what the entry needs to build it "
            "there (a module:attribute reference, or a factory's arguments)."
        )
    else:
        text = (
            f"Payload ({type_name}) could not be unpickled: {found.name}{at} raised while its "
            f"pickle rebuilt it (its __reduce__ call): {cause}. Make it rebuild in the worker, "
            "or leave that object out of the payload and pass what the entry needs to build it "
            "there (a module:attribute reference, or a factory's arguments)."
        )
    return BootstrapError(text, stage=PAYLOAD_STAGE, kind="payload")


def _import_fix(name: str, exc: BaseException) -> str:
    """How to make a class the worker cannot import reach it."""
    if isinstance(exc, ImportError):
        return (
            "Install the package that defines it in the worker's environment (a module the "
            "launcher made at run time, or found on a path only it has, is not importable "
            "there), or capture it by value."
        )
    return (
        f"The worker's module defines no {name.rpartition('.')[2] or 'such name'}: renamed or "
        "moved since the payload was captured, or another version installed where the worker "
        "runs; run the same code in the launcher and the workers, or capture it by value."
    )


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
    none of this one's constructor hooks.  ``instances``: ``(module.NAME, path)`` of each
    module-level instance the captured object held (``spec/_held_instances``), which a worker
    gets as a copy that a hook on the module's object's attributes never reaches.
    """

    data: bytes = field(repr=False)
    type_name: str
    digest: str = field(repr=False)
    by_value: bool = False
    hooked: tuple[tuple[str, str], ...] = ()
    instances: tuple[tuple[str, str], ...] = ()

    @classmethod
    def capture(cls, obj: Any, *, by_value: bool | None = None) -> Payload:
        """Pickle ``obj`` now, in the parent, so the child receives only bytes.

        ``by_value=None`` picks plain pickle when it can take the object by
        reference to an importable module, cloudpickle otherwise.
        """
        from spawnkit._flags import check_flag
        from spawnkit._names import qualified_name  # parent side: not on the unpickling path
        from spawnkit.spec import _capture
        from spawnkit.spec._held_instances import class_refs, held_instances

        check_flag("by_value", by_value, call="Payload.capture", none=_capture._BY_VALUE_NONE)

        type_name = qualified_name(type(obj))
        data: bytes | None = None
        refs: set[tuple[str, str]] | None = None
        used_value = False
        if by_value is not True:
            try:
                data = _capture._dumps(obj)
            except (pickle.PicklingError, AttributeError, TypeError, RuntimeError) as exc:
                refused = _capture._refused(type_name, obj, exc)
                if refused is not None:
                    raise refused from refused.__cause__
                if isinstance(exc, RuntimeError):
                    raise
                if by_value is False:
                    raise BootstrapError(
                        f"cannot capture a {type_name} payload with plain pickle: {exc}. "
                        "Pass by_value=None (the default) to let cloudpickle take it by value.",
                        kind="payload",
                    ) from exc
                data = None
            refs = class_refs(data) if data is not None and by_value is None else None
            if refs is not None and _capture._references_main(refs):
                data = refs = None
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
                data = _capture._by_value(cloudpickle, obj)
            except Exception as exc:
                refused = _capture._refused(type_name, obj, exc)
                if refused is not None:
                    raise refused from refused.__cause__
                raise BootstrapError(
                    f"cannot capture a {type_name} payload, even by value with cloudpickle: "
                    f"{type(exc).__name__}: {exc}. Make the object picklable (define it at a "
                    "module's top level, or give its class __reduce__).",
                    kind="payload",
                ) from exc
            used_value = True
        held = held_instances(obj, data, _capture._path_to, refs)
        return cls(data, type_name, _checksum(data), used_value, _phase.built_hooked(), held)

    @classmethod
    def from_pickled(cls, data: bytes, type_name: str, *, by_value: bool = False) -> Payload:
        """Wrap bytes that are already a pickle (a payload file, say), recording their checksum."""
        return cls(data=data, type_name=type_name, digest=_checksum(data), by_value=by_value)

    @property
    def size(self) -> int:
        return len(self.data)

    if TYPE_CHECKING:  # the stubs are for type checkers only: no typing.overload at run time

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
        except Exception as exc:
            raise _unpickle_error(self.type_name, self.data, exc) from exc
        if expected_type is not None and not isinstance(obj, expected_type):
            from spawnkit._names import qualified_name  # failure path only

            held, wanted = qualified_name(type(obj)), qualified_name(expected_type)
            raise TypeError(f"payload holds a {held}, but a {wanted} was expected")
        return obj
