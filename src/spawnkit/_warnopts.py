"""``-W`` / ``PYTHONWARNINGS`` entries that name spawnkit's warning categories, applied late.

Python drops them at start-up ("invalid module name: 'spawnkit'"), so ``spawnkit/__init__``
installs them again; the entries after the first such one are reinstalled in order, so a later
``-W`` keeps its precedence. No module is imported to resolve a category.
"""

from __future__ import annotations

import os
import sys
import types

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["reapply", "user_stacklevel"]

_ACTIONS = ("default", "always", "ignore", "module", "once", "error")


def reapply() -> int:
    """Install the ``sys.warnoptions`` entries Python could not (see above); how many."""
    options = list(getattr(sys, "warnoptions", ()) or ())
    first = next((i for i, o in enumerate(options) if "spawnkit." in o), None)
    if first is None:  # the common case: nothing to parse, nothing imported
        return 0
    import warnings  # only now: the common case above imports nothing

    done = 0
    for option in options[first:]:
        parsed = _parse(option)
        if parsed is not None:
            action, message, category, module, lineno = parsed
            warnings.filterwarnings(action, message, category, module, lineno)
            done += 1
    return done


def _parse(option: str) -> tuple[Any, str, type[Warning], str, int] | None:
    """``action:message:category:module:lineno`` as ``warnings`` reads it; None if unusable."""
    import re

    parts = [p.strip() for p in option.split(":")]
    if len(parts) > 5:
        return None
    parts += [""] * (5 - len(parts))
    action_text, message, category_text, module, line_text = parts
    action = (
        next((a for a in _ACTIONS if a.startswith(action_text)), None) if action_text else "default"
    )
    category = _category(category_text)
    try:
        lineno = int(line_text) if line_text else 0
    except ValueError:
        return None
    if action is None or category is None or lineno < 0:
        return None
    return action, re.escape(message), category, re.escape(module) + r"\Z" if module else "", lineno


def _category(text: str) -> type[Warning] | None:
    """The category an entry names: a builtin, a ``spawnkit.X`` export, or one already imported."""
    if not text:
        return Warning
    modname, _, name = text.rpartition(".")
    if modname == "spawnkit":
        from spawnkit import errors

        found = getattr(errors, name, None) if name in errors.__all__ else None
    elif not modname:
        import builtins

        found = getattr(builtins, name, None)
    else:
        module = sys.modules.get(modname)
        found = getattr(module, name, None) if module is not None else None
    return found if isinstance(found, type) and issubclass(found, Warning) else None


def user_stacklevel(through: tuple[str, ...] = ()) -> int:
    """``stacklevel`` pointing the caller's warning at the first frame outside spawnkit, and
    outside the packages ``through`` names (``"multiprocessing"``: its modules), so that a
    warning raised under a library the user called lands on the user's line, where a
    module-scoped ``-W`` filter matches it.

    Inside a worker, where every frame is spawnkit's, it stays on the warning's own line; where
    every frame past spawnkit's is one of ``through``, on the first of those.
    """
    root = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame = frame.f_back
        level += 1
    if frame is None:
        return 1
    first = level
    past: types.FrameType | None = frame
    while past is not None and _within(str(past.f_globals.get("__name__", "")), through):
        past = past.f_back
        level += 1
    return level if past is not None else first


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)
