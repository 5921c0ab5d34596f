"""The ``spawnkit`` command (``spawnkit.cli:main``); subcommands import what they need lazily."""

from __future__ import annotations

from spawnkit.cli._app import main

__all__ = ["main"]
