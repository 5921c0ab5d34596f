"""A platform one test decided in this process is forgotten when that test ends.

A namespace decides and builds its platform once per process (``PlatformManager``), and a
spawned worker decides afresh from its own ``<PREFIX>_PLATFORM``.  So a test that read
``current_platform`` (or ran anything that did) without the ``platform_selection`` fixture
pinned that platform for every later test of the session: a later test that selected another
one through ``monkeypatch.setenv`` got the worker it asked for from ``run_entry`` and the
earlier test's platform in process, an assertion comparing them failing (or passing) far
from its cause.  The pytest plugin takes a snapshot of every manager's decisions as a test's
setup begins (taking in what a module- or session-scoped fixture decides, which is the
suite's) and, after its teardown, resets each manager whose decisions the test changed, as
``platform_selection`` does, except for a namespace whose ``bootstrap_here()`` the test left
applied (its hooks were decided with that platform and stay).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

__all__ = ["Decisions", "decisions", "forget_since", "taking_in"]

#: manager -> (the platform it built, or None; its pin; the selections it holds)
Decisions = dict[Any, tuple[Any, Any, frozenset[Any]]]
_NONE: tuple[Any, Any, frozenset[Any]] = (None, None, frozenset())


def decisions() -> Decisions:
    """What each platform manager of this process has decided so far (nothing is built)."""
    from spawnkit.platforms.discovery import decisions_for_tests

    return dict(decisions_for_tests())


def taking_in(before: Decisions, ahead: Decisions, after: Decisions) -> Decisions:
    """``before`` with what a suite's fixture decided between ``ahead`` and ``after``."""
    taken = dict(before)
    for manager, state in after.items():
        if ahead.get(manager) != state:
            taken[manager] = state
    return taken


def forget_since(before: Decisions, kept: Collection[str]) -> list[str]:
    """Reset every manager that built or pinned a platform since ``before`` (one made since,
    too), but those of the namespaces ``kept``; one that only selected (``select()``,
    ``explain()``) forgets those selections and keeps a platform built before.  Returns the
    namespaces reset."""
    from spawnkit.platforms.discovery import forget_selections_for_tests

    reset: list[str] = []
    for manager, (built, pinned, selections) in decisions().items():
        was = before.get(manager, _NONE)
        name = str(manager.namespace.name)
        if (built, pinned, selections) == was or name in kept:
            continue
        if built is not was[0] or pinned != was[1]:
            manager.reset_for_tests()
            reset.append(name)
            continue
        forget_selections_for_tests(manager, selections - was[2])
    return reset
