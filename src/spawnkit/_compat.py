"""What differs between the Python versions spawnkit supports (3.10 and up), in one place."""

from __future__ import annotations

__all__ = ["add_note", "format_exception"]


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on 3.10 (same ``__notes__``; its traceback omits them)."""
    method = getattr(exc, "add_note", None)
    if method is not None:
        method(note)
        return
    notes = getattr(exc, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        exc.__notes__ = notes  # type: ignore[attr-defined,unused-ignore]
    notes.append(note)


def format_exception(exc: BaseException) -> str:
    """``exc``'s traceback as text, its notes after its last line as 3.11 prints them; 3.10's
    ``traceback`` omits them, and the note naming the hook and plugin that raised
    (``hooks/_chain``) was missing from a child's traceback on 3.10 only."""
    import traceback  # a failure path only

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    notes = getattr(exc, "__notes__", None)
    if hasattr(BaseException, "add_note") or not isinstance(notes, list):
        return text
    # (the exceptiongroup backport, pytest's on 3.10, patches ``traceback`` to print them)
    return text + "".join(
        f"{note}\n" for note in notes if isinstance(note, str) and f"{note}\n" not in text
    )
