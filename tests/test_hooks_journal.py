"""A failed undo is reported by what it changed, never by the whole dict it changed it in."""

from __future__ import annotations

from typing import Any

from spawnkit.hooks._journal import Journal


class _RefusesWrites:
    """A namespace that took the patch but refuses the undo (a class's attributes, set
    through ``ClassAttrs``, once the class was made immutable, say).  Not a dict: a dict or
    list is set through the built-in type's own method, past a subclass's checks."""

    def __init__(self, items: dict[str, Any]) -> None:
        self.items, self.frozen = items, False

    def get(self, key: str, default: Any) -> Any:
        return self.items.get(key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        if self.frozen:
            raise TypeError("this namespace is read-only now")
        self.items[key] = value

    def __repr__(self) -> str:
        return repr(self.items)


def test_a_failed_undo_names_the_binding_without_the_module_globals() -> None:
    globals_like = _RefusesWrites({f"name{i}": i for i in range(2000)})
    globals_like["target"] = "original"
    journal = Journal()
    journal.rebind("some.module", globals_like, "target", "patched")
    globals_like.frozen = True

    problems = journal.rollback()

    assert len(problems) == 1
    assert "some.module" in problems[0] and "'target'" in problems[0]
    assert "read-only now" in problems[0]
    assert "name1999" not in problems[0]  # the 2000 other names are not in the message
    assert len(problems[0]) < 500
