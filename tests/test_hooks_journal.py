"""A failed undo is reported by what it changed, never by the whole dict it changed it in."""

from __future__ import annotations

from typing import Any

from spawnkit.hooks._journal import Journal


class _RefusesWrites(dict[str, Any]):
    """A namespace that took the patch but refuses the undo (a frozen mapping, say)."""

    def __setitem__(self, key: str, value: Any) -> None:
        if getattr(self, "frozen", False):
            raise TypeError("this namespace is read-only now")
        super().__setitem__(key, value)


def test_a_failed_undo_names_the_binding_without_the_module_globals() -> None:
    globals_like = _RefusesWrites({f"name{i}": i for i in range(2000)})
    globals_like["target"] = "original"
    journal = Journal()
    journal.rebind("some.module", globals_like, "target", "patched")
    globals_like.frozen = True  # type: ignore[attr-defined]

    problems = journal.rollback()

    assert len(problems) == 1
    assert "some.module" in problems[0] and "'target'" in problems[0]
    assert "read-only now" in problems[0]
    assert "name1999" not in problems[0]  # the 2000 other names are not in the message
    assert len(problems[0]) < 500
