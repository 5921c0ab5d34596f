"""What differs between the Python versions spawnkit supports (3.10 and up), in one place."""

from __future__ import annotations

__all__ = ["add_note"]


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

