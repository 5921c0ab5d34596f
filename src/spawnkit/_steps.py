"""What a worker is doing right now, as a label on the imports it makes: the *step*.

A step is a bootstrap stage's name, ``plugin:<name>`` while one plugin loads,
``preload:<module>`` while a warm-start server imports a preload module, or
``startup`` before the bootstrap.  The plugin loader (``spawnkit.hooks``)
and the warm-start server set it; the import guard (``spawnkit.bootstrap.guard``)
stamps it on every first import and reads it back to say who imported a hook
target.  It lives here, below both, so the hook engine labels its steps
without importing the bootstrap.  ("Phase" is something else: where the
process stands in a worker's bootstrap, ``spawnkit.spec._phase``.)

Standard library only, and cheap: the child's command line imports the guard,
and with it this module, before anything else.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "stage_of",
    "PLUGIN",
    "PRELOAD",
    "STARTUP",
    "current_step",
    "mark_plugins_began",
    "plugin_step",
    "plugins_began",
    "preload_step",
    "set_step",
    "split_step",
    "step",
]

STARTUP = "startup"
PLUGIN = "plugin"
PRELOAD = "preload"

# Read by the import guard's finder once per new module: a plain global, not a getter.
_step = STARTUP
_plugins_began: frozenset[str] | None = None


def plugin_step(name: str) -> str:
    """The step label while plugin ``name`` loads."""
    return f"{PLUGIN}:{name}"


def preload_step(module: str) -> str:
    """The step label while a warm-start server imports preload module ``module``."""
    return f"{PRELOAD}:{module}"


def split_step(label: str) -> tuple[str, str]:
    """``(kind, name)``: ``("plugin", plugin)``, ``("preload", module)``, else ``(label, "")``.

    The inverse of :func:`plugin_step` / :func:`preload_step`; a stage name
    and ``startup`` come back as the kind itself with no name.
    """
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
    """``set_step`` for a block, restored afterwards even when the block raises."""
    previous = set_step(name)
    try:
        yield
    finally:
        set_step(previous)


def current_step() -> str:
    return _step


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
