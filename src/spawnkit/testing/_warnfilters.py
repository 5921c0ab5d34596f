"""The test's warning filters for spawnkit's categories, handed to ``run_entry``'s worker.

pytest keeps its ``-W`` options and ``filterwarnings`` in ``warnings.filters``, not in
``sys.warnoptions``, and a worker inherits only the latter (on its command line).  So a test run
with ``-W error::spawnkit.HookConflictWarning`` passed with the warning on the worker's captured
stderr while the production launcher under ``python -W error::...`` failed.  The filters that
apply to the categories a worker warns with travel as ``PYTHONWARNINGS`` entries, which every
worker installs as it imports spawnkit (``spawnkit._warnopts``; a warm server is started with
them, ``spawnkit._environ``).  Only what the test's filters say for those
categories travels: a suite without such filters starts its workers as before.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from spawnkit.errors import ConfigError

__all__ = ["forwarded"]

_REGEX = frozenset("\\.^$*+?{}[]|()")


#: The categories a worker (or a warm server, or a worker's child) issues, by README's table
#: "Warnings you can filter or escalate"; the others are issued in the launching process, the
#: test itself, where its filters apply already.
_IN_WORKERS = (
    "CustomOpWarning",
    "HookConflictWarning",
    "ImportGuardWarning",
    "PlainChildWarning",
)


def _categories() -> list[type[Warning]]:
    """The worker's categories, each one a ``-W`` entry names ``spawnkit.X``."""
    from spawnkit import errors

    found = [getattr(errors, name) for name in _IN_WORKERS]
    return [c for c in found if isinstance(c, type) and issubclass(c, Warning)]


def _literal(pattern: str) -> str | None:
    """The text a regular expression matches literally (as ``-W`` escapes it), or None."""
    text = re.sub(r"\\(.)", r"\1", pattern, flags=re.DOTALL)
    if re.escape(text) == pattern or not _REGEX & set(pattern):
        return text if text == text.strip() and not {",", ":"} & set(text) else None
    return None


def _named(category: type[Warning]) -> str:
    """How a ``-W`` entry names the category (``spawnkit.X``, its export)."""
    return "spawnkit." + category.__name__


def _entry(
    action: str, message: Any, category: type[Warning], module: Any, lineno: int
) -> str | None:
    """``action:message:spawnkit.X:module:lineno`` for one filter, or None if it has no such form:
    a ``-W`` message is a literal start of the text and its module a whole name."""
    text = "" if message is None else _literal(message.pattern)
    where: str | None = ""
    if module is not None:
        head = module.pattern[:-2] if module.pattern.endswith(r"\Z") else None
        where = _literal(head) if head else None
    if text is None or where is None:
        return None
    line = str(lineno) if lineno else ""
    return f"{action}:{text}:{_named(category)}:{where}:{line}".rstrip(":")


def forwarded() -> list[str]:
    """``PYTHONWARNINGS`` entries giving a worker this test's filters for spawnkit's categories,
    the lowest precedence first; ``[]`` when no filter names one (or a class above it)."""
    entries: list[str] = []
    for category in _categories():
        chain: list[str] = []
        for action, message, applies_to, module, lineno in warnings.filters:
            if not issubclass(category, applies_to):
                continue
            entry = _entry(action, message, category, module, lineno)
            if entry is None:
                if applies_to is category:
                    raise _cannot_forward(action, message, category, module)
                continue  # a broad filter (Warning, UserWarning) with a pattern: not spawnkit's
            chain.append(entry)
            if message is None and module is None and not lineno:
                break  # matches every warning of the category: the filters after it never do
        entries.extend(reversed(chain))
    return entries


def _cannot_forward(action: str, message: Any, category: type[Warning], module: Any) -> ConfigError:
    shown = ":".join(
        [action, "" if message is None else message.pattern, _named(category)]
        + ([module.pattern] if module is not None else [])
    )
    return ConfigError(
        f"run_entry: this test's warning filter {shown!r} applies to "
        f"{_named(category)}, which the worker issues, but it cannot reach the "
        "worker: a worker takes filters as -W / PYTHONWARNINGS entries, whose message is the "
        "literal start of the warning's text and whose module a whole module name, with no "
        "regular expression (nor ',' or ':'). The worker would run without it. Fix: write the "
        "filter with a literal message start (or none) and a whole module name (or none), "
        f"e.g. '{action}::{_named(category)}'.",
        setting="filterwarnings",
    )
