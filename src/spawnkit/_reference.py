"""A ``"module:qualname"`` reference: the one parser and resolver for every string naming an object.

Each caller wraps a failure into its own error type with its own context and fix. On the
worker's cold path, so it imports nothing beyond :mod:`importlib`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "BadReference", "ImportFailed", "MissingAttribute", "parse", "reference_to", "resolve",
    "resolve_name", "top_packages", "walk",
]  # fmt: skip


class BadReference(ValueError):
    """A reference string is misspelled; ``why`` says which part, for the caller's message."""

    def __init__(self, reference: object, why: str) -> None:
        super().__init__(f"{reference!r} is not a 'module:qualname' reference: {why}")
        self.reference = reference
        self.why = why


class ImportFailed(Exception):
    """Importing a reference's module raised ``cause`` (also its ``__cause__``)."""

    def __init__(self, module: str, cause: BaseException) -> None:
        super().__init__(f"importing module {module!r} raised {type(cause).__name__}: {cause}")
        self.module = module
        self.cause = cause


class MissingAttribute(AttributeError):
    """The walk reached ``owner`` (spelled ``walked``) and found no attribute ``name`` on it."""

    def __init__(self, owner: Any, walked: str, name: str) -> None:
        super().__init__(f"{walked} has no attribute {name!r}")
        self.owner = owner
        self.walked = walked
        self.missing = name


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def parse(reference: object, *, module_only: bool = False) -> tuple[str, str]:
    """``(module, qualname)`` of ``"pkg.mod:Qual.name"`` (``module_only``: or ``"pkg.mod"``)."""
    if not isinstance(reference, str):
        raise BadReference(reference, f"expected a string, got {type(reference).__name__}")
    module, sep, qualname = reference.partition(":")
    module, qualname = module.strip(), qualname.strip()
    if not _dotted(module):
        why = "the module part (before ':')" if sep else "the module"
        raise BadReference(reference, f"{why} is not a dotted module name")
    if not sep and module_only:
        return module, ""
    if not sep:
        raise BadReference(reference, "it has no ':' between the module and the name in it")
    if "<locals>" in qualname.split("."):
        raise BadReference(
            reference,
            "it names a function defined inside another function, which no other process "
            "can import",
        )
    if not _dotted(qualname):
        raise BadReference(reference, "the name after ':' is not a dotted Python name")
    return module, qualname


def walk(obj: Any, qualname: str, walked: str) -> Any:
    """``obj.a.b`` for qualname ``"a.b"``; ``walked`` spells ``obj`` in the error."""
    for part in filter(None, qualname.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise MissingAttribute(obj, walked, part) from None
        walked = f"{walked}.{part}"
    return obj


def resolve(module: str, qualname: str) -> Any:
    """Import ``module`` and walk ``qualname``; a walk's own exception propagates unchanged."""
    try:
        obj = importlib.import_module(module)
    except Exception as exc:
        raise ImportFailed(module, exc) from exc
    return walk(obj, qualname, module)


def resolve_name(name: str) -> Any:
    """What ``pkgutil.resolve_name(name)`` returns, raising what it raises.

    A ``"module:qualname"`` string (every built-in platform's, most plugins') is imported and
    walked here; anything else (``"pkg.mod.Class"``, vLLM's spelling) goes to ``pkgutil``.  On a
    worker's path: importing ``pkgutil`` and compiling its pattern on first use cost 0.6 ms of
    every cold worker that resolved a platform class.
    """
    module, sep, qualname = name.partition(":")
    if not (sep and _dotted(module) and (not qualname or _dotted(qualname))):
        import pkgutil

        return pkgutil.resolve_name(name)
    obj = importlib.import_module(module)
    for part in qualname.split(".") if qualname else ():
        obj = getattr(obj, part)
    return obj


def reference_to(obj: Any) -> str:
    """The ``"module:qualname"`` reference that :func:`parse` and :func:`resolve` read back."""
    return f"{obj.__module__}:{obj.__qualname__}"


def top_packages(references: Iterable[str]) -> set[str]:
    """The top-level packages that references (hook targets, ``pkg.mod:Qual`` or dotted) are
    in: the engine's code, as the checks of a process's children tell it from a library's;
    never spawnkit's own or ``__main__``."""
    return {ref.partition(":")[0].partition(".")[0] for ref in references} - _NOT_PACKAGES


_NOT_PACKAGES = frozenset({"", "spawnkit", "__main__"})
