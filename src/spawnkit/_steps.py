"""What a worker is doing right now, as a label on the imports it makes: the *step*.

A stage name, ``plugin:<name>``, ``preload:<module>`` or ``startup``; the import guard stamps it
on every first import. Below both the hooks and the bootstrap so neither imports the other;
standard library only, since the child's command line imports it first.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = [
    "LAUNCHER_MODULES", "PLUGIN", "PRELOAD", "STARTUP", "activating", "activating_in",
    "current_step",
    "mark_plugins_began", "platform_activate",
    "plugin_step", "plugins_began", "preload_step", "set_step", "split_step", "stage_of", "step",
    "blame", "who",
]  # fmt: skip

STARTUP = "startup"
PLUGIN = "plugin"
PRELOAD = "preload"

# Read by the import guard's finder once per new module: a plain global, not a getter.
_step = STARTUP
_plugins_began: frozenset[str] | None = None
# The platform plugin whose activate() runs now, its namespace's general plugin group, and
# the frame that called it.
_activating: tuple[str, str, FrameType] | None = None


#: A warm server importing the launcher's own modules (``warm.launcher_modules``): a preload
#: nobody listed, named so that a hang or a thread there is not blamed on the stage before it.
LAUNCHER_MODULES = f"{PRELOAD}:(the launcher's modules)"


def plugin_step(name: str) -> str:
    return f"{PLUGIN}:{name}"


def preload_step(module: str) -> str:
    return f"{PRELOAD}:{module}"


def split_step(label: str) -> tuple[str, str]:
    """``(kind, name)``: the inverse of :func:`plugin_step` / :func:`preload_step`."""
    kind, sep, name = label.partition(":")
    if sep and kind in (PLUGIN, PRELOAD):
        return kind, name
    return label, ""


def set_step(name: str) -> str:
    """Label the imports that follow; returns the previous label."""
    global _step
    previous, _step = _step, name
    return previous


@contextmanager
def step(name: str) -> Iterator[None]:
    previous = set_step(name)
    try:
        yield
    finally:
        set_step(previous)


def current_step() -> str:
    return _step


@contextmanager
def activating(plugin: str, plugin_group: str, caller: FrameType) -> Iterator[None]:
    """While a platform plugin's ``activate()`` runs: it may only answer which platform.

    ``plugin`` names it (with its entry point and distribution); ``plugin_group`` is where a
    general plugin of its namespace is declared; ``caller`` is the frame that calls it.  The
    hooks registry reads this, below both.
    """
    global _activating
    previous, _activating = _activating, (plugin, plugin_group, caller)
    try:
        yield
    finally:
        _activating = previous


def platform_activate() -> tuple[str, str] | None:
    """``(plugin, general plugin group)`` while a platform plugin's ``activate()`` itself, not a
    module it imports, runs the calling code.

    A platform package may register hooks as it is imported (its worker imports it again to
    build the platform, and registers them there); a function that registers hooks when called
    is a general plugin's, declared in the wrong group, and its hooks reach no worker.
    """
    if _activating is None:
        return None
    plugin, group, caller = _activating
    frame = sys._getframe(1)
    while frame is not None and frame is not caller:
        if frame.f_code.co_name == "<module>":  # a module's body, run by an import
            return None
        frame = frame.f_back  # type: ignore[assignment]
    return plugin, group


def activating_in(thread: int) -> str | None:
    """``<plugin>: activate() has not returned, at file:line`` while thread ``thread`` runs a
    platform plugin's ``activate()`` (the line in ``activate()`` itself); None otherwise.  For
    a watcher that finds discovery slow (doctor's ``--timeout``, a launch's ``ready_timeout``)."""
    running = _activating
    if running is None:
        return None
    plugin, _group, caller = running
    frame = sys._current_frames().get(thread)
    while frame is not None and frame.f_back is not None and frame.f_back is not caller:
        frame = frame.f_back
    at = f", at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
    return f"{plugin}: activate() has not returned{at}"


def mark_plugins_began() -> frozenset[str]:
    """Snapshot ``sys.modules`` as plugin loading starts: what the guard calls "too early"."""
    global _plugins_began
    _plugins_began = frozenset(sys.modules)
    return _plugins_began


def plugins_began() -> frozenset[str] | None:
    """The last :func:`mark_plugins_began` snapshot; ``None`` before plugins loaded."""
    return _plugins_began


def stage_of(step: str) -> str:
    """The stage a status step belongs to (a plugin's: ``load_plugins``; a preload's: preload)."""
    kind, _name = split_step(step)
    return {
        PLUGIN: "load_plugins",
        PRELOAD: "preload",
        STARTUP: "preload",
    }.get(kind, step)


def who(step: str) -> str:
    """Who ran during ``step``, for a refusal that blames it (``""``: not known)."""
    if step == LAUNCHER_MODULES:
        return "one of the launcher's own modules (imported by the server for its workers)"
    kind, name = split_step(step)
    if kind == PLUGIN:
        return f"plugin {name!r}"
    if kind == PRELOAD:
        return f"preload module {name!r}"
    return f"stage {step!r}" if step else ""


def blame(step: str) -> tuple[str, str]:
    """``(who, stage)`` for a refusal of what ``step`` left behind in a warm server."""
    return who(step), stage_of(step) if step else "preload"
