"""Entry resolution: a ``module:qualname`` string (or a by-value object) to the callable to run.

Called by the ``resolve_entry`` stage, after hooks, so the entry read is the patched one.
"""

from __future__ import annotations

from collections.abc import Callable

from spawnkit import _reference
from spawnkit._compat import TYPE_CHECKING
from spawnkit._names import qualified_name
from spawnkit.errors import EntryResolutionError
from spawnkit.hooks._chain import called_function

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


#: ``inspect``'s code flags (``inspect`` itself is a heavy import for a worker)
_GENERATOR, _COROUTINE, _ASYNC_GENERATOR = 0x20, 0x80, 0x200


def refuse_unrun(obj: object, what: str, stage: str = "") -> None:
    """Refuse an entry whose call would run none of its body: an ``async def`` (a coroutine
    nothing awaits) or a generator function (a generator nothing iterates)."""
    called = called_function(obj)
    flags = called.__code__.co_flags if called is not None else 0
    if not flags & (_COROUTINE | _GENERATOR | _ASYNC_GENERATOR):
        return
    name = called.__name__ if called is not None else "entry"
    if flags & _COROUTINE:
        kind, fix = "an `async def` function", f"asyncio.run({name}(*args))"
    else:
        kind, fix = "a generator function", f"list({name}(*args))"
    raise EntryResolutionError(
        f"{what} is {kind}: calling it runs none of its body (a worker calls its entry and "
        f"sends back what it returns; it neither awaits nor iterates it). Make the entry a "
        f"plain function that runs it: `def main(*args): return {fix}`.",
        stage=stage,
    )


def by_value(obj: object) -> Callable[..., Any]:
    """The entry sent by value, refused unless callable and run by a call."""
    if not callable(obj):
        raise EntryResolutionError(
            f"the by-value entry holds a {qualified_name(obj)}, which is not callable; "
            "pass a function or a callable object as the entry"
        )
    refuse_unrun(obj, f"the by-value entry {qualified_name(obj)}")
    return obj


def by_reference(reference: str) -> Callable[..., Any]:
    """``module:qualname`` -> the callable, with errors that say what to change."""
    try:
        module_name, qualname = _reference.parse(reference)
        obj = _reference.resolve(module_name, qualname)
    except _reference.BadReference as exc:
        fix = (
            "Define it at module level, or pass the callable itself so spawnkit sends it by value."
            if "<locals>" in reference
            else "Name it as 'module:function', for example 'mypkg.worker:main'."
        )
        raise EntryResolutionError(f"entry {reference!r}: {exc.why}. {fix}") from None
    except _reference.ImportFailed as exc:
        raise EntryResolutionError(
            f"entry {reference!r}: module {exc.module!r} failed to import "
            f"({type(exc.cause).__name__}: {exc.cause}). Install it in the worker's environment "
            "or fix the entry string."
        ) from exc.cause
    except _reference.MissingAttribute as exc:
        names = [n for n in dir(exc.owner) if not n.startswith("__")]
        import difflib  # only on this error path

        close = difflib.get_close_matches(exc.missing, names, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise EntryResolutionError(f"entry {reference!r}: {exc}.{hint}") from None
    if not callable(obj):
        raise EntryResolutionError(
            f"entry {reference!r} resolves to a {qualified_name(obj)}, which is not callable"
        )
    refuse_unrun(obj, f"entry {reference!r}")
    return obj  # type: ignore[no-any-return]
